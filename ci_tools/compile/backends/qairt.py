"""The QAIRT SDK route (what sherpa-onnx runs): converter -> model library -> context binary per chip.

Conversion and the model library do not depend on the chip: they run once per graph and
precision (``precompile``); only the context binary is per chip. Every step's log is kept, and
unsupported-op and quantization warnings are lifted into the result. Each binary also gets an
EPContext stub, so apps load either route's output with ONNX Runtime.

How the real tools behave, and where that is written (the fake SDK in tests/ cites the same):
- the converter imports ``qti.aisw.converters`` from ``$QNN_SDK_ROOT/lib/python`` (what
  ``bin/envsetup.sh`` puts on PYTHONPATH): every tool runs with that environment;
- it names the graph after the output stem and every tensor with :func:`qnn_name`;
- ``--float_bitwidth 16`` makes every float tensor FLOAT_16, graph I/O included, and quantization
  makes float I/O UFIXED_POINT_8/16; 4-D and 3-D I/O become channel-last. We keep the ONNX layout
  (``--preserve_io layout``) and, for fp16, the float32 I/O (``--preserve_io datatype``), then read
  back what each tensor really is in the binary (dtype, dims, scale/offset, layout from
  ``<graph>_net.json``) and convert at the boundary: inputs written for ``qnn-net-run`` in the
  binary's dtype and layout, outputs transposed back, the stub wrapped in Transpose/Cast/Q/DQ;
- the device config sets the chip with ``soc_model`` (``soc_id`` is deprecated, QNN HTP docs).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from ...errors import BackendUnavailable, CompileError, QnnReleaseError
from ...prepare.graph import Prepared
from ...util import cmd
from ...util.text import clip
from . import Backend, CompileJob, CompileResult

BIN = Path("bin") / "x86_64-linux-clang"
WARNING = re.compile(r"warn|unsupported|not supported|quantiz|fallback|accuracy", re.IGNORECASE)
# Model libraries for the host only: the context binaries are compiled here, per chip. No Android
# model library (and no NDK in the image): see docs/release-engineers.md, "The qairt route".
LIB_TARGET = "x86_64-linux-clang"
# Graph I/O in the ONNX layout (--preserve_io layout); the read-back below copes with either.
KEEP_ONNX_LAYOUT = True

# QNN data types (QnnTypes.h) -> numpy; SFIXED/UFIXED are quantized (scale, offset)
QNN_DTYPES = {
    "QNN_DATATYPE_INT_8": "int8", "QNN_DATATYPE_INT_16": "int16", "QNN_DATATYPE_INT_32": "int32",
    "QNN_DATATYPE_INT_64": "int64", "QNN_DATATYPE_UINT_8": "uint8", "QNN_DATATYPE_UINT_16": "uint16",
    "QNN_DATATYPE_UINT_32": "uint32", "QNN_DATATYPE_UINT_64": "uint64", "QNN_DATATYPE_FLOAT_16": "float16",
    "QNN_DATATYPE_FLOAT_32": "float32", "QNN_DATATYPE_BOOL_8": "bool",
    "QNN_DATATYPE_SFIXED_POINT_8": "int8", "QNN_DATATYPE_SFIXED_POINT_16": "int16",
    "QNN_DATATYPE_SFIXED_POINT_32": "int32", "QNN_DATATYPE_UFIXED_POINT_8": "uint8",
    "QNN_DATATYPE_UFIXED_POINT_16": "uint16", "QNN_DATATYPE_UFIXED_POINT_32": "uint32",
    # onnxruntime's generator spells the signed ones without the S (gen_qnn_ctx_onnx_model.py)
    "QNN_DATATYPE_FIXED_POINT_8": "int8", "QNN_DATATYPE_FIXED_POINT_16": "int16",
    "QNN_DATATYPE_FIXED_POINT_32": "int32",
}
# the converter's spatial-first layouts: source format -> (binary format, ONNX -> binary permutation)
SPATIAL_FIRST = {"NCHW": ("NHWC", (0, 2, 3, 1)), "NCF": ("NFC", (0, 2, 1)), "TNF": ("NTF", (1, 0, 2)),
                 "NCDHW": ("NDHWC", (0, 2, 3, 4, 1))}


def qnn_name(name: str) -> str:
    """How the QAIRT converter names graphs and tensors (ir_to_qnn.py ``sanitize_name``): every run of
    non-word characters becomes one ``_``, and a name whose first character is not a letter gets a
    leading ``_`` (``_x`` -> ``__x``, ``1x`` -> ``_1x``)."""
    name = re.sub(r"\W+", "_", name)
    return name if name[:1].isalpha() else "_" + name


def camel_keys(obj: Any) -> Any:
    """Keys with spaces ("soc model") as camelCase: some SDK builds print them so (qairt-dev works around
    AISW-123397 the same way in cache_module.py)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and " " in k.strip():
                first, *rest = k.strip().split()
                k = first[:1].lower() + first[1:] + "".join(w[:1].upper() + w[1:] for w in rest)
            out[k] = camel_keys(v)
        return out
    if isinstance(obj, list):
        return [camel_keys(x) for x in obj]
    return obj


@dataclass(frozen=True)
class TensorIO:
    """One graph input or output as the binary has it, and how to get there from the ONNX tensor."""

    onnx: str  # the ONNX name
    qnn: str  # the binary's tensor name
    dtype: str  # QNN_DATATYPE_...
    dims: tuple[int, ...]  # in the binary's layout
    onnx_shape: tuple[int, ...]
    perm: tuple[int, ...] | None  # ONNX layout -> binary layout, None when the same
    scale: float | None = None
    offset: int | None = None  # QNN offset: the negative zero point

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(QNN_DTYPES[self.dtype])

    @property
    def quantized(self) -> bool:
        return self.scale is not None

    def to_binary(self, x: np.ndarray) -> np.ndarray:
        """An ONNX-layout value as the binary takes it (layout, dtype, quantization)."""
        x = np.asarray(x).reshape(self.onnx_shape)
        if self.perm:
            x = np.transpose(x, self.perm)
        if self.scale is not None:  # quantized (its offset comes with the scale)
            info = np.iinfo(self.np_dtype)
            x = np.clip(np.round(x.astype(np.float64) / self.scale) - cast(int, self.offset), info.min, info.max)
        return np.ascontiguousarray(x.astype(self.np_dtype))

    def from_binary_float(self, raw: np.ndarray) -> np.ndarray:
        """A float32 output of ``qnn-net-run`` (binary layout) in the ONNX layout."""
        x = raw.reshape(self.dims)
        if self.perm:
            x = np.transpose(x, [self.perm.index(i) for i in range(len(self.perm))])
        return x.reshape(self.onnx_shape)


def sdk_root(root: Path | str | None = None) -> Path:
    root = root or os.environ.get("QNN_SDK_ROOT")
    if not root:
        raise BackendUnavailable("the qairt route needs QNN_SDK_ROOT",
                                 hint="`qnn-release sdk fetch` prints it, or source qairt/<version>/bin/envsetup.sh")
    path = Path(root)
    missing = [t for t in ("qnn-onnx-converter", "qnn-model-lib-generator", "qnn-context-binary-generator")
               if not (path / BIN / t).is_file()]
    if missing:
        raise BackendUnavailable(f"QNN_SDK_ROOT={root} has no {', '.join(missing)} in {BIN}",
                                 hint="point QNN_SDK_ROOT at qairt/<version>")
    return path


def sdk_environment(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """What ``bin/envsetup.sh`` exports, prepended to ``base`` (default: this process's environment)."""
    base = dict(os.environ if base is None else base)

    def front(value: str, current: str | None) -> str:
        return value + (os.pathsep + current if current else "")

    base["QNN_SDK_ROOT"] = str(root)
    base["PYTHONPATH"] = front(str(root / "lib" / "python"), base.get("PYTHONPATH"))
    base["PATH"] = front(str(root / BIN), base.get("PATH"))
    base["LD_LIBRARY_PATH"] = front(str(root / "lib" / "x86_64-linux-clang"), base.get("LD_LIBRARY_PATH"))
    return base


class QairtBackend(Backend):
    name = "qairt"
    # qnn-net-run runs an input list in one process but cannot feed an output back as the next input, so a
    # stream's steps past these run in one process fed CPU's state (the VAD's 221 steps: 1 + 16 processes,
    # not 221); the drift is judged after the carried steps.
    carried_steps = 16

    def __init__(self, root: Path | None = None) -> None:
        self.root = sdk_root(root)
        self.python = os.environ.get("QNN_PYTHON", "python3")  # the SDK's Python 3.10 venv in the image
        self.env = sdk_environment(self.root)

    def sdk_version(self) -> str:
        return self.root.name if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", self.root.name) else "unknown"

    def sdk_sha256(self) -> str | None:
        """The sha256 of the zip this tree came from, as ``sdk fetch`` recorded it (None: not fetched by us)."""
        from ...qairt_zip import MARKER

        try:
            return json.loads((self.root / MARKER).read_text()).get("sha256")
        except (OSError, ValueError):
            return None

    def _run(self, argv: list[str], log: Path, what: str) -> str:
        r = cmd.run(argv, capture_output=True, text=True, env=self.env)
        text = f"$ {' '.join(argv)}\n{r.stdout}{r.stderr}"
        log.write_text(text)
        if r.returncode != 0:
            last = next((ln for ln in reversed((r.stderr or r.stdout).strip().splitlines()) if ln.strip()), "")
            raise CompileError(f"{what} failed ({r.returncode}): {clip(last, 400)}", hint=f"full log: {log}")
        return text

    # -- once per graph and precision --------------------------------------------------------------

    def precompile(self, prepared: Prepared, precision: str, calibration: list[dict[str, np.ndarray]] | None,
                   calibration_hash: str | None, per_channel: bool = True) -> Path:
        pc = "-pc" if per_channel and precision != "fp16" else ""
        key = f"qairt-{self.sdk_version()}-{precision}{pc}" + (f"-{calibration_hash[:12]}" if calibration_hash else "")
        final = prepared.path.parent / key
        if (final / "done.json").exists():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=prepared.path.parent))
        try:
            graph = prepared.graph
            argv = [self.python, str(self.root / BIN / "qnn-onnx-converter"), "--input_network", str(prepared.path),
                    "--output_path", str(tmp / f"{graph}.cpp")]
            if precision == "fp16":
                # fp16 weights and math, float32 graph I/O in the ONNX layout (bare --preserve_io: both)
                argv += ["--float_bitwidth", "16", "--preserve_io"] if KEEP_ONNX_LAYOUT else \
                    ["--float_bitwidth", "16", "--preserve_io", "datatype"]
            else:
                if not calibration:
                    raise CompileError(f"{prepared.model}/{graph}: {precision} needs calibration inputs")
                # quantized I/O (uint8/uint16, read back with its scale/offset) in the ONNX layout, so the
                # calibration files below are written in the layout the converter reads them in
                argv += ["--act_bitwidth", "16" if precision == "w8a16" else "8", "--weights_bitwidth", "8",
                         "--bias_bitwidth", "32", "--input_list", str(self._input_list(prepared, calibration, tmp)),
                         "--use_native_input_files", *(["--preserve_io", "layout"] if KEEP_ONNX_LAYOUT else [])]
                if per_channel:  # a scale per output channel (Conv) and per row (MatMul, FullyConnected)
                    argv += ["--use_per_channel_quantization", "--use_per_row_quantization"]
            warnings = _warnings(self._run(argv, tmp / "converter.log",
                                           f"{prepared.model}/{graph}: qnn-onnx-converter"))
            shutil.rmtree(tmp / "calibration", ignore_errors=True)  # GBs for a decoder with its KV caches
            libgen = [self.python, str(self.root / BIN / "qnn-model-lib-generator"), "-c", str(tmp / f"{graph}.cpp"),
                      "-l", graph, "-t", LIB_TARGET, "-o", str(tmp / "model_libs")]
            if (tmp / f"{graph}.bin").is_file():  # the converter writes it only for graphs with weights
                libgen[4:4] = ["-b", str(tmp / f"{graph}.bin")]
            warnings += _warnings(self._run(libgen, tmp / "model-lib-generator.log",
                                            f"{prepared.model}/{graph}: qnn-model-lib-generator"))
            if not (tmp / "model_libs" / LIB_TARGET / f"lib{graph}.so").is_file():
                raise CompileError(f"{prepared.model}/{graph}: qnn-model-lib-generator wrote no "
                                   f"model_libs/{LIB_TARGET}/lib{graph}.so", hint=f"see {tmp}/model-lib-generator.log")
            # run_id: which conversion run a target was compiled from (the build report counts them)
            (tmp / "done.json").write_text(json.dumps({"warnings": warnings, "run_id": uuid.uuid4().hex}))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            return final
        except QnnReleaseError as e:  # keep the logs and converter output: they are the evidence
            failed = final.with_name(final.name + ".failed")
            shutil.rmtree(failed, ignore_errors=True)
            os.replace(tmp, failed)
            e.message = e.message.replace(str(tmp), str(failed))
            e.hint = e.hint.replace(str(tmp), str(failed)) if e.hint else e.hint
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _input_list(self, prepared: Prepared, samples: list[dict[str, np.ndarray]], folder: Path) -> Path:
        """Calibration files in each input's own dtype (--use_native_input_files), one line per sample with the
        files in the graph's input order: the positional form sherpa-onnx's lists use (which names a named
        ``name:=path`` list would need, source or sanitised, no source says)."""
        raw = folder / "calibration"
        raw.mkdir()
        lines = []
        for i, sample in enumerate(samples):
            entries = []
            for t in prepared.inputs:
                f = raw / f"{i}_{qnn_name(t.name)}.raw"
                np.ascontiguousarray(sample[t.name], dtype=np.dtype(t.dtype)).tofile(f)
                entries.append(str(f))
            lines.append(" ".join(entries))
        (folder / "input_list.txt").write_text("\n".join(lines) + "\n")
        return folder / "input_list.txt"

    # -- per chip ----------------------------------------------------------------------------------

    def htp_config(self, job: CompileJob, folder: Path) -> Path:
        """The HTP backend extension config for one graph and one chip (the shape sherpa-onnx's
        generate_config.py writes). ``graph_names`` holds the graph's name as the converter made it
        (graph options apply to that name only). The chip goes in ``soc_model``: the QNN HTP docs
        say "soc_id parameter will be deprecated, for setting the SoC use soc_model", and Qualcomm's
        qairt-dev writes ``soc_model`` (compiler/config.py); sherpa-onnx's ``soc_id`` key carries the
        same soc_model numbers, but in qairt-dev ``soc_id`` is another number (Android's /sys id)."""
        folder.mkdir(parents=True, exist_ok=True)
        config = {"graphs": [{"vtcm_mb": job.options.vtcm_mb or job.soc.vtcm_mb or 8,
                              "O": job.options.optimization_level, "graph_names": [qnn_name(job.prepared.graph)]}],
                  "devices": [{"device_id": 0, "soc_model": job.soc.soc_model, "dsp_arch": job.soc.arch,
                               "cores": [{"core_id": 0, "perf_profile": "burst", "rpc_control_latency": 200}]}]}
        (folder / "htp_config.json").write_text(json.dumps(config, indent=2))
        ext = {"backend_extensions": {
            "shared_library_path": str(self.root / "lib" / "x86_64-linux-clang" / "libQnnHtpNetRunExtensions.so"),
            "config_file_path": str(folder / "htp_config.json")}}
        (folder / "htp_backend_extensions.json").write_text(json.dumps(ext, indent=2))
        return folder / "htp_backend_extensions.json"

    def compile(self, job: CompileJob) -> CompileResult:
        if job.precompiled is None:
            raise CompileError(f"{job.target_id}: the graph was not converted (no precompile)")
        graph, out = job.prepared.graph, job.out_dir
        logs = out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        config = self.htp_config(job, out / "config")
        start = time.monotonic()
        text = self._run([str(self.root / BIN / "qnn-context-binary-generator"),
                          "--backend", str(self.root / "lib" / "x86_64-linux-clang" / "libQnnHtp.so"),
                          "--model", str(job.precompiled / "model_libs" / LIB_TARGET / f"lib{graph}.so"),
                          "--output_dir", str(out), "--binary_file", graph, "--config_file", str(config)],
                         logs / "context-binary-generator.log", f"{job.target_id}: qnn-context-binary-generator")
        seconds = time.monotonic() - start
        binary = out / f"{graph}.bin"
        if not binary.is_file():
            raise CompileError(f"{job.target_id}: qnn-context-binary-generator wrote no {binary.name}")
        for log in ("converter.log", "model-lib-generator.log"):
            shutil.copyfile(job.precompiled / log, logs / log)
        shutil.copyfile(job.precompiled / f"{graph}_net.json", logs / f"{graph}_net.json")
        warnings = json.loads((job.precompiled / "done.json").read_text())["warnings"] + _warnings(text)
        info = self.binary_info(binary, logs)
        soc_model, arch = info.get("socModel"), (info.get("contextMetadata") or {}).get("info", {}).get("dspArch")
        if (soc_model, arch) != (job.soc.soc_model, job.soc.htp_arch):
            raise CompileError(f"{job.target_id}: the binary says soc_model {soc_model} / dspArch {arch}, asked for "
                               f"{job.soc.soc_model} / {job.soc.htp_arch}",
                               hint=f"the HTP config's device was not applied; see {config.parent}/htp_config.json")
        ios = tensor_io(info, job.prepared, logs / f"{graph}_net.json", job.target_id)
        stub = self._write_stub(job, binary, info, ios)
        return CompileResult(context_onnx=stub, binaries=[binary], sdk_version=self.sdk_version(), seconds=seconds,
                             warnings=warnings, logs=sorted(logs.iterdir()))

    def binary_info(self, binary: Path, logs: Path) -> dict:
        util = self.root / BIN / "qnn-context-binary-utility"
        if not util.is_file():
            raise CompileError(f"{util} is missing: cannot read the graph's tensors back for the EPContext stub")
        json_file = logs / f"{binary.stem}.context.json"
        self._run([str(util), "--context_binary", str(binary), "--json_file", str(json_file)],
                  logs / "context-binary-utility.log", f"{binary.name}: qnn-context-binary-utility")
        try:
            return camel_keys(json.loads(json_file.read_text()))["info"]
        except (OSError, ValueError, KeyError) as e:
            raise CompileError(f"{json_file}: not the context-binary JSON expected ({type(e).__name__}: {e})") from None

    def _write_stub(self, job: CompileJob, binary: Path, info: dict, ios: tuple[list[TensorIO], list[TensorIO]]
                    ) -> Path:
        """An EPContext model ONNX Runtime's QNN EP loads, taking and giving what the ONNX graph does.

        The EPContext node's I/O carry the binary's tensor names (the EP binds them by name) and
        types; Transpose / QuantizeLinear / Cast in front and DequantizeLinear / Cast / Transpose
        behind present the ONNX layout and float I/O to callers, as onnxruntime's own
        gen_qnn_ctx_onnx_model.py does for quantized I/O. A wrapped tensor's outer name is its ONNX
        name, or ``<name>_dq`` when that is the binary's name too.
        """
        stub = binary.with_name(f"{binary.stem}_ctx.onnx")
        graph = info["graphs"][0]["info"]
        write_stub(stub, *ios, StubSpec(graph_name=graph["graphName"], binary_name=binary.name,
                                        sdk=str(info.get("buildId", "")),
                                        props={"qnn_release.route": "qairt", "qnn_release.soc": job.soc.name,
                                               "qnn_release.soc_model": str(info.get("socModel")),
                                               "qnn_release.htp_arch": str((info.get("contextMetadata") or {})
                                                                           .get("info", {}).get("dspArch")),
                                               "qnn_release.sdk_version": self.sdk_version()}))
        return stub

    def run(self, job: CompileJob, result: CompileResult, feeds: list[dict[str, np.ndarray]]
            ) -> tuple[list[list[np.ndarray]], float] | None:
        """qnn-net-run with the x86-64 HTP backend (the HTP simulator) on the context binary; inputs
        written in the binary's dtype and layout, outputs (float32) read back into the ONNX layout."""
        tool = self.root / BIN / "qnn-net-run"
        if not tool.is_file():
            return None
        logs = job.out_dir / "logs"
        info = self.binary_info(result.binaries[0], logs)
        inputs, outputs = tensor_io(info, job.prepared, logs / f"{job.prepared.graph}_net.json", job.target_id)
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            lines = []
            for i, feed in enumerate(feeds):
                entries = []
                for t in inputs:
                    f = tmp_path / f"in{i}_{t.qnn}.raw"
                    t.to_binary(feed[t.onnx]).tofile(f)
                    entries.append(f"{t.qnn}:={f}")
                lines.append(" ".join(entries))
            (tmp_path / "inputs.txt").write_text("\n".join(lines) + "\n")
            start = time.monotonic()
            self._run([str(tool), "--backend", str(self.root / "lib" / "x86_64-linux-clang" / "libQnnHtp.so"),
                       "--retrieve_context", str(result.binaries[0]), "--input_list", str(tmp_path / "inputs.txt"),
                       "--use_native_input_files", "--output_dir", str(tmp_path / "out")],
                      tmp_path / "net-run.log", f"{job.target_id}: qnn-net-run")
            seconds = (time.monotonic() - start) / max(1, len(feeds))
            outs = []
            for i in range(len(feeds)):
                row = []
                for t in outputs:
                    f = tmp_path / "out" / f"Result_{i}" / f"{t.qnn}.raw"
                    if not f.is_file():
                        raise CompileError(f"{job.target_id}: qnn-net-run wrote no {f.name} for input {i}")
                    raw = np.fromfile(f, dtype=np.float32)
                    if raw.size != int(np.prod(t.dims)):
                        raise CompileError(f"{job.target_id}: {f.name} holds {raw.size} values, the binary's "
                                           f"{t.qnn} has {int(np.prod(t.dims))}")
                    row.append(t.from_binary_float(raw))
                outs.append(row)
        return outs, seconds


def tensor_io(info: dict, prepared: Prepared, net_json: Path, target: str) -> tuple[list[TensorIO], list[TensorIO]]:
    """The binary's graph inputs and outputs matched to the ONNX graph's, with dtype, layout and scale."""
    graph = info["graphs"][0]["info"]
    try:
        net = json.loads(net_json.read_text())["graph"]["tensors"]
    except (OSError, ValueError, KeyError):
        net = {}

    def side(onnx_tensors: list, qnn_tensors: list, what: str) -> list[TensorIO]:
        by_name = {t["info"]["name"]: t["info"] for t in qnn_tensors}
        out = []
        for t in onnx_tensors:
            q = qnn_name(t.name)
            if q not in by_name:
                raise CompileError(f"{target}: the binary has no {what} '{q}' (ONNX '{t.name}'); it has "
                                   f"{', '.join(sorted(by_name)) or 'none'}")
            b = by_name[q]
            dtype = b.get("dataType", "")
            if dtype not in QNN_DTYPES:
                raise CompileError(f"{target}: {what} '{q}' has QNN data type {dtype or '(none)'}, which qnn-release "
                                   "does not know", hint="report it with the context-binary JSON in the logs")
            dims, shape = tuple(int(d) for d in b.get("dimensions", [])), tuple(int(d) for d in t.shape)
            perm = _layout(net.get(q, {}), dims, shape, f"{target}: {what} '{q}'")
            qp = b.get("quantizeParams") or {}
            scale = offset = None
            if qp.get("definition") == "QNN_DEFINITION_DEFINED" and "FIXED_POINT" in dtype:
                so = qp.get("scaleOffset") or {}
                scale, offset = float(so.get("scale", 0.0)), int(so.get("offset", 0))
                if scale <= 0:
                    raise CompileError(f"{target}: {what} '{q}' is {dtype} without a scale")
            out.append(TensorIO(onnx=t.name, qnn=q, dtype=dtype, dims=dims, onnx_shape=shape, perm=perm,
                                scale=scale, offset=offset))
        return out

    return (side(prepared.inputs, graph.get("graphInputs", []), "input"),
            side(prepared.outputs, graph.get("graphOutputs", []), "output"))


def _layout(net_tensor: dict, dims: tuple[int, ...], shape: tuple[int, ...], what: str) -> tuple[int, ...] | None:
    """ONNX -> binary permutation: from the converter's axis formats when _net.json has them, else from dims."""
    src, dst = net_tensor.get("src_axis_format"), net_tensor.get("axis_format")
    if src and dst:
        if src == dst or dst in ("NONTRIVIAL", "ANY", "NOT_YET_DEFINED"):
            perm = None
        elif SPATIAL_FIRST.get(src, ("", None))[0] == dst:
            perm = SPATIAL_FIRST[src][1]
        else:
            raise CompileError(f"{what}: layout {src} -> {dst} is not one qnn-release knows")
        got = tuple(shape[i] for i in perm) if perm else shape
        if got != dims:
            raise CompileError(f"{what}: the binary's dims {list(dims)} are not the ONNX shape {list(shape)} "
                               f"in {dst}")
        return perm
    if dims == shape:
        return None
    candidates = [p for _, p in SPATIAL_FIRST.values() if len(p) == len(shape) and tuple(shape[i] for i in p) == dims]
    if len(candidates) == 1:
        return candidates[0]
    raise CompileError(f"{what}: the binary's dims {list(dims)} do not match the ONNX shape {list(shape)}",
                       hint="the converter changed its layout and _net.json does not say how")


@dataclass(frozen=True, kw_only=True)
class StubSpec:
    """What an EPContext stub says besides its I/O: the binary's graph and file names, the SDK's build id
    (``ep_sdk_version``) and the model's metadata props."""

    graph_name: str
    binary_name: str
    sdk: str
    props: dict[str, str]


def write_stub(path: Path, inputs: list[TensorIO], outputs: list[TensorIO], spec: StubSpec) -> dict[str, str]:
    """Write the EPContext stub; returns {ONNX name: the stub's outer name}."""
    import onnx
    from onnx import helper

    graph_name, binary_name, sdk, props = spec.graph_name, spec.binary_name, spec.sdk, spec.props

    nodes_in, nodes_out, inits = [], [], []
    outer_in, outer_out, io_names = [], [], {}
    for t in inputs:
        io_names[t.onnx], value, nodes, consts = _stub_input(t)
        outer_in.append(value)
        nodes_in += nodes
        inits += consts
    for t in outputs:
        io_names[t.onnx], value, nodes, consts = _stub_output(t)
        outer_out.append(value)
        nodes_out += nodes
        inits += consts
    node = helper.make_node("EPContext", [t.qnn for t in inputs], [t.qnn for t in outputs], name=graph_name,
                            domain="com.microsoft", embed_mode=0, main_context=1, ep_cache_context=binary_name,
                            ep_sdk_version=sdk, source="Qnn")
    inner = [helper.make_tensor_value_info(t.qnn, _elem()[t.np_dtype], list(t.dims))
             for t in [*inputs, *outputs] if t.qnn not in io_names.values()]
    model = helper.make_model(
        helper.make_graph([*nodes_in, node, *nodes_out], "qnn-context", outer_in, outer_out, inits, value_info=inner),
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    helper.set_model_props(model, {**props, "qnn_release.io_names": json.dumps(io_names, sort_keys=True)})
    onnx.save(model, str(path))
    return io_names


@functools.lru_cache(maxsize=1)
def _elem() -> dict:
    """numpy dtype -> ONNX element type."""
    from onnx import TensorProto

    return {np.dtype(v): k for k, v in {
        TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16", TensorProto.INT8: "int8",
        TensorProto.INT16: "int16", TensorProto.INT32: "int32", TensorProto.INT64: "int64",
        TensorProto.UINT8: "uint8", TensorProto.UINT16: "uint16", TensorProto.UINT32: "uint32",
        TensorProto.UINT64: "uint64", TensorProto.BOOL: "bool"}.items()}


def _stub_outer(t: TensorIO) -> Any:
    """The stub's outer name and value for a binary's tensor: float where the binary takes a quantized or fp16
    tensor, in ONNX's layout where the binary's differs."""
    from onnx import TensorProto, helper

    wrap = bool(t.perm) or t.quantized or t.dtype == "QNN_DATATYPE_FLOAT_16"
    outer = (t.onnx if t.onnx != t.qnn else f"{t.qnn}_dq") if wrap else t.qnn
    kind = TensorProto.FLOAT if t.quantized or t.dtype == "QNN_DATATYPE_FLOAT_16" else _elem()[t.np_dtype]
    return outer, helper.make_tensor_value_info(outer, kind, list(t.onnx_shape))


def _scale_and_zero_point(t: TensorIO) -> list:
    from onnx import numpy_helper

    return [numpy_helper.from_array(np.array(t.scale, dtype=np.float32), f"{t.qnn}_scale"),
            numpy_helper.from_array(np.array(-cast(int, t.offset), dtype=t.np_dtype), f"{t.qnn}_zp")]


def _stub_input(t: TensorIO) -> Any:
    """(outer name, outer value, nodes from it to the binary's input, initializers)."""
    from onnx import TensorProto, helper

    outer, value = _stub_outer(t)
    nodes, inits, cur = [], [], outer
    if t.perm:
        nodes.append(helper.make_node("Transpose", [cur], [f"{t.qnn}_nhwc"], perm=list(t.perm),
                                      name=f"{t.qnn}_to_binary_layout"))
        cur = f"{t.qnn}_nhwc"
    if t.quantized:
        inits += _scale_and_zero_point(t)
        nodes.append(helper.make_node("QuantizeLinear", [cur, f"{t.qnn}_scale", f"{t.qnn}_zp"], [t.qnn],
                                      name=f"{t.qnn}_q"))
    elif t.dtype == "QNN_DATATYPE_FLOAT_16":
        nodes.append(helper.make_node("Cast", [cur], [t.qnn], to=TensorProto.FLOAT16, name=f"{t.qnn}_cast"))
    elif t.perm:
        nodes[-1].output[0] = t.qnn
    return outer, value, nodes, inits


def _stub_output(t: TensorIO) -> Any:
    """(outer name, outer value, nodes from the binary's output to it, initializers)."""
    from onnx import TensorProto, helper

    outer, value = _stub_outer(t)
    nodes, inits, cur = [], [], t.qnn
    last = outer if not t.perm else f"{t.qnn}_float"
    if t.quantized:
        inits += _scale_and_zero_point(t)
        nodes.append(helper.make_node("DequantizeLinear", [cur, f"{t.qnn}_scale", f"{t.qnn}_zp"], [last],
                                      name=f"{t.qnn}_dq_node"))
        cur = last
    elif t.dtype == "QNN_DATATYPE_FLOAT_16":
        nodes.append(helper.make_node("Cast", [cur], [last], to=TensorProto.FLOAT, name=f"{t.qnn}_cast"))
        cur = last
    if t.perm:
        inverse = [t.perm.index(i) for i in range(len(t.perm))]
        nodes.append(helper.make_node("Transpose", [cur], [outer], perm=inverse, name=f"{t.qnn}_to_onnx_layout"))
    return outer, value, nodes, inits


def _warnings(log: str) -> list[str]:
    return [clip(ln, 300) for ln in log.splitlines()[1:] if WARNING.search(ln)]
