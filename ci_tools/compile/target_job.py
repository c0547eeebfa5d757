"""One target, in a worker process: compile -> verify -> write ``<out>/<target id>/`` atomically.

The folder is assembled under a temporary name and renamed into place with its
``target.json`` last written inside it, so a folder with ``target.json`` is always whole.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from ..catalog.socs import Soc
from ..errors import QnnReleaseError, VerifyError
from ..matrix.schema import Options, Stream
from ..prepare.graph import Prepared, cpu_session, generate_inputs, generated_inputs_note, run_cpu
from ..sources.samples import SampleSet, run_stream
from ..util.files import link_or_copy, replace_dir, write_json
from ..util.text import clip, step_done
from .ran import RAN_FILE, SAMPLE_TRIES, Ran, no_expectation, write_ran
from .records import CACHED, FAILED, GENERATED, OK, REAL, TARGET_FILE, TargetRecord, write_target

FAILED_DIR = "failed"  # <out>/failed/<target id>/: the work folder of a failed target, kept for its logs
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
    # the compile alone, by its own key (``builder.keys.compile_key``): a target judged again (new thresholds,
    # new samples) reuses it, and a target that failed its verification keeps it, never compiled twice
    compiled: Path | None = None
    reuse_compile: bool = True  # False with --force: compile again (and keep that compile instead)
    seed: int
    calibration: list[dict[str, np.ndarray]] | None
    calibration_hash: str | None
    precompiled: Path | None
    weight_scales: str | None = None  # quantized: 'per-channel' or 'per-tensor'
    precompile_run: str | None = None  # id of the conversion run ``precompiled`` came from
    inputs_note: str | None = None  # what the verification inputs are (None: generated here)
    # the model's recipe verifies a chip's graphs together once they are all built: what the compile's record
    # says until then (None: the target is verified here, on its own, against CPU). The compile is kept in the
    # store; the target's folder is written with the recipe's verdict (``finalize``), never before it.
    recipe_check: str | None = None
    sample_set: SampleSet | None = None  # the model's real samples for this graph (streams for a stateful one)
    graph_samples: bool = True  # its archives carry sample/ from its ran.npz (False: the recipe ships its own)


def _link_binaries(src: str, dst: str) -> None:
    """Hard-link the context binaries (large, never written after the compile), copy everything else: a route
    may rewrite its logs while verifying (qairt's context-binary-utility), which must not reach another copy."""
    if src.endswith(".bin"):
        link_or_copy(src, dst)
    else:
        shutil.copy2(src, dst)


def copy_atomic(src: Path, dest: Path) -> None:
    """Copy a finished target folder to ``dest`` so that ``dest`` appears whole (hard links when possible)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(src, tmp / "t", copy_function=link_or_copy)
        replace_dir(tmp / "t", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def finalize(src: Path, dest: Path, record: TargetRecord) -> None:
    """Write a target's folder once: ``src``'s files (hard links when possible) with ``record`` as its
    ``target.json``, appearing whole at ``dest``; a failed record leaves no folder there."""
    if record.status == FAILED:
        forget(dest)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(src, tmp / "t", copy_function=link_or_copy)
        # a new file (write, then rename): the link to src's target.json goes. "cached" says where this build
        # found it; the folder says what it is
        write_target(tmp / "t", record.with_(status=OK) if record.status == CACHED else record)
        replace_dir(tmp / "t", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def put_in_store(final: Path, entry: Path) -> None:
    if not (entry / TARGET_FILE).exists():
        copy_atomic(final, entry)


def keep_failed(work: Path, dest: Path, record: TargetRecord) -> TargetRecord:
    """A failed target's work folder (logs, converter output) is evidence: keep it as ``dest``.

    Paths in the error (``full log: ...``) are rewritten to where the files now are.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        replace_dir(work, dest)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        return record
    return record.with_(work_dir=str(dest), error=(record.error or "").replace(str(work), str(dest)))


def run_target(spec: TargetSpec) -> TargetRecord:
    """Never raises: returns the outcome record (status ok / failed)."""
    start = time.monotonic()
    who = {"id": spec.target_id, "model": spec.model, "graph": spec.graph, "soc": spec.soc.name,
           "precision": spec.precision, "key": spec.key, "backend": spec.backend, "precompile_run": spec.precompile_run}
    if os.environ.get("QNN_RELEASE_IMAGE"):  # the container image a CI job compiled in (ref@digest)
        who["image"] = os.environ["QNN_RELEASE_IMAGE"]
    failed_dir = spec.out / FAILED_DIR / spec.target_id
    shutil.rmtree(failed_dir, ignore_errors=True)
    tmp, record = None, None
    try:
        from .backends import get_backend

        backend = get_backend(spec.backend)
        spec.out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.target_id}.", dir=spec.out))
        record = _built(spec, backend, tmp, who, start)
        write_target(tmp, record)
        if spec.recipe_check is not None:  # the compile only: the recipe's check decides what ``out`` gets
            copy_atomic(tmp, spec.store / spec.key)  # (tmp itself goes in ``finally``)
        else:
            final = spec.out / spec.target_id
            replace_dir(tmp, final)
            tmp = None
            put_in_store(final, spec.store / spec.key)
    except QnnReleaseError as e:
        record = TargetRecord.failure(who, str(e), e.exit_code, e.details)
        _forget(spec)
    except Exception as e:  # a bug or an unexpected library error: keep it on one target
        record = TargetRecord.failure(who, f"internal error: {type(e).__name__}: {e}".splitlines()[0], 70,
                                      traceback=traceback.format_exc())
        _forget(spec)
    finally:
        if tmp is not None and record is not None and record.status == FAILED:
            record = keep_failed(tmp, failed_dir, record)
        elif tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return record.with_(seconds=round(time.monotonic() - start, 3))


def _built(spec: TargetSpec, backend, tmp: Path, who: dict, start: float) -> TargetRecord:
    """Compile into ``tmp`` and verify: the record of a finished target (raises what either raises)."""
    from datetime import datetime, timezone

    from .backends import CompileJob

    job = CompileJob(target_id=spec.target_id, prepared=spec.prepared, soc=spec.soc, precision=spec.precision,
                     options=spec.options, out_dir=tmp, calibration=spec.calibration, precompiled=spec.precompiled)
    result, reused = _compile(spec, backend, job)
    inputs_note = spec.inputs_note or generated_inputs_note(spec.prepared.input_ranges)
    if spec.sample_set is not None:
        inputs_note = spec.sample_set.note + carried_note(backend, spec.sample_set)
    if spec.recipe_check is not None:  # the recipe verifies the chip's graphs together, once all are built
        verification, note = None, spec.recipe_check
        inputs_note = spec.inputs_note or inputs_note
    else:
        verification, note = _verify(spec, backend, job, result, inputs_note), ""
    if not (tmp / RAN_FILE).is_file() and spec.graph_samples:  # not verified here: a generated sample, on CPU
        write_ran(tmp, _generated_sample(spec))
    return TargetRecord.make(**who, **_compiled(spec, backend, result, tmp), compile_reused=reused,
                             verify_inputs=inputs_note,
                             **_verified(spec, verification, note),
                             created=datetime.now(timezone.utc).isoformat(timespec="seconds"), status=OK,
                             seconds=round(time.monotonic() - start, 3))


COMPILED_FILE = "compiled.json"


def _compile(spec: TargetSpec, backend, job) -> tuple[object, bool]:
    """(the CompileResult, whether it is an earlier compile of the same key): the compile's files are kept by
    their own key, so only what judges them runs again."""
    from .backends import CompileResult

    entry = spec.compiled
    if entry is not None and spec.reuse_compile and (entry / COMPILED_FILE).is_file():
        try:
            saved = json.loads((entry / COMPILED_FILE).read_text())
            shutil.copytree(entry, job.out_dir, copy_function=_link_binaries, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(COMPILED_FILE))
            here = job.out_dir
            return CompileResult(context_onnx=here / saved["context_onnx"],
                                 binaries=[here / b for b in saved["binaries"]], sdk_version=saved["sdk_version"],
                                 seconds=saved["seconds"], warnings=saved["warnings"],
                                 logs=[here / p for p in saved["logs"]]), True
        except (OSError, ValueError, KeyError):
            shutil.rmtree(job.out_dir, ignore_errors=True)  # a damaged entry: compile afresh
            job.out_dir.mkdir(parents=True, exist_ok=True)
    result = backend.compile(job)
    if entry is not None:
        _keep_compile(entry, job.out_dir, result)
    return result, False


def _keep_compile(entry: Path, folder: Path, result) -> None:
    """The compile's files as they are before anything judges them, with what names them (written last)."""
    def rel(p: Path) -> str:
        return str(Path(p).resolve().relative_to(folder.resolve()))

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name[:12]}.", dir=entry.parent))
    try:
        shutil.copytree(folder, tmp / "c", copy_function=_link_binaries)
        write_json(tmp / "c" / COMPILED_FILE, {
            "context_onnx": rel(result.context_onnx), "binaries": [rel(b) for b in result.binaries],
            "sdk_version": result.sdk_version, "seconds": result.seconds, "warnings": list(result.warnings),
            "logs": [rel(p) for p in result.logs if Path(p).exists() and folder.resolve() in Path(p).resolve().parents]
        })
        replace_dir(tmp / "c", entry)
    except (OSError, ValueError):
        pass  # a cache: the target is built either way
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _compiled(spec: TargetSpec, backend, result, tmp: Path) -> dict:
    """What the compile made: the files, sizes, placement and the toolchain that made them."""
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    size = sum(b.stat().st_size for b in result.binaries)
    prep = spec.prepared
    return {
        "sdk_version": result.sdk_version, "compile_seconds": round(result.seconds, 3),
        # the compile's own warnings, and prepare's about what the binary computes (a padded recurrent graph)
        "warnings": list(result.warnings) + [n for n in prep.notes if n.startswith("warning:")],
        "files": [{"name": str(p.relative_to(tmp)), "size": p.stat().st_size} for p in files],
        "context_onnx": result.context_onnx.name, "binaries": [b.name for b in result.binaries], "size": size,
        # no CPU fallback: every node of the prepared graph runs on HTP
        "placement": {"htp_nodes": sum(prep.op_counts.values()), "cpu_nodes": 0, "ops": prep.op_counts},
        "parameters": prep.parameters,
        "bytes_per_parameter": round(size / prep.parameters, 3) if prep.parameters else None,
        # per weight of the SOURCE graph: fp16 ~2, w8a16 ~1; more means a copy of weights (see prepare notes)
        "source_parameters": prep.source_parameters,
        "bytes_per_source_parameter": round(size / prep.source_parameters, 3) if prep.source_parameters else None,
        "calibration_sha256": spec.calibration_hash, "weight_scales": spec.weight_scales,
        "quantized_graph": spec.precompiled.name if isinstance(spec.precompiled, Path)
        and spec.precompiled.name.endswith(".qdq.onnx") else None,
        "sdk_sha256": backend.sdk_sha256(),
    }


def _verified(spec: TargetSpec, verification, note: str) -> dict:
    """How the target was verified: its parity numbers, or why it was not run on an emulator."""
    if verification is None:
        return {"verified": False, "verified_on": None, "parity": None, "emulator_seconds": None,
                "verify_note": note or f"the {spec.backend} route has no emulator here"}
    v, total = verification
    out = {"verified": True, "verified_on": REAL if spec.sample_set is not None else GENERATED,
           "parity": v.parity.as_dict(), "per_output": v.per_output, "thresholds": v.thresholds,
           "emulator_seconds": round(v.emulator_seconds, 4), "emulator_seconds_total": round(total, 4),
           "verify_samples": v.samples, "passed_by": v.passed_by, "rules": list(v.rules) or None,
           "worst_output": v.worst_output,
           "per_sample": v.per_sample}
    if spec.sample_set is not None:
        out["samples"] = spec.sample_set.as_dict()
    return out


def _forget(spec: TargetSpec) -> None:
    """A target that failed (a re-verification on new samples, a --force rebuild) is never served again
    from an earlier success: its folder in ``out`` and its store entry go."""
    forget(spec.out / spec.target_id)
    forget(spec.store / spec.key)


def forget(folder: Path) -> None:
    if (folder / TARGET_FILE).exists():
        (folder / TARGET_FILE).unlink()  # first: a folder without it is never taken as finished
    shutil.rmtree(folder, ignore_errors=True)


def _verify(spec: TargetSpec, backend, job, result, inputs_note: str):
    """Run the binary on the emulator and judge it against CPU: (Verification, emulator seconds in all),
    or None when the route has no emulator here."""
    from .verify import Judging, Runs, check, thresholds_for

    th = thresholds_for(spec.options, spec.precision)
    names = [o.name for o in spec.prepared.outputs]
    ss = spec.sample_set
    if ss is not None and ss.stream is not None:
        return _verify_streams(spec, backend, job, result, inputs_note, th)
    if ss is not None:
        feeds, sample_names = ss.feeds, [n for n, _ in ss.streams]
    else:
        feeds = generate_inputs(spec.prepared.inputs, count=2, seed=spec.seed + 1, ranges=spec.prepared.input_ranges)
        sample_names = [f"generated sample {i}" for i in range(len(feeds))]
    expected = run_cpu(spec.prepared.path, feeds)
    kept = Ran(names=sample_names, feeds=feeds, outputs=expected, output_names=names, emulator=True,
               real=ss is not None, total=len(feeds))
    ran = backend.run(job, result, feeds)
    if ran is None:  # CPU's answers are kept all the same: the archive's sample/, a device's inputs
        write_ran(job.out_dir, dataclasses.replace(kept, emulator=False))
        return None
    outputs, emu_seconds = ran
    how = Judging.of(spec.options, precision=spec.precision, inputs_note=inputs_note,
                     argmax=ss.argmax if ss is not None else None)
    try:
        v = check(spec.target_id, names,
                  Runs(expected, outputs, sample_names=sample_names, emulator_seconds=emu_seconds),
                  th, how=how)
    except VerifyError as e:
        bisect_failure(spec, job, result, e, dict(zip(sample_names, feeds)), th)
        raise
    write_ran(job.out_dir, kept)
    return v, emu_seconds * len(feeds)


def _verify_streams(spec: TargetSpec, backend, job, result, inputs_note: str, th):
    """A stateful graph's streams run on the emulator, each side carrying its own state, judged over their steps:
    (Verification, emulator seconds in all), or None when the route has no emulator here."""
    from .backends import NoEmulator
    from .verify import Judging, Runs, check_streams

    names = [o.name for o in spec.prepared.outputs]
    ss = cast(SampleSet, spec.sample_set)
    stream = cast(Stream, ss.stream)
    cpu = cpu_session(spec.prepared.path)
    ran = [run_stream(lambda f: cpu.run(None, f), steps, stream.carry, names) for _, steps in ss.streams]
    reference = [outs for _, outs in ran]
    # each step as CPU fed it (its carried state): what a failure is bisected on
    step_feeds = {f"{name} step {i}": f for (name, _), (fed, _) in zip(ss.streams, ran) for i, f in enumerate(fed)}
    start = time.monotonic()
    kept = Ran(names=list(step_feeds), feeds=list(step_feeds.values()),
               outputs=[o for outs in reference for o in outs], output_names=names, emulator=True, real=True,
               streams=True, total=len(step_feeds))
    try:
        compiled, carried = _run_streams(backend, job, result, ss, [fed for fed, _ in ran], names)
    except NoEmulator:
        write_ran(job.out_dir, dataclasses.replace(kept, emulator=False))
        return None
    total = time.monotonic() - start
    steps = sum(len(st) for _, st in ss.streams)
    how = Judging.of(spec.options, precision=spec.precision, inputs_note=inputs_note, stream=stream,
                     carried=carried)
    try:
        runs = Runs(reference, compiled, sample_names=[n for n, _ in ss.streams],
                    emulator_seconds=total / max(1, steps))
        v = check_streams(spec.target_id, names, runs, th, how)
    except VerifyError as e:  # bisected on the worst step, fed the state CPU carried into it
        bisect_failure(spec, job, result, e, step_feeds, th)
        raise
    write_ran(job.out_dir, kept)
    return v, total


def _generated_sample(spec: TargetSpec) -> Ran:
    """A target no emulator ran: the first generated input whose expected outputs say something (CPU's answer for
    it is what an app's smoke test compares with), for the archive's ``sample/``."""
    names = [o.name for o in spec.prepared.outputs]
    fault = None
    for attempt in range(SAMPLE_TRIES):
        feeds = generate_inputs(spec.prepared.inputs, count=1, seed=spec.seed + 7 + attempt,
                                ranges=spec.prepared.input_ranges)
        expected = run_cpu(spec.prepared.path, feeds)
        fault = no_expectation(names, expected[0], spec.options.constant_outputs)
        if fault is None:
            break
    return Ran(names=[f"generated sample (seed {spec.seed + 7 + attempt})"], feeds=feeds, outputs=expected,
               output_names=names, emulator=False, real=False, total=1)


STREAM_QUIET_SECONDS = 10  # a stream check shorter than this prints nothing of its own


def _run_streams(backend, job, result, ss, cpu_fed: list[list[dict]], names: list[str]
                 ) -> tuple[list[list[list[np.ndarray]]], dict[str, int]]:
    """Every stream on the emulator, carrying its own state through the route's ``carried_steps``; the steps
    past them (every stream's) in one run fed the state CPU carried into them. Returns the outputs per stream
    and, for each stream cut so, how many steps it carried (where its drift is judged)."""
    from .backends import NoEmulator

    limit = backend.carried_steps
    carried: dict[str, int] = {}
    compiled: list[list[list[np.ndarray]]] = []
    started = time.monotonic()
    with backend.stepper(job, result) as step:
        for k, (sname, steps) in enumerate(ss.streams, 1):
            n = len(steps) if limit is None else min(limit, len(steps))
            compiled.append(run_stream(step, steps[:n], ss.stream.carry, names)[1])
            if n < len(steps):
                carried[sname] = n
            if time.monotonic() - started > STREAM_QUIET_SECONDS:  # a long check says each stream, and what is left
                step_done(job.target_id, "stream", k, len(ss.streams), started)
    rest = [(i, fed[len(c):]) for i, (c, fed) in enumerate(zip(compiled, cpu_fed)) if len(c) < len(fed)]
    if rest:
        ran = backend.run(job, result, [f for _, feeds in rest for f in feeds])
        if ran is None:
            raise NoEmulator
        outs = iter(ran[0])
        for i, feeds in rest:
            compiled[i].extend(next(outs) for _ in feeds)
    return compiled, carried


def carried_note(backend, sample_set) -> str:
    """What a route that cannot carry a stream's state past ``carried_steps`` did instead (said with the
    inputs); empty when every step was carried."""
    limit = backend.carried_steps
    if sample_set is None or sample_set.stream is None or limit is None or \
            all(len(st) <= limit for _, st in sample_set.streams):
        return ""
    return (f"; the {backend.name} route carried each stream's state through its first {limit} steps (drift judged "
            f"there) and ran the rest in one run fed the state CPU carried")


BISECT_WITHIN_SECONDS = 900.0  # a parity failure is bisected when its probe compiles (3 at most) fit in this


def bisect_failure(spec: TargetSpec, job, result, e, feeds: dict[str, dict], thresholds) -> None:
    """A parity failure, bisected on its worst sample (the embedded route's emulator): the first node whose
    output leaves CPU's goes into the error (the record and the page) with its numbers, the known quirk and the
    declared fix; the sample and the command that repeats it are kept with the failed target."""
    from .bisect import ROUNDS, Sample, bisect

    details = e.details or {}
    if details.get("cause") == "reference":  # CPU's own answer is the fault: there is no chip to hunt in
        return
    worst = (details.get("per_output") or {}).get(details.get("worst_output") or "", {})
    sample = worst.get("sample") if worst.get("sample") in feeds else next(iter(feeds), None)
    embedded = spec.backend == "ort"
    # the qairt route's w8a16 graph is the converter's own quantization: there is no QDQ ONNX to probe
    graph = spec.prepared.path if spec.precision == "fp16" else spec.precompiled if embedded else None
    if sample is None or graph is None:
        return
    import shlex

    folder = job.out_dir / "bisect"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "sample.npz", **feeds[sample])
    kept = spec.out / FAILED_DIR / spec.target_id / "bisect" / "sample.npz"  # where keep_failed moves it
    again = (f"qnn-release bisect {shlex.quote(str(graph))} --soc {spec.soc.name} --sample {shlex.quote(str(kept))}"
             + (" --quantized" if spec.precision != "fp16" else ""))
    if result.seconds * ROUNDS > BISECT_WITHIN_SECONDS:
        e.message += f"; not bisected (its compile took {result.seconds:.0f} s): `{again}` finds the node"
        return
    try:
        b = bisect(graph, Sample(name=sample, feed=feeds[sample]), spec.soc, thresholds,
                   quantized=spec.precision != "fp16")
    except Exception as x:  # the failure stands as it is; the hunt is extra
        e.message += f"; bisect could not run: {clip(str(x), 200)}; `{again}` repeats it"
        return
    write_json(folder / "bisect.json", b.as_dict())
    if embedded:
        e.message += f"; {b.line()}"
    else:  # the same HTP kernels, reached through onnxruntime-qnn, not through the converter's graph
        e.message += (f"; bisected on the embedded route (onnxruntime-qnn's HTP emulator): {b.line()}"
                      + ("" if b.first is not None else
                         "; so the fault is in what the qairt converter made of the graph, not in an HTP kernel"))
    if b.first is not None:  # the node is named: what to do about it, not the generic precision hint
        e.hint = (f"{b.fix}; " if b.fix else "") + f"repeat the hunt: `{again}`"
    e.details = {**details, "bisect": b.as_dict(), "bisect_again": again}
