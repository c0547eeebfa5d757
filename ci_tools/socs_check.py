"""``socs --check``: compare the catalog with what the installed QNN toolchain itself reports.

Per chip, compile a one-node graph twice with the ONNX Runtime QNN EP: once naming the
chip (the EP's own name -> soc_model table) and once with the catalog's numeric ids, and
read ``ep_compatibility_info`` back from each stub.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import qnn_ep
from .socs import Catalog


@dataclass(frozen=True)
class Finding:
    soc: str
    field: str
    catalog: str
    toolchain: str
    note: str


def _tiny_graph(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8]) for n in ("a", "b", "c")]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "probe", vi[:2], vi[2:])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def check(catalog: Catalog) -> tuple[list[Finding], str]:
    findings: list[Finding] = []
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "probe.onnx"
        _tiny_graph(model)
        for soc in catalog.socs:
            ctx, _ = qnn_ep.compile_context(model, Path(tmp) / soc.name, "by_name",
                                            qnn_ep.htp_options(soc.name, None, fp16=False))
            by_name = qnn_ep.read_compat(ctx).soc_model
            if by_name == 0:
                findings.append(Finding(soc.name, "soc_model", str(soc.soc_model), "unknown name (0)",
                                        "the EP does not know this name; qnn-release passes the number"))
            elif by_name != soc.soc_model:
                findings.append(Finding(soc.name, "soc_model", str(soc.soc_model), str(by_name),
                                        "the EP's name table disagrees"))
            ctx, _ = qnn_ep.compile_context(model, Path(tmp) / soc.name, "by_id",
                                            qnn_ep.htp_options(soc.soc_model, soc.htp_arch, fp16=False))
            info = qnn_ep.read_compat(ctx)
            if info.soc_model != soc.soc_model or info.htp_arch != soc.htp_arch:
                findings.append(Finding(soc.name, "htp_arch/soc_model", f"{soc.htp_arch}/{soc.soc_model}",
                                        f"{info.htp_arch}/{info.soc_model}", "the binary is not for the asked chip"))
    return findings, qnn_ep.qnn_version()
