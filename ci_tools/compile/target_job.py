"""One target, in a worker process: compile -> verify -> write ``<out>/<target id>/`` atomically.

The folder is assembled under a temporary name and renamed into place with its
``target.json`` last written inside it, so a folder with ``target.json`` is always whole.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..catalog.socs import Soc
from ..errors import QnnReleaseError
from ..matrix.schema import Options
from ..prepare.graph import Prepared, cpu_session, generate_inputs, generated_inputs_note, run_cpu
from ..sources.samples import SampleSet, run_stream
from ..util.files import replace_dir, write_json

FAILED = "failed"  # <out>/failed/<target id>/: the work folder of a failed target, kept for its logs
COMPILE_VERSION = 2  # bump when a change here (compile or verification) should rebuild every target


@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    target_id: str
    model: str
    graph: str
    soc: Soc
    precision: str
    options: Options
    prepared: Prepared
    backend: str
    key: str
    out: Path
    store: Path  # content-addressed store of finished targets: <store>/<key>/
    seed: int
    calibration: list[dict[str, np.ndarray]] | None
    calibration_hash: str | None
    precompiled: Path | None
    weight_scales: str | None = None  # quantized: 'per-channel' or 'per-tensor'
    precompile_run: str | None = None  # id of the conversion run ``precompiled`` came from
    inputs_note: str | None = None  # what the verification inputs are (None: generated here)
    verify_kind: str = "parity"  # "transcript": the recipe verifies the chip's graphs together, after the build
    sample_set: SampleSet | None = None  # the model's real samples for this graph (streams for a stateful one)


REAL, GENERATED = "real-samples", "generated-inputs"  # what a verified target was verified on


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def copy_atomic(src: Path, dest: Path) -> None:
    """Copy a finished target folder to ``dest`` so that ``dest`` appears whole (hard links when possible)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(src, tmp / "t", copy_function=_link_or_copy)
        replace_dir(tmp / "t", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def put_in_store(final: Path, entry: Path) -> None:
    if not (entry / "target.json").exists():
        copy_atomic(final, entry)


def keep_failed(work: Path, dest: Path, record: dict) -> None:
    """A failed target's work folder (logs, converter output) is evidence: keep it as ``dest``.

    Paths in the error (``full log: ...``) are rewritten to where the files now are.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        replace_dir(work, dest)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        return
    record["work_dir"] = str(dest)
    record["error"] = record["error"].replace(str(work), str(dest))


def run_target(spec: TargetSpec) -> dict:
    """Never raises: returns the outcome record (status ok / failed)."""
    start = time.monotonic()
    record = {"id": spec.target_id, "model": spec.model, "graph": spec.graph, "soc": spec.soc.name,
              "precision": spec.precision, "key": spec.key, "backend": spec.backend,
              "precompile_run": spec.precompile_run}
    if os.environ.get("QNN_RELEASE_IMAGE"):  # the container image a CI job compiled in (ref@digest)
        record["image"] = os.environ["QNN_RELEASE_IMAGE"]
    failed_dir = spec.out / FAILED / spec.target_id
    shutil.rmtree(failed_dir, ignore_errors=True)
    tmp = None
    try:
        from .backends import CompileJob, get_backend

        backend = get_backend(spec.backend)
        spec.out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.target_id}.", dir=spec.out))
        job = CompileJob(target_id=spec.target_id, prepared=spec.prepared, soc=spec.soc, precision=spec.precision,
                         options=spec.options, out_dir=tmp, calibration=spec.calibration, precompiled=spec.precompiled)
        result = backend.compile(job)
        inputs_note = spec.inputs_note or generated_inputs_note(spec.prepared.input_ranges)
        verified_on = REAL if spec.sample_set is not None else GENERATED
        if spec.sample_set is not None:
            inputs_note = spec.sample_set.note
        if spec.verify_kind == "transcript":  # the recipe verifies the chip's graphs together, by what they say
            verification, note = None, "verified by transcript once every graph for this chip is built"
            inputs_note = "the model's clips (transcript verification)"
        else:
            verification, note = _verify(spec, backend, job, result, inputs_note), ""
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        size = sum(b.stat().st_size for b in result.binaries)
        record.update({
            "sdk_version": result.sdk_version,
            "compile_seconds": round(result.seconds, 3),
            "warnings": result.warnings,
            "files": [{"name": str(p.relative_to(tmp)), "size": p.stat().st_size} for p in files],
            "context_onnx": result.context_onnx.name,
            "binaries": [b.name for b in result.binaries],
            "size": size,
            # no CPU fallback: every node of the prepared graph runs on HTP
            "placement": {"htp_nodes": sum(spec.prepared.op_counts.values()), "cpu_nodes": 0,
                          "ops": spec.prepared.op_counts},
            "parameters": spec.prepared.parameters,
            "bytes_per_parameter": round(size / spec.prepared.parameters, 3) if spec.prepared.parameters else None,
            # per weight of the SOURCE graph: fp16 ~2, w8a16 ~1; more means a copy of weights (see prepare notes)
            "source_parameters": spec.prepared.source_parameters,
            "bytes_per_source_parameter": round(size / spec.prepared.source_parameters, 3)
            if spec.prepared.source_parameters else None,
            "verify_inputs": inputs_note,
            "calibration_sha256": spec.calibration_hash,
            "weight_scales": spec.weight_scales,
            "sdk_sha256": getattr(backend, "sdk_sha256", lambda: None)(),
        })
        if verification is None:
            record.update({"verified": False, "verified_on": None, "parity": None, "emulator_seconds": None,
                           "verify_note": note or f"the {spec.backend} route has no emulator here"})
        else:
            v, total = verification
            record.update({"verified": True, "verified_on": verified_on, "parity": v.parity.as_dict(),
                           "per_output": v.per_output, "thresholds": v.thresholds,
                           "emulator_seconds": round(v.emulator_seconds, 4),
                           "emulator_seconds_total": round(total, 4), "verify_samples": v.samples,
                           "passed_by": v.passed_by, "worst_output": v.worst_output, "per_sample": v.per_sample})
            if spec.sample_set is not None:
                record["samples"] = spec.sample_set.as_dict()
        from datetime import datetime, timezone

        record["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        record["status"] = "ok"
        record["seconds"] = round(time.monotonic() - start, 3)
        write_json(tmp / "target.json", record)
        final = spec.out / spec.target_id
        replace_dir(tmp, final)
        tmp = None
        put_in_store(final, spec.store / spec.key)
    except QnnReleaseError as e:
        record.update({"status": "failed", "error": str(e), "exit_code": e.exit_code, **(e.details or {})})
        _forget(spec)
    except Exception as e:  # a bug or an unexpected library error: keep it on one target
        record.update({"status": "failed", "error": f"internal error: {type(e).__name__}: {e}".splitlines()[0],
                       "exit_code": 70, "traceback": traceback.format_exc()})
        _forget(spec)
    finally:
        if tmp is not None and record.get("status") == "failed":
            keep_failed(tmp, failed_dir, record)
        elif tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    record["seconds"] = round(time.monotonic() - start, 3)
    return record


def _forget(spec: TargetSpec) -> None:
    """A target that failed (a re-verification on new samples, a --force rebuild) is never served again
    from an earlier success: its folder in ``out`` and its store entry go."""
    forget(spec.out / spec.target_id)
    forget(spec.store / spec.key)


def forget(folder: Path) -> None:
    if (folder / "target.json").exists():
        (folder / "target.json").unlink()  # first: a folder without it is never taken as finished
    shutil.rmtree(folder, ignore_errors=True)


def _one_run_per_step(backend):
    """A route without an emulator session (qairt: one qnn-net-run per call) runs a stream one step per run:
    slower, the same judgement. A route with no emulator at all returns None from run: no verification."""
    import contextlib

    @contextlib.contextmanager
    def stepper(job, result):
        def step(feed):
            ran = backend.run(job, result, [feed])
            if ran is None:
                raise _NoEmulator
            return ran[0][0]

        yield step

    return stepper


class _NoEmulator(Exception):
    pass


def _verify(spec: TargetSpec, backend, job, result, inputs_note: str):
    """Run the binary on the emulator and judge it against CPU: (Verification, emulator seconds in all),
    or None when the route has no emulator here."""
    from .verify import check, check_streams, thresholds_for

    th = thresholds_for(spec.options, spec.precision)
    names = [o.name for o in spec.prepared.outputs]
    ss = spec.sample_set
    if ss is not None and ss.stream is not None:
        stepper = getattr(backend, "stepper", None) or _one_run_per_step(backend)
        cpu = cpu_session(spec.prepared.path)
        reference = [run_stream(lambda f: cpu.run(None, f), steps, ss.stream.carry, names)[1]
                     for _, steps in ss.streams]
        start = time.monotonic()
        try:
            with stepper(job, result) as step:
                compiled = [run_stream(step, steps, ss.stream.carry, names)[1] for _, steps in ss.streams]
        except _NoEmulator:
            return None
        total = time.monotonic() - start
        steps = sum(len(st) for _, st in ss.streams)
        v = check_streams(spec.target_id, names, [n for n, _ in ss.streams], reference, compiled, th, ss.stream,
                          total / max(1, steps), precision=spec.precision, inputs_note=inputs_note,
                          slices=spec.options.slices)
        return v, total
    if ss is not None:
        feeds, sample_names = ss.feeds, [n for n, _ in ss.streams]
    else:
        feeds = generate_inputs(spec.prepared.inputs, count=2, seed=spec.seed + 1, ranges=spec.prepared.input_ranges)
        sample_names = [f"generated sample {i}" for i in range(len(feeds))]
    ran = backend.run(job, result, feeds)
    if ran is None:
        return None
    outputs, emu_seconds = ran
    reference = run_cpu(spec.prepared.path, feeds)
    v = check(spec.target_id, names, reference, outputs, th, emu_seconds, precision=spec.precision,
              inputs_note=inputs_note, sample_names=sample_names, argmax=ss.argmax if ss is not None else None,
              slices=spec.options.slices)
    return v, emu_seconds * len(feeds)
