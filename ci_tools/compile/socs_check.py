"""``socs --check``: compare the catalog with what the installed QNN toolchain itself reports.

onnxruntime-qnn (when installed), from tiny one-node graphs compiled offline (no emulator run):

- its name table: every catalog chip name, every unbuilt name and every QNN enum name of the
  committed snapshot is compiled *by name*; the soc_model the stub records is the EP's answer;
- per build target: a quantized graph with the catalog's numbers (does the HTP backend know the
  soc_model?) and a float graph (does it accept fp16 ops for it?);
- the HTP archs the EP accepts (``htp_arch`` it does not parse is recorded as 0).

The QAIRT SDK at ``$QNN_SDK_ROOT`` (when set): its own ``backend_info.PyBackendInfo`` per chip
(socModel, dspArch, vtcmSizeinMB, supportsFp16), run with the SDK's Python (``$QNN_PYTHON``).

A disagreement the catalog explains (``toolchain_notes``, an unbuilt entry, a known limit of the
route) is listed as known with the reason; any other one makes the command exit 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from ..catalog.routes import ORT_EP_HTP_ARCHS
from ..catalog.socs import Catalog, Soc
from ..errors import BackendUnavailable, CompileError
from ..paths import MATRIX_DATA
from ..util import cmd
from ..util.text import clip

SNAPSHOT = MATRIX_DATA / "soc_sources.yaml"
EP = "onnxruntime-qnn"


@dataclass(frozen=True)
class Finding:
    soc: str
    field: str
    catalog: str
    toolchain: str
    note: str
    known: str | None = None  # the catalog's explanation; None: unexplained
    source: str = EP


@dataclass
class Report:
    toolchains: list[str] = field(default_factory=list)
    compared: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def unexplained(self) -> list[Finding]:
        return [f for f in self.findings if f.known is None]

    def as_dict(self) -> dict:
        return {"toolchains": self.toolchains, "compared": self.compared,
                "unexplained": len(self.unexplained), "findings": [asdict(f) for f in self.findings]}

    def text(self) -> str:
        from ..util.table import table

        lines = [f"compared {self.compared} build targets with: " + "; ".join(self.toolchains)]
        for title, rows in (("disagreements", self.unexplained),
                            ("known (explained by the catalog)", [f for f in self.findings if f.known])):
            if rows:
                lines += ["", f"{title}: {len(rows)}",
                          table(["soc", "source", "field", "catalog", "toolchain", "why"],
                                [(f.soc, f.source, f.field, f.catalog, f.toolchain, f.known or f.note) for f in rows])]
        lines.append(f"\n{len(self.unexplained)} unexplained disagreement(s)")
        return "\n".join(lines)


def _graphs(tmp: Path) -> tuple[Path, Path]:
    """A float Add (needs fp16 HTP ops) and the same Add quantized (QDQ, uint8)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def save(name, nodes, inits=()):
        vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8]) for n in ("a", "b", "y")]
        graph = helper.make_graph(nodes, name, vi[:2], vi[2:], list(inits))
        path = tmp / f"{name}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return path

    fp = save("float", [helper.make_node("Add", ["a", "b"], ["y"])])
    qp = [numpy_helper.from_array(np.array(0.01, np.float32), "s"),
          numpy_helper.from_array(np.array(128, np.uint8), "z")]
    nodes = []
    for n in ("a", "b"):
        nodes += [helper.make_node("QuantizeLinear", [n, "s", "z"], [n + "q"]),
                  helper.make_node("DequantizeLinear", [n + "q", "s", "z"], [n + "d"])]
    nodes += [helper.make_node("Add", ["ad", "bd"], ["c"]), helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
              helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"])]
    return fp, save("qdq", nodes, qp)


class _Ep:
    def __init__(self, tmp: Path):
        from . import qnn_ep

        self.qnn_ep, self.tmp, self.n = qnn_ep, tmp, 0
        self.float, self.qdq = _graphs(tmp)

    def compile(self, model: Path, soc_model: str | int, arch: int | None, fp16: bool):
        """(htp_arch, soc_model) the stub records, or None when the EP/backend refuses the graph."""
        self.n += 1
        into = self.qnn_ep.ContextFiles(out_dir=self.tmp / str(self.n), stem="probe")
        try:
            ctx, _ = self.qnn_ep.compile_context(model, into, self.qnn_ep.htp_options(soc_model, arch, fp16=fp16))
        except CompileError:
            return None
        info = self.qnn_ep.read_compat(ctx)
        return info.htp_arch, info.soc_model


def _ep_findings(catalog: Catalog, socs: list[Soc], full: bool, report: Report) -> None:
    from . import qnn_ep

    qnn_ep.qnn_version()  # BackendUnavailable when onnxruntime-qnn is missing
    report.toolchains.append(f"{EP} {qnn_ep.ep_package_version()} (QNN {qnn_ep.qnn_version()})")
    names = [s.name for s in socs]
    if full:
        enum = yaml.safe_load(SNAPSHOT.read_text())["tables"]["qnnh"]["rows"]
        names += [n for n in [*(u.name for u in catalog.unbuilt), *enum] if n not in names]
    with tempfile.TemporaryDirectory() as tmp:
        ep = _Ep(Path(tmp))
        _ep_name_table(ep, catalog, names, report)
        _ep_archs(ep, socs, report)
        _ep_targets(ep, catalog, socs, report)


def _ep_name_table(ep: _Ep, catalog: Catalog, names: list[str], report: Report) -> None:
    """1. The EP's name table (a quantized graph compiles for every soc_model it knows)."""
    by_name = {s.name: s for s in catalog.socs}
    unbuilt = {u.name: u for u in catalog.unbuilt}
    for name in names:
        got = ep.compile(ep.qdq, name, None, fp16=False)
        value = got[1] if got else 0
        soc = by_name.get(name)
        if soc is not None:
            if value == 0:
                report.findings.append(Finding(name, "name", str(soc.soc_model), "unknown name (0)",
                                               "the EP's name table does not list it",
                                               known="qnn-release always passes the numeric soc_model"))
            elif value != soc.soc_model:
                report.findings.append(Finding(name, "soc_model", str(soc.soc_model), f"{value} (by name)",
                                               "the EP's name table disagrees",
                                               known=soc.toolchain_notes.get("soc_model")))
        elif value:
            u = unbuilt.get(name)
            report.findings.append(Finding(name, "name", "not in the catalog", f"soc_model {value} (by name)",
                                           "the EP knows a chip the catalog lacks",
                                           known=f"unbuilt: {u.reason}" if u and u.soc_model == value else None))


def _ep_archs(ep: _Ep, socs: list[Soc], report: Report) -> None:
    """2. Archs the EP does not parse: does it still record 0?"""
    for arch in sorted({s.htp_arch for s in socs} - set(ORT_EP_HTP_ARCHS)):
        soc = next(s for s in socs if s.htp_arch == arch)
        got = ep.compile(ep.qdq, soc.soc_model, arch, fp16=False)
        if got and got[0] == arch:
            report.findings.append(Finding(soc.name, "htp_arch", soc.arch, f"the EP accepts htp_arch {arch}",
                                           "qnn-release refuses this arch on the ort route", known=None))
        else:
            report.findings.append(Finding(soc.name, "htp_arch", soc.arch, f"htp_arch {arch} rejected (recorded "
                                           f"{got[0] if got else 'nothing'})", "the EP cannot target this arch",
                                           known="`plan --backend ort` refuses chips of this arch, naming why"))


def _ep_targets(ep: _Ep, catalog: Catalog, socs: list[Soc], report: Report) -> None:
    """3. Per build target: does the HTP backend know the soc_model; does it take float?"""
    seen: set[int] = set()
    for soc in socs:
        target = catalog.target(soc)
        if target.soc_model in seen:
            continue
        seen.add(target.soc_model)
        report.compared += 1
        arch = target.htp_arch if target.htp_arch in ORT_EP_HTP_ARCHS else None
        if ep.compile(ep.qdq, target.soc_model, arch, fp16=False) is None:
            report.findings.append(Finding(target.name, "soc_model", str(target.soc_model), "refused",
                                           "the HTP backend refuses a quantized graph for this soc_model",
                                           known=target.toolchain_notes.get("soc_model")))
            continue
        takes_float = ep.compile(ep.float, target.soc_model, arch, fp16=True) is not None
        note = target.toolchain_notes.get("fp16")
        if target.fp16 is True and not takes_float:
            report.findings.append(Finding(target.name, "fp16", "true", "float ops refused",
                                           "the HTP backend refuses float ops for this soc_model", known=note))
        elif target.fp16 is False and takes_float:
            report.findings.append(Finding(target.name, "fp16", "false", "a float op compiles",
                                           "the HTP backend accepts a one-node float graph", known=note))
        elif target.fp16 is None and not takes_float:
            report.findings.append(Finding(target.name, "fp16", "unknown", "float ops refused",
                                           "the toolchain says no fp16: write fp16: false (source ep251)", known=note))


QAIRT_PROBE = r"""
import json, sys
from qti.aisw.converters.common import backend_info


def clip(t, n):  # the first line, cut at a word (this script runs alone, in the SDK's Python)
    t = (str(t).splitlines() or [""])[0]
    return t if len(t) <= n else t[:n - 1].rsplit(" ", 1)[0] + "..."


out = {}
for name in sys.argv[1:]:
    try:
        b = backend_info.PyBackendInfo("HTP", name)
        d = b.get_soc_info_subset() if b.is_backend_supported_in_soc() else None
        out[name] = None if not d else {"soc_model": int(d.socModel), "htp_arch": int(str(d.socDspArch).lstrip("vV")),
                                        "vtcm_mb": int(d.vtcmSizeinMB), "fp16": bool(d.supportsFp16)}
    except Exception as e:
        out[name] = {"error": clip(str(e), 200) if str(e) else type(e).__name__}
print(json.dumps(out))
"""


def _qairt_findings(socs: list[Soc], report: Report) -> bool:
    root = os.environ.get("QNN_SDK_ROOT")
    if not root:
        report.toolchains.append("QAIRT: skipped (QNN_SDK_ROOT is not set)")
        return False
    sdk = Path(root)
    pylib = sdk / "lib" / "python"
    if not (pylib / "qti" / "aisw" / "converters" / "common").is_dir():
        report.toolchains.append(f"QAIRT {sdk.name}: skipped (no qti.aisw.converters.common in {pylib})")
        return False
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(pylib), os.environ.get("PYTHONPATH")])),
           "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(sdk / "lib" / "x86_64-linux-clang"),
                                                            os.environ.get("LD_LIBRARY_PATH")]))}
    r = cmd.run([os.environ.get("QNN_PYTHON", "python3"), "-c", QAIRT_PROBE, *(s.name for s in socs)],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BackendUnavailable(f"QAIRT {sdk.name}: backend_info failed: {clip(last, 300)}",
                                 hint="set QNN_PYTHON to the SDK's Python (3.10) with its requirements")
    answers = json.loads(r.stdout.strip().splitlines()[-1])
    report.toolchains.append(f"QAIRT {sdk.name} (backend_info)")
    for soc in socs:
        got = answers.get(soc.name)
        if not got or "error" in got:
            why = (got or {}).get("error", "not supported")
            report.findings.append(Finding(soc.name, "name", soc.name, f"unknown to the SDK ({why})",
                                           "the SDK does not know this chip", source="qairt",
                                           known=f"needs QNN >= {soc.qnn_min}" if soc.qnn_min else None))
            continue
        for f in ("soc_model", "htp_arch", "vtcm_mb", "fp16"):
            mine = getattr(soc, f)
            if got[f] != mine:
                report.findings.append(Finding(soc.name, f, str(mine).lower() if mine is not None else "unknown",
                                               str(got[f]).lower(), "the SDK's backend_info disagrees", source="qairt",
                                               known=soc.toolchain_notes.get(f"qairt.{f}")))
    return True


@contextlib.contextmanager
def _stdout_to_stderr():
    """The QNN libraries print to file descriptor 1: keep stdout for our own output (--json)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def check(catalog: Catalog, socs: list[Soc] | None = None) -> Report:
    """Compare ``socs`` (default: the whole catalog) with every toolchain installed here."""
    full = socs is None or len(socs) == len(catalog.socs)
    socs = list(catalog.socs if socs is None else socs)
    report = Report()
    ran = False
    try:
        with _stdout_to_stderr():
            _ep_findings(catalog, socs, full, report)
        ran = True
    except BackendUnavailable as e:
        report.toolchains.append(f"{EP}: skipped ({e.message})")
    ran = _qairt_findings(socs, report) or ran
    if not ran:
        raise BackendUnavailable("socs --check: no toolchain to compare with",
                                 hint="install onnxruntime-qnn (pip install 'qnn-release[ort]'), or set QNN_SDK_ROOT")
    return report
