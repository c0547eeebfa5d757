"""The embedded route: ONNX Runtime QNN EP compiles real HTP context binaries on x86-64 Linux.

Per chip it passes the NUMERIC soc_model and htp_arch (the EP maps names it does not know
to 0 silently), forbids CPU fallback, and reads ``ep_compatibility_info`` back to prove the
binary is for the chip that was asked for.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import CompileError
from ...prepare.quantize import quantize_graph
from .. import qnn_ep
from ..doctor import diagnose
from . import Backend, CompileJob, CompileResult

if TYPE_CHECKING:
    from ...catalog.socs import Soc
    from ...prepare.graph import Prepared
    from ..doctor import Diagnosis


class OrtBackend(Backend):
    name = "ort"

    def __init__(self) -> None:
        qnn_ep.qnn_version()  # raises BackendUnavailable when onnxruntime-qnn is missing

    def sdk_version(self) -> str:
        return f"{qnn_ep.qnn_version()} (onnxruntime-qnn {qnn_ep.ep_package_version()})"

    def precompile(self, prepared: Prepared, precision: str, calibration: list[dict[str, np.ndarray]] | None,
                   calibration_hash: str | None, per_channel: bool = True) -> Path | None:
        if precision == "fp16":
            return None  # the EP converts float graphs to fp16 itself
        return quantize_graph(prepared.path, precision, calibration or [], per_channel=per_channel)

    def doctor(self, prepared: Prepared, soc: Soc, quantized: Path | None = None) -> Diagnosis | None:
        """The nodes HTP rejects on ``soc``: in ``prepared`` compiled as fp16, or in the ``quantized`` (QDQ) graph
        of a w8a16/int8 precision (HTP's op support differs between float and quantized graphs). A trial
        compile, its verdict kept beside the graph it tried."""
        import json

        from ...util.files import write_json
        from ..doctor import DOCTOR_VERSION, Diagnosis, trial_compile

        graph = quantized or prepared.path
        # keyed by the doctor's own version too: a verdict it would now give differently is not served again
        cache = graph.parent / f"doctor{DOCTOR_VERSION}-{qnn_ep.qnn_version()}-v{soc.htp_arch}-{soc.soc_model}" \
            f"{'-' + graph.stem if quantized else ''}.json"
        try:
            data = json.loads(cache.read_text())
            return Diagnosis(rejected=[tuple(r) for r in data["rejected"]], details=data.get("details", {}))
        except (OSError, ValueError, KeyError):
            pass
        d = trial_compile(graph, soc.soc_model, soc.htp_arch, fp16=quantized is None)
        if d is not None:
            write_json(cache, {"rejected": d.rejected, "details": d.details})
        return d

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
        log = job.out_dir / "logs" / "compile.log"
        into = qnn_ep.ContextFiles(out_dir=job.out_dir, stem=job.prepared.graph)
        start = time.monotonic()
        try:
            ctx, binary = qnn_ep.compile_context(model, into, options, log=log, label=job.target_id)
        except CompileError as e:
            rejected = e.rejected
            if not rejected and ("CPU" in e.message or "fallback" in e.message.lower() or "assigned" in e.message):
                rejected = qnn_ep.cpu_nodes_when_falling_back(model, options)
            if rejected:
                d = diagnose(model, rejected)
                raise CompileError(f"{job.target_id}: {job.soc.arch}: {d.summary()}", hint=f"full log: {log}",
                                   details={"diagnosis": d.as_dict()}) from None
            raise CompileError(f"{job.target_id}: {e.message}", hint=f"full log: {log}") from None
        seconds = time.monotonic() - start
        info = qnn_ep.read_compat(ctx)
        if not qnn_ep.proves_chip(info.htp_arch, info.soc_model, job.soc):
            raise CompileError(f"{job.target_id}: the binary says v{info.htp_arch} / soc_model {info.soc_model}, "
                               f"asked for {job.soc.arch} / {job.soc.soc_model}",
                               hint="the QNN EP ignored the chip options: check the onnxruntime-qnn version")
        sdk = (info.sdk_version or info.qnn_version).lstrip("v")
        return CompileResult(context_onnx=ctx, binaries=[binary], sdk_version=sdk, seconds=seconds,
                             logs=[log] if log.is_file() else [])

    def run(self, job: CompileJob, result: CompileResult, feeds: list[dict[str, np.ndarray]]
            ) -> tuple[list[list[np.ndarray]], float] | None:
        outs: list[list[np.ndarray]] = []
        seconds: list[float] = []
        with self.stepper(job, result) as step:
            for f in feeds:
                t = time.monotonic()
                outs.append(step(f))
                seconds.append(time.monotonic() - t)
        return outs, float(np.median(seconds))

    @contextlib.contextmanager
    def stepper(self, job: CompileJob, result: CompileResult) -> Iterator[Callable[[dict], list[np.ndarray]]]:
        """One emulator session for many runs (a stream's steps): yields ``step(feed) -> outputs``."""
        ort, _ = qnn_ep._ort()
        so = qnn_ep.session_options(allow_cpu_fallback=False, options=self._options(job, for_run=True))
        log = job.out_dir / "logs" / "emulator.log"
        names = [o.name for o in job.prepared.outputs]

        def failed(e: Exception) -> CompileError:
            return CompileError(f"{job.target_id}: the HTP emulator could not run the binary: "
                                f"{qnn_ep._first_line(e)}", hint=f"full log: {log}")

        with qnn_ep.native_log(log):
            try:
                sess = ort.InferenceSession(str(result.context_onnx), sess_options=so)
            except Exception as e:
                raise failed(e) from None

            def step(feed: dict) -> list[np.ndarray]:
                try:
                    return sess.run(names, feed)
                except Exception as e:
                    raise failed(e) from None

            yield step
