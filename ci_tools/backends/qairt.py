"""The QAIRT SDK route (what sherpa-onnx runs): converter -> model libraries -> context binary per chip.

Conversion and model libraries do not depend on the chip: they run once per graph and
precision (``precompile``); only the context binary is per chip. Every step's log is kept,
and unsupported-op and quantization warnings are lifted into the result. Each binary also
gets an EPContext stub ONNX, so apps can load either route's output with ONNX Runtime.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailable, CompileError, QnnReleaseError
from ..prepare import Prepared
from . import CompileJob, CompileResult

BIN = Path("bin") / "x86_64-linux-clang"
WARNING = re.compile(r"warn|unsupported|not supported|quantiz|fallback|accuracy", re.IGNORECASE)
PAGE_FLAGS = "-Wl,-z,max-page-size=16384"  # Android 15+ 16 KB pages


def qnn_name(name: str) -> str:
    """How the QAIRT converter names tensors: [A-Za-z0-9_], not starting with a digit."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "_" + s if s[:1].isdigit() else s


def sdk_root() -> Path:
    root = os.environ.get("QNN_SDK_ROOT")
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


class QairtBackend:
    name = "qairt"

    def __init__(self) -> None:
        self.root = sdk_root()
        self.python = os.environ.get("QNN_PYTHON", "python3")  # the SDK's Python 3.10 venv in the image

    def sdk_version(self) -> str:
        return self.root.name if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", self.root.name) else "unknown"

    def _run(self, argv: list[str], log: Path, what: str, env: dict | None = None) -> str:
        r = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})})
        text = f"$ {' '.join(argv)}\n{r.stdout}{r.stderr}"
        log.write_text(text)
        if r.returncode != 0:
            last = next((ln for ln in reversed((r.stderr or r.stdout).strip().splitlines()) if ln.strip()), "")
            raise CompileError(f"{what} failed ({r.returncode}): {last.strip()[:400]}", hint=f"full log: {log}")
        return text

    # -- once per graph and precision --------------------------------------------------------------

    def precompile(self, prepared: Prepared, precision: str, calibration: list[dict[str, np.ndarray]] | None,
                   calibration_hash: str | None) -> Path:
        key = f"qairt-{self.sdk_version()}-{precision}" + (f"-{calibration_hash[:12]}" if calibration_hash else "")
        final = prepared.path.parent / key
        if (final / "done.json").exists():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=prepared.path.parent))
        try:
            graph = prepared.graph
            argv = [self.python, str(self.root / BIN / "qnn-onnx-converter"), "--input_network", str(prepared.path),
                    "--output_path", str(tmp / f"{graph}.cpp")]
            if precision == "fp16":
                argv += ["--float_bitwidth", "16"]
            else:
                if not calibration:
                    raise CompileError(f"{prepared.model}/{graph}: {precision} needs calibration inputs")
                argv += ["--act_bitwidth", "16" if precision == "w8a16" else "8", "--weights_bitwidth", "8",
                         "--bias_bitwidth", "32", "--input_list", str(self._input_list(prepared, calibration, tmp)),
                         "--use_native_input_files"]
            warnings = _warnings(self._run(argv, tmp / "converter.log",
                                           f"{prepared.model}/{graph}: qnn-onnx-converter"))
            ldflags = f"{os.environ.get('LDFLAGS', '')} {PAGE_FLAGS}".strip()
            warnings += _warnings(self._run(
                [self.python, str(self.root / BIN / "qnn-model-lib-generator"), "-c", str(tmp / f"{graph}.cpp"),
                 "-b", str(tmp / f"{graph}.bin"), "-o", str(tmp / "model_libs")],
                tmp / "model-lib-generator.log", f"{prepared.model}/{graph}: qnn-model-lib-generator",
                env={"LDFLAGS": ldflags}))
            for target in ("x86_64-linux-clang", "aarch64-android"):
                if not (tmp / "model_libs" / target / f"lib{graph}.so").is_file():
                    raise CompileError(f"{prepared.model}/{graph}: qnn-model-lib-generator wrote no "
                                       f"model_libs/{target}/lib{graph}.so")
            # run_id: which conversion run a target was compiled from (the build report counts them)
            (tmp / "done.json").write_text(json.dumps({"warnings": warnings, "run_id": uuid.uuid4().hex}))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            return final
        except QnnReleaseError as e:  # keep the logs and converter output: they are the evidence
            failed = final.with_name(final.name + ".failed")
            shutil.rmtree(failed, ignore_errors=True)
            os.replace(tmp, failed)
            e.message, e.hint = (x.replace(str(tmp), str(failed)) if x else x for x in (e.message, e.hint))
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _input_list(self, prepared: Prepared, samples: list[dict[str, np.ndarray]], folder: Path) -> Path:
        raw = folder / "calibration"
        raw.mkdir()
        lines = []
        for i, sample in enumerate(samples):
            entries = []
            for t in prepared.inputs:
                f = raw / f"{i}_{qnn_name(t.name)}.raw"
                np.ascontiguousarray(sample[t.name], dtype=np.dtype(t.dtype)).tofile(f)
                entries.append(f"{qnn_name(t.name)}:={f}")
            lines.append(" ".join(entries))
        (folder / "input_list.txt").write_text("\n".join(lines) + "\n")
        return folder / "input_list.txt"

    # -- per chip ----------------------------------------------------------------------------------

    def htp_config(self, job: CompileJob, folder: Path) -> Path:
        """What sherpa-onnx's generate_config.py writes, for one graph and one chip."""
        folder.mkdir(parents=True, exist_ok=True)
        config = {"graphs": [{"vtcm_mb": job.options.vtcm_mb or job.soc.vtcm_mb or 8,
                              "O": job.options.optimization_level, "graph_names": [job.prepared.graph]}],
                  "devices": [{"device_id": 0, "soc_id": job.soc.soc_model, "dsp_arch": job.soc.arch,
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
                          "--model", str(job.precompiled / "model_libs" / "x86_64-linux-clang" / f"lib{graph}.so"),
                          "--output_dir", str(out), "--binary_file", graph, "--config_file", str(config)],
                         logs / "context-binary-generator.log", f"{job.target_id}: qnn-context-binary-generator")
        seconds = time.monotonic() - start
        binary = out / f"{graph}.bin"
        if not binary.is_file():
            raise CompileError(f"{job.target_id}: qnn-context-binary-generator wrote no {binary.name}")
        for log in ("converter.log", "model-lib-generator.log"):
            shutil.copyfile(job.precompiled / log, logs / log)
        warnings = json.loads((job.precompiled / "done.json").read_text())["warnings"] + _warnings(text)
        info = self._binary_info(binary, logs)
        stub = self._write_stub(job, binary, info)
        return CompileResult(context_onnx=stub, binaries=[binary], sdk_version=self.sdk_version(), seconds=seconds,
                             warnings=warnings, logs=sorted(logs.iterdir()))

    def _binary_info(self, binary: Path, logs: Path) -> dict:
        util = self.root / BIN / "qnn-context-binary-utility"
        if not util.is_file():
            raise CompileError(f"{util} is missing: cannot read the graph's tensors back for the EPContext stub")
        json_file = logs / f"{binary.stem}.context.json"
        self._run([str(util), "--context_binary", str(binary), "--json_file", str(json_file)],
                  logs / "context-binary-utility.log", f"{binary.name}: qnn-context-binary-utility")
        return json.loads(json_file.read_text())["info"]

    def _write_stub(self, job: CompileJob, binary: Path, info: dict) -> Path:
        """An EPContext model ONNX Runtime's QNN EP loads (the layout of gen_qnn_ctx_onnx_model.py)."""
        import onnx
        from onnx import helper

        graph = info["graphs"][0]["info"]
        types = {"QNN_DATATYPE_FLOAT_32": onnx.TensorProto.FLOAT, "QNN_DATATYPE_FLOAT_16": onnx.TensorProto.FLOAT16,
                 "QNN_DATATYPE_INT_32": onnx.TensorProto.INT32, "QNN_DATATYPE_BOOL_8": onnx.TensorProto.BOOL,
                 "QNN_DATATYPE_UFIXED_POINT_8": onnx.TensorProto.UINT8,
                 "QNN_DATATYPE_UFIXED_POINT_16": onnx.TensorProto.UINT16}

        def vi(t):
            t = t["info"]
            return helper.make_tensor_value_info(t["name"], types.get(t["dataType"], onnx.TensorProto.FLOAT),
                                                 t["dimensions"])

        inputs, outputs = [vi(t) for t in graph["graphInputs"]], [vi(t) for t in graph["graphOutputs"]]
        node = helper.make_node("EPContext", [i.name for i in inputs], [o.name for o in outputs],
                                name=graph["graphName"], domain="com.microsoft", embed_mode=0, main_context=1,
                                ep_cache_context=binary.name, ep_sdk_version=str(info.get("buildId", "")),
                                source="Qnn")
        model = helper.make_model(helper.make_graph([node], "qnn-context", inputs, outputs),
                                  opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        helper.set_model_props(model, {
            "qnn_release.route": "qairt", "qnn_release.soc": job.soc.name,
            "qnn_release.soc_model": str(info.get("socModel", job.soc.soc_model)),
            "qnn_release.htp_arch": str(info.get("dspArch", job.soc.arch)).lstrip("v"),
            "qnn_release.sdk_version": self.sdk_version(),
            "qnn_release.io_names": json.dumps({t.name: qnn_name(t.name)
                                                for t in [*job.prepared.inputs, *job.prepared.outputs]}),
        })
        stub = binary.with_name(f"{binary.stem}_ctx.onnx")
        onnx.save(model, str(stub))
        return stub

    def run(self, job: CompileJob, result: CompileResult, feeds: list[dict[str, np.ndarray]]):
        """qnn-net-run with the x86-64 HTP backend (the HTP simulator) on the context binary."""
        tool = self.root / BIN / "qnn-net-run"
        if not tool.is_file():
            return None
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            lines = []
            for i, feed in enumerate(feeds):
                entries = []
                for t in job.prepared.inputs:
                    f = tmp_path / f"in{i}_{qnn_name(t.name)}.raw"
                    np.ascontiguousarray(feed[t.name], dtype=np.dtype(t.dtype)).tofile(f)
                    entries.append(f"{qnn_name(t.name)}:={f}")
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
                for t in job.prepared.outputs:
                    f = tmp_path / "out" / f"Result_{i}" / f"{qnn_name(t.name)}.raw"
                    if not f.is_file():
                        raise CompileError(f"{job.target_id}: qnn-net-run wrote no {f.name} for input {i}")
                    row.append(np.fromfile(f, dtype=np.float32).reshape(t.shape))
                outs.append(row)
        return outs, seconds


def _warnings(log: str) -> list[str]:
    return [ln.strip()[:300] for ln in log.splitlines()[1:] if WARNING.search(ln)]
