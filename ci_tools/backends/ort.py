"""The embedded route: ONNX Runtime QNN EP compiles real HTP context binaries on x86-64 Linux.

Per chip it passes the NUMERIC soc_model and htp_arch (the EP maps names it does not know
to 0 silently), forbids CPU fallback, and reads ``ep_compatibility_info`` back to prove the
binary is for the chip that was asked for.
"""

from __future__ import annotations

import time

import numpy as np

from .. import qnn_ep
from ..errors import CompileError
from ..quantize import quantize_graph
from . import CompileJob, CompileResult


class OrtBackend:
    name = "ort"

    def __init__(self) -> None:
        qnn_ep.qnn_version()  # raises BackendUnavailable when onnxruntime-qnn is missing

    def sdk_version(self) -> str:
        return f"{qnn_ep.qnn_version()} (onnxruntime-qnn {qnn_ep.ep_package_version()})"

    def precompile(self, prepared, precision, calibration, calibration_hash):
        if precision == "fp16":
            return None  # the EP converts float graphs to fp16 itself
        return quantize_graph(prepared.path, precision, calibration or [])

    def _options(self, job: CompileJob, for_run: bool = False) -> dict:
        extra = {}
        vtcm = job.options.vtcm_mb or job.soc.vtcm_mb
        if vtcm and not for_run:
            extra["vtcm_mb"] = str(vtcm)
        if not for_run:
            extra["htp_graph_finalization_optimization_mode"] = str(job.options.optimization_level)
        return qnn_ep.htp_options(job.soc.soc_model, job.soc.htp_arch, fp16=job.precision == "fp16", extra=extra)

    def compile(self, job: CompileJob) -> CompileResult:
        model = job.precompiled if job.precision != "fp16" else job.prepared.path
        if model is None:
            raise CompileError(f"{job.target_id}: no quantized graph for {job.precision}")
        options = self._options(job)
        start = time.monotonic()
        try:
            ctx, binary = qnn_ep.compile_context(model, job.out_dir, job.prepared.graph, options)
        except CompileError as e:
            if "CPU" in e.message or "fallback" in e.message.lower() or "assigned" in e.message:
                rejected = qnn_ep.cpu_nodes_when_falling_back(model, options)
                if rejected:
                    names = ", ".join(f"{op} ({name})" for op, name in rejected[:8])
                    more = f" and {len(rejected) - 8} more" if len(rejected) > 8 else ""
                    raise CompileError(
                        f"{job.target_id}: HTP {job.soc.arch} rejects {len(rejected)} node(s): {names}{more}",
                        hint="change the export so these ops are supported (or excluded); no CPU partitions") from None
            raise CompileError(f"{job.target_id}: {e.message}",
                               hint="run with --verbose; the QNN EP log names the failing op") from None
        seconds = time.monotonic() - start
        info = qnn_ep.read_compat(ctx)
        if info.htp_arch != job.soc.htp_arch or info.soc_model != job.soc.soc_model:
            raise CompileError(f"{job.target_id}: the binary says v{info.htp_arch} / soc_model {info.soc_model}, "
                               f"asked for {job.soc.arch} / {job.soc.soc_model}",
                               hint="the QNN EP ignored the chip options: check the onnxruntime-qnn version")
        sdk = (info.sdk_version or info.qnn_version).lstrip("v")
        return CompileResult(context_onnx=ctx, binaries=[binary], sdk_version=sdk, seconds=seconds)

    def run(self, job: CompileJob, result: CompileResult, feeds: list[dict[str, np.ndarray]]):
        ort, _ = qnn_ep._ort()
        so = qnn_ep.session_options(allow_cpu_fallback=False, options=self._options(job, for_run=True))
        try:
            sess = ort.InferenceSession(str(result.context_onnx), sess_options=so)
            names = [o.name for o in job.prepared.outputs]
            outs, seconds = [], []
            for f in feeds:
                t = time.monotonic()
                outs.append(sess.run(names, f))
                seconds.append(time.monotonic() - t)
        except Exception as e:
            raise CompileError(f"{job.target_id}: the HTP emulator could not run the binary: "
                               f"{qnn_ep._first_line(e)}") from None
        return outs, float(np.median(seconds))
