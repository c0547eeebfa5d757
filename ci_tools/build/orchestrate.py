"""``qnn-release build``: plan -> prepare (once per graph) -> compile + verify (per target, in workers).

Each target is cached under a content-addressed key: an unchanged target is not rebuilt.
One failing target does not stop the others; ``build-report.json`` says which failed and why.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .. import __version__
from ..catalog import routes
from ..compile.backends import get_backend
from ..compile.target_job import COMPILE_VERSION, TargetSpec, copy_atomic, forget, put_in_store, run_target
from ..compile.verify import verdict, verdict_label
from ..errors import PrepareError, QnnReleaseError, SourceError
from ..matrix.plan import Refusal, Target, make_plan
from ..matrix.schema import LoadedMatrix, Model
from ..prepare.graph import Prepared, generate_inputs, generated_inputs_note, prepare
from ..prepare.quantize import QUANT_VERSION, calibration_hash, load_calibration, weight_scales
from ..sources.samples import SampleSet, calibration_feeds, make_samples
from ..sources.store import SourceStore, default_cache, sha256_file
from ..util.files import write_json
from ..util.table import table
from .progress import Progress

REPORT = "build-report.json"


@dataclass
class BuildReport:
    records: list[dict]
    prepared: list[dict]
    path: Path
    backend: str
    sdk_version: str
    seconds: float
    interrupted: bool = False
    timings: dict = field(default_factory=dict)
    work: dict = field(default_factory=dict)
    refused: list[dict] = field(default_factory=list)  # (model, soc, precision) plan refused, with the reason

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.records if r["status"] == "failed"]


def target_key(t: Target, prepared: Prepared, backend: str, sdk: str, calib: str | None,
               verify: str | None = None) -> str:
    """``verify``: a digest of what the target is verified on (its real samples, or how its inputs are
    generated): new samples re-verify it, never "cached" on the old inputs."""
    spec = {"v": COMPILE_VERSION, "prepared": prepared.sha256, "backend": backend, "sdk": sdk,
            "soc": [t.soc.name, t.soc.soc_model, t.soc.htp_arch, t.soc.vtcm_mb], "precision": t.precision,
            "options": t.model.options.model_dump(mode="json"), "calibration": calib, "verify": verify}
    if calib:
        spec["weight_scales"] = weight_scales(t.model.calibration.per_channel)
        spec["quantizer"] = QUANT_VERSION
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def _finished(folder: Path, key: str) -> dict | None:
    try:
        record = json.loads((folder / "target.json").read_text())
    except (OSError, ValueError):
        return None
    if record.get("key") != key or record.get("status") != "ok":
        return None
    if not all((folder / f["name"]).is_file() for f in record.get("files", [])):
        return None
    return record


def _cached(out: Path, store: Path, t: Target, key: str) -> dict | None:
    """The target as already built, in ``out`` or in the content-addressed store (then copied to ``out``)."""
    record = _finished(out / t.id, key)
    if record is None:
        record = _finished(store / key, key)
        if record is None:
            return None
        copy_atomic(store / key, out / t.id)
    else:
        put_in_store(out / t.id, store / key)
    return {**record, "status": "cached"}


def _sources(store: SourceStore, model: Model, work: Path) -> tuple[Path, str]:
    """The folder the graphs are read from, and a digest of everything in it."""
    files = store.fetch(model)
    digest = hashlib.sha256(json.dumps({k: p.name for k, p in sorted(files.items())}).encode()).hexdigest()
    src = store.materialize(model, work / "src" / model.name)
    if model.export is None:
        return src, digest
    from ..recipes import code_digest

    key = hashlib.sha256(json.dumps([digest, model.export.model_dump(), code_digest(model.export.command)],
                                    sort_keys=True).encode()).hexdigest()[:16]
    out = work / "export" / model.name / key
    if not (out / ".done").exists():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        # absolute: the command runs in the repository, a relative --cache would point elsewhere
        argv = [a.replace("{src}", str(src.resolve())).replace("{out}", str(tmp.resolve()))
                for a in model.export.command]
        if argv[0] == "python":
            argv[0] = sys.executable
        r = subprocess.run(argv, capture_output=True, text=True, cwd=store.repo_root)
        (tmp / "export.log").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SourceError(f"{model.name}: export command failed ({r.returncode}): {last[:300]}",
                              hint=f"see {out.name}.tmp/export.log in {out.parent}")
        missing = [o for o in model.export.outputs if not (tmp / o).is_file()]
        if missing:
            raise SourceError(f"{model.name}: export did not write {', '.join(missing)}",
                              hint="export.outputs must name files the command writes into {out}")
        (tmp / ".done").write_text(key)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out, key


def build(loaded: LoadedMatrix, *, out: Path, model=None, soc=None, precision=None, graph=None,
          backend: str = "ort", jobs: int = 1, force: bool = False, cache: Path | None = None,
          progress: Progress | None = None, precompile_only: bool = False, from_store: bool = False) -> BuildReport:
    """Build the targets the filters pick (each filter a value or a list of values that add up).

    ``precompile_only``: fetch, prepare and run the chip-independent work (quantize / convert /
    model libraries) for every graph and precision, compile nothing: what a release's precompile
    job does once, for the chip jobs to consume. ``from_store``: every target must already be
    built (in ``out`` or the target store); a missing one fails the build naming it, nothing is
    compiled (the publish job of a release).
    """
    started = time.monotonic()
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    planned = make_plan(loaded, model=model, soc=soc, precision=precision, graph=graph,
                        route=routes.detect(backend, loaded.matrix.sdk.qairt[0].version))
    targets = planned.targets
    if not targets:
        raise QnnReleaseError("nothing to build: the filters match no target"
                              + (f" ({planned.refused[0].reason})" if planned.refused else ""),
                              hint="see `qnn-release plan`")
    route = get_backend(backend)
    sdk = route.sdk_version()
    cache = cache or default_cache()
    progress = progress or Progress(len(targets))
    out.mkdir(parents=True, exist_ok=True)
    with _exclusive(out):
        _remove_temporaries(out)
        report = _build(loaded, targets, route, backend, sdk, cache, out, jobs, force, progress, started, when,
                        planned.refused, precompile_only, from_store)
        report.refused = [r.as_dict() for r in planned.refused]
        return report


@contextlib.contextmanager
def _exclusive(out: Path):
    """One build per output folder at a time (the next one may clean what this one leaves)."""
    import fcntl

    with open(out / ".qnn-release.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise QnnReleaseError(f"{out}: another qnn-release build is writing here",
                                  hint="wait for it, or use another --out") from None
        yield


def _remove_temporaries(out: Path) -> None:
    """Half-written target folders of an interrupted or killed build (they start with a dot)."""
    for p in out.glob(".*"):
        if p.is_dir() and (re.search(r"\.old-\d+$", p.name) or re.match(r"^\.[\w.-]+\.[a-z0-9_]{8}$", p.name)):
            shutil.rmtree(p, ignore_errors=True)


def _build(loaded, targets, route, backend, sdk, cache, out, jobs, force, progress, started, when,
           refused: list[Refusal], precompile_only=False, from_store=False) -> BuildReport:
    work = cache / "work"
    store = SourceStore(cache, loaded.root)

    records: dict[str, dict] = {}
    missing: list[str] = []  # --from-store: targets that would need a compile
    done: list[dict] = []  # --precompile-only: what was converted
    prepared_records: list[dict] = []
    specs: list[TargetSpec] = []
    prepare_seconds = precompile_seconds = 0.0
    exports: dict[str, Path] = {}  # models verified by transcript: the export folder (tokenizer, mel filters)
    by_model: dict[str, list[Target]] = {}
    for t in targets:
        by_model.setdefault(t.model.name, []).append(t)
    for model_targets in by_model.values():
        m = model_targets[0].model
        t0 = time.monotonic()
        preps: dict[str, Prepared] = {}
        try:
            src, src_digest = _sources(store, m, work)
            if m.verify is not None:  # a speech model verified by text: its clips, and its export for later
                from ..recipes.whisper.check import load_clips

                load_clips(loaded.root, m.verify.clips)
                exports[m.name] = src.resolve()
        except Exception as e:  # one model's failure never stops the others
            _fail_all(model_targets, _as_error(e, f"{m.name}: sources", SourceError), records, progress)
            continue
        for g in m.graphs:
            mine = [t for t in model_targets if t.graph == g.name]
            if not mine:
                continue
            try:
                source_sha = sha256_file(src / g.file) if (src / g.file).is_file() else src_digest
                preps[g.name] = prepare(m, g, src, work / "prepared", source_sha, seed=m.calibration.seed)
                prepared_records.append(preps[g.name].as_dict())
            except Exception as e:  # one graph's failure never stops the others
                _fail_all(mine, _as_error(e, f"{m.name}/{g.name}: prepare", PrepareError), records, progress)
        prepare_seconds += time.monotonic() - t0
        model_targets = [t for t in model_targets if t.graph in preps]
        for g_name, prep in preps.items():
            mine = [t for t in model_targets if t.graph == g_name and t.precision == "fp16"]
            try:
                rejected = None if from_store or precompile_only or not mine else _doctor(route, prep, mine, out,
                                                                                           cache)
            except Exception as e:  # the check is a help: its own failure leaves the per-chip compiles to report
                rejected = None
                if os.environ.get("QNN_RELEASE_VERBOSE"):
                    print(f"the trial compile of {m.name}/{g_name} failed: {type(e).__name__}: {e}", file=sys.stderr)
            if rejected is not None:
                _fail_all(mine, rejected, records, progress)
        model_targets = [t for t in model_targets if t.id not in records]
        unused = _unused_samples(m, preps)
        if unused is not None:
            _fail_all(model_targets, unused, records, progress)
            model_targets = []
        inputs: dict[tuple[str, str], tuple[list | None, str | None]] = {}
        sample_sets: dict[str, SampleSet | None] = {}
        range_errors: dict[str, QnnReleaseError | None] = {}  # fp16 refused: values leave fp16's range
        precompiled: dict[tuple[str, str], Path | None] = {}
        unconverted: dict[tuple[str, str], QnnReleaseError] = {}  # graph x precision whose precompile failed
        quant_trials: dict[tuple[str, str], QnnReleaseError | None] = {}  # a quantized precision's own trial
        for t in model_targets:
            if precompile_only and (t.graph, t.precision) in precompiled:
                continue
            prep, gp = preps[t.graph], (t.graph, t.precision)
            try:
                if gp in unconverted:  # once per graph and precision, not once per chip
                    raise unconverted[gp]
                if t.graph not in sample_sets:
                    ss = _sample_set(store, loaded, m, prep)
                    fp16 = any(x.precision == "fp16" for x in model_targets if x.graph == t.graph)
                    range_errors[t.graph] = (_fp16_range_gate(m, prep, ss, prepared_records)
                                             if ss is not None and fp16 else None)
                    sample_sets[t.graph] = ss
                ss = sample_sets[t.graph]
                if t.precision == "fp16" and range_errors[t.graph] is not None:
                    raise range_errors[t.graph]
                if gp not in inputs:
                    samples = None
                    if t.precision != "fp16":
                        samples = _calibration(loaded, m, prep, src, t.precision, ss) or _generated(m, prep)
                    inputs[gp] = (samples, calibration_hash(samples) if samples is not None else None)
                samples, chash = inputs[gp]
                key = target_key(t, prep, backend, sdk, chash, _verify_digest(m, prep, ss))
                hit = None if force or precompile_only else _cached(out, cache / "targets", t, key)
                if hit is None and from_store:
                    missing.append(t.id)
                    continue
                if hit is not None:
                    records[t.id] = hit
                    progress.finished(hit)
                    continue
                if gp not in precompiled:  # chip-independent work, only when some chip needs it
                    t0 = time.monotonic()
                    try:
                        precompiled[gp] = route.precompile(prep, t.precision, samples, chash,
                                                           per_channel=m.calibration.per_channel)
                    except QnnReleaseError as e:
                        unconverted[gp] = e
                        raise
                    finally:
                        precompile_seconds += time.monotonic() - t0
                    if precompile_only:
                        done.append({"model": m.name, "graph": t.graph, "precision": t.precision,
                                     "precompile_run": _precompile_run(precompiled[gp])})
                        continue
                if gp not in quant_trials and t.precision != "fp16" and isinstance(precompiled[gp], Path) \
                        and precompiled[gp].suffix == ".onnx":  # the QDQ graph this precision compiles
                    same = [x for x in model_targets if (x.graph, x.precision) == gp]
                    try:
                        quant_trials[gp] = _doctor(route, prep, same, out, cache, quantized=precompiled[gp])
                    except Exception:  # a help: the per-chip compile reports what it fails on
                        quant_trials[gp] = None
                if quant_trials.get(gp) is not None:
                    raise quant_trials[gp]
            except Exception as e:  # a bad sample file or an unexpected library error stays on its target
                records[t.id] = _failed(t, _as_error(e, f"{m.name}/{t.graph}: samples", PrepareError))
                progress.finished(records[t.id])
                continue
            specs.append(TargetSpec(
                target_id=t.id, model=m.name, graph=t.graph, soc=t.soc, precision=t.precision, options=m.options,
                prepared=prep, backend=backend, key=key, out=out, store=cache / "targets", seed=m.calibration.seed,
                sample_set=ss, calibration=samples, calibration_hash=chash,
                weight_scales=weight_scales(m.calibration.per_channel) if chash else None,
                precompiled=precompiled[gp], precompile_run=_precompile_run(precompiled[gp]),
                verify_kind=m.verify.kind if m.verify is not None else "parity"))

    if missing:
        from ..errors import PackageError

        raise PackageError(f"{len(missing)} target(s) are not in the downloaded store: {', '.join(missing[:6])}"
                           + (f" and {len(missing) - 6} more" if len(missing) > 6 else ""),
                           hint="their chip jobs failed or their artifacts were not downloaded: re-run the failed "
                                "jobs (--from-store never compiles)")
    if precompile_only:
        return _precompile_report(loaded, out, backend, sdk, prepared_records, done, records, started, when)
    interrupted = False
    try:
        for record in _run_all(specs, jobs, progress):
            records[record["id"]] = record
            progress.finished(record)
    except KeyboardInterrupt:
        interrupted = True
        _remove_temporaries(out)
        for s in specs:
            records.setdefault(s.target_id, {"id": s.target_id, "model": s.model, "graph": s.graph,
                                             "soc": s.soc.name, "precision": s.precision, "status": "failed",
                                             "error": "interrupted", "exit_code": 130})
    if exports and not interrupted:
        from ..recipes.whisper.check import check_transcripts

        check_transcripts(loaded, records, exports, out, cache, jobs=jobs, from_store=from_store, force=force,
                          progress=progress)
    ordered = [records[t.id] for t in targets if t.id in records]
    for r in ordered:  # a target that failed now never looks built from an earlier success
        if r["status"] == "failed":
            forget(out / r["id"])
    report = BuildReport(records=ordered, prepared=prepared_records, path=out / REPORT, backend=backend,
                         sdk_version=sdk, seconds=round(time.monotonic() - started, 3), interrupted=interrupted)
    report.timings = {
        "total": report.seconds, "prepare": round(prepare_seconds, 3), "precompile": round(precompile_seconds, 3),
        "compile": round(sum(r.get("compile_seconds", 0) for r in ordered if r["status"] == "ok"), 3),
        "emulator": round(sum(r.get("emulator_seconds_total", 0) or 0 for r in ordered if r["status"] == "ok"), 3),
        "jobs": jobs,
    }
    report.work = work_ratio(ordered)
    write_json(report.path, {
        "version": 1, "toolkit": f"qnn-release {__version__}", "matrix": str(loaded.path), "backend": backend,
        "sdk_version": sdk, "started": when, "status": "interrupted" if interrupted else
        ("failed" if report.failed else "ok"), "timings": report.timings,
        "work": report.work, "prepared": prepared_records, "targets": ordered,
        "refused": [r.as_dict() for r in refused],
        "exports": {name: str(path) for name, path in exports.items()},
    })
    if interrupted:
        raise KeyboardInterrupt
    return report


def _precompile_run(path: Path | None) -> str | None:
    """The id of the conversion run that made ``path`` (a backend writes it in done.json), if any."""
    if path is None or not (path / "done.json").is_file():
        return None
    try:
        return json.loads((path / "done.json").read_text()).get("run_id")
    except (OSError, ValueError):
        return None


def work_ratio(records: list[dict]) -> dict:
    """How often the chip-independent conversion ran per graph and precision (1.0: once, as it should).

    Counted from the targets themselves: each carries the id of the conversion run it was compiled
    from, so a release whose chip jobs each converted again shows a ratio of the chip count.
    """
    runs: dict[tuple[str, str, str], set[str]] = {}
    for r in records:
        if r.get("precompile_run"):
            runs.setdefault((r["model"], r["graph"], r["precision"]), set()).add(r["precompile_run"])
    total = sum(len(v) for v in runs.values())
    return {"converter_runs": total, "graph_precisions": len(runs),
            "converter_runs_per_graph": round(total / len(runs), 3) if runs else None}


def _precompile_report(loaded, out, backend, sdk, prepared_records, done, records, started, when) -> BuildReport:
    failed = list(records.values())
    report = BuildReport(records=failed, prepared=prepared_records, path=out / "precompile-report.json",
                         backend=backend, sdk_version=sdk, seconds=round(time.monotonic() - started, 3))
    write_json(report.path, {"version": 1, "toolkit": f"qnn-release {__version__}", "matrix": str(loaded.path),
                             "backend": backend, "sdk_version": sdk, "started": when,
                             "status": "failed" if failed else "ok", "precompiled": done,
                             "prepared": prepared_records, "failed": failed})
    report.work = {"precompiled": done}
    return report


def _as_error(e: Exception, what: str, kind: type[QnnReleaseError]) -> QnnReleaseError:
    """A failure as the one-line error of its stage: an unexpected exception becomes ``kind`` too,
    with its type and message (the build goes on with the other graphs and writes its report)."""
    if isinstance(e, QnnReleaseError):
        return e
    import traceback

    err = kind(f"{what} failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}".rstrip(": "),
               hint="an unexpected error (run with --verbose for the traceback); please report it")
    if os.environ.get("QNN_RELEASE_VERBOSE"):
        traceback.print_exc()
    return err


def _fail_all(targets: list[Target], e: QnnReleaseError, records: dict, progress: Progress) -> None:
    for t in targets:
        records[t.id] = _failed(t, e)
        progress.finished(records[t.id])


def _doctor(route, prep: Prepared, targets: list[Target], out: Path, cache: Path,
            quantized: Path | None = None) -> QnnReleaseError | None:
    """Once per graph and precision family, before any chip is compiled: a trial compile (CPU fallback
    allowed) for the most capable chip among the targets names every node HTP rejects. The float graph is
    tried in fp16 for the fp16 targets; a quantized precision's QDQ graph (``quantized``) for its own
    targets, since HTP takes different ops in float and quantized graphs. A rejection fails those targets
    once, with its cause, instead of once per chip. Routes without a trial skip this."""
    trial = getattr(route, "doctor", None)
    capable = [t for t in targets if t.soc.fp16 or quantized is not None]
    if trial is None or not capable:
        return None
    t = max(capable, key=lambda x: (x.soc.htp_arch, x.soc.soc_model))
    diagnosis = trial(prep, t.soc, quantized) if quantized is not None else trial(prep, t.soc)
    if diagnosis is None or not diagnosis.rejected:
        return None
    from ..errors import CompileError

    what = f"{targets[0].precision} " if quantized is not None else "fp16 "
    return CompileError(f"{prep.model}/{prep.graph}: {diagnosis.summary()} ({what}trial compile for {t.soc.name}, "
                        f"{t.soc.arch}; no chip was compiled)",
                        hint="`qnn-release inspect` shows every op with its reason and fix",
                        details={"diagnosis": {**diagnosis.as_dict(), "trial_soc": t.soc.name,
                                               "trial_precision": targets[0].precision if quantized else "fp16"}})


def _failed(t: Target, e: QnnReleaseError) -> dict:
    return {"id": t.id, "model": t.model.name, "graph": t.graph, "soc": t.soc.name, "precision": t.precision,
            "status": "failed", "error": str(e), "exit_code": e.exit_code, **(e.details or {})}


def _sample_set(store: SourceStore, loaded: LoadedMatrix, m: Model, prep: Prepared) -> SampleSet | None:
    """The graph's real samples: the model's ``samples`` (pinned files, front end), or the older
    ``calibration.path`` folder of .npz files in the repository."""
    if m.samples is not None:
        files = store._fetch(m, m.samples.source)
        return make_samples(m, prep.graph, prep.inputs, files, prep.outputs)
    if m.calibration.path and m.verify is None:
        folder = (loaded.root / m.calibration.path).resolve()
        feeds = load_calibration(folder, prep.inputs)[:8]  # verify on 8 at most (the emulator's time)
        files = {p.name: sha256_file(p) for p in sorted(folder.glob("*.npz"))[:8]}
        return SampleSet(streams=[(n, [f]) for n, f in zip(files, feeds)], files=files,
                         note=f"real samples: {len(feeds)} .npz files from calibration.path ({m.calibration.path})")
    return None


def _unused_samples(m: Model, preps: dict[str, Prepared]) -> QnnReleaseError | None:
    """Samples that feed none of the model's graphs are a mistake (a misspelt input), not "no samples"; so are
    checks (argmax, slices) that name an output no graph has."""
    from ..errors import ConfigError
    from ..sources.samples import graph_uses

    if not preps:
        return None
    outputs = {o.name for p in preps.values() for o in p.outputs}
    stream = m.samples.stream if m.samples is not None else None
    judged_whole = [*(m.samples.argmax if m.samples is not None else [])] + (
        [*stream.decisions, *stream.range, *stream.carry] if stream is not None else [])
    for name in m.options.slices:
        if name not in outputs and len(preps) == len(m.graphs):
            return ConfigError(f"{m.name}: options.slices: no graph has the output '{name}'",
                               hint=f"outputs: {', '.join(sorted(outputs))}")
        if name in judged_whole:
            return ConfigError(f"{m.name}: options.slices.{name}: the output is also judged whole (samples.argmax or "
                               "samples.stream names it)", hint="judge it whole or by slices, not both")
    if m.samples is None:
        return None
    for name in m.samples.argmax:
        if name not in outputs and len(preps) == len(m.graphs):
            return ConfigError(f"{m.name}: samples.argmax: no graph has the output '{name}'",
                               hint=f"outputs: {', '.join(sorted(outputs))}")
    if any(graph_uses(m.samples, g, [i.name for i in p.inputs]) for g, p in preps.items()):
        return None
    fe = m.samples.front_end
    names = sorted({i.name for p in preps.values() for i in p.inputs})
    return ConfigError(f"{m.name}: samples feed no graph: "
                       + (f"samples.graphs {m.samples.graphs} names none of {sorted(preps)}" if m.samples.graphs
                          else f"no graph has the input '{fe.input}' (samples.front_end.input)"),
                       hint=f"the graphs' inputs: {', '.join(names)}")


def _fp16_range_gate(m: Model, prep: Prepared, ss: SampleSet, prepared_log: list[dict]) -> QnnReleaseError | None:
    """Before any chip compiles: the prepared graph on CPU over its real samples, every intermediate
    recorded; a node whose values leave fp16's range refuses fp16 (unless the matrix says why not)."""
    from ..errors import PrepareError
    from ..prepare.fp16_range import scan
    from ..prepare.graph import cpu_session

    sess = cpu_session(prep.path)
    names = [o.name for o in prep.outputs]
    feeds = calibration_feeds(ss, lambda f: sess.run(None, f), names)
    labels = [f"{n} step {i}" if ss.stream else n for n, steps in ss.streams for i in range(len(steps))]
    findings = scan(prep.path, feeds, labels)
    prep.notes.extend(f"fp16 range: {f.line()}" for f in findings)
    for record in prepared_log:  # the report's copy of the prepared graph gets them too
        if record["model"] == m.name and record["graph"] == prep.graph:
            record["notes"] = list(prep.notes)
    if not findings or m.options.fp16_overflow_ok:
        return None
    first = findings[0]
    more = f" ({len(findings) - 1} more node(s) in the report)" if len(findings) > 1 else ""
    return PrepareError(f"{m.name}/{prep.graph}: fp16 refused: {first.line()}{more}",
                        hint=_range_hint(prep, first),
                        details={"fp16_range": [f.as_dict() for f in findings]})


def _range_hint(prep: Prepared, first) -> str:
    """The fix for an fp16 overflow: the declared prescale rewrite when it starts inside a LayerNorm/RMSNorm."""
    import onnx

    from ..prepare.prescale import offer

    rest = "compile it as w8a16, or accept it with options.fp16_overflow_ok: <why>"
    entry = offer(onnx.load(str(prep.path)), first.node, first.value) if first.kind == "overflow" else None
    if entry is not None:
        return (f"the node is part of a normalisation of '{entry[0]}': add `prescale: {{{entry[0]}: {entry[1]}}}` to "
                f"graph '{prep.graph}' in the matrix (it runs on {entry[0]} / {entry[1]}, the same output); or " + rest)
    return ("rescale the values before this node in the export (e.g. a variance on a pre-scaled input, a LayerNorm "
            "whose sum of squares stays small), " + rest)


def _verify_digest(m: Model, prep: Prepared, ss: SampleSet | None) -> str:
    if ss is not None:
        return ss.digest
    return hashlib.sha256(json.dumps({"generated": generated_inputs_note(prep.input_ranges),
                                      "seed": m.calibration.seed}).encode()).hexdigest()


def _calibration(loaded: LoadedMatrix, m: Model, prep: Prepared, src: Path, precision: str,
                 ss: SampleSet | None) -> list[dict[str, np.ndarray]] | None:
    """What a quantized precision is calibrated on: the model's real samples (a stream's steps with the
    state CPU carries into them), or a speech model's clips."""
    if m.verify is not None:  # a speech model calibrates on its clips (decoded on CPU); verified by text
        from ..recipes.whisper.check import calibration, load_clips

        return calibration(src, load_clips(loaded.root, m.verify.clips), prep.graph, m.calibration.samples,
                           m.verify.language, m.verify.max_tokens)
    if ss is None:
        return None
    from ..prepare.graph import cpu_session

    sess = cpu_session(prep.path)
    return calibration_feeds(ss, lambda f: sess.run(None, f), [o.name for o in prep.outputs])


def _generated(m: Model, prep: Prepared) -> list[dict[str, np.ndarray]]:
    return generate_inputs(prep.inputs, count=m.calibration.samples, seed=m.calibration.seed,
                           ranges=prep.input_ranges)


def _run_all(specs: list[TargetSpec], jobs: int, progress: Progress):
    if not specs:
        return
    if jobs <= 1:
        for s in specs:
            progress.running([s.target_id])
            yield run_target(s)
        return
    # spawn: the QNN EP and onnxruntime do not survive fork() with threads running
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(specs)), mp_context=ctx) as pool:
        pending: dict[Future, TargetSpec] = {pool.submit(run_target, s): s for s in specs}
        try:
            while pending:
                progress.running([s.target_id for s in list(pending.values())[:jobs]])
                done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for f in done:
                    s = pending.pop(f)
                    try:
                        yield f.result()
                    except Exception as e:  # a worker died (killed, out of memory)
                        yield {"id": s.target_id, "model": s.model, "graph": s.graph, "soc": s.soc.name,
                               "precision": s.precision, "status": "failed", "exit_code": 70,
                               "error": f"worker process failed: {type(e).__name__}: {e}".splitlines()[0]}
        except KeyboardInterrupt:
            # stop the workers now (they are in our process group for Ctrl-C, not for a SIGTERM to us)
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def summary(report: BuildReport) -> str:
    rows = []
    for r in report.records:
        cos = (r.get("parity") or {}).get("cosine")
        mark = "*" if r.get("passed_by") == "max_abs" else ""
        status = r["status"] + (", unverified" if r["status"] in ("ok", "cached") and not r.get("verified") else "")
        on = verdict_label(r) if verdict(r) != "not-verified" else ""
        rows.append((r["id"], status, f"{r.get('size', 0) / 1e6:.2f} MB" if r.get("size") else "",
                     f"{r.get('seconds', 0):.1f}" if r["status"] != "cached" else "-",
                     f"{cos:.6f}{mark}" if cos is not None else "", on if r["status"] != "failed" else ""))
    text = table(["target", "status", "size", "seconds", "cosine", "verified on"], rows)
    ok = sum(r["status"] in ("ok", "cached") for r in report.records)
    cached = sum(r["status"] == "cached" for r in report.records)
    text += (f"\n\n{ok}/{len(report.records)} targets ok ({cached} cached), {len(report.failed)} failed, "
             f"{report.seconds:.1f}s; SDK {report.sdk_version}; report: {report.path}")
    if any(r.get("passed_by") == "max_abs" for r in report.records):
        text += ("\n* passed on the absolute tolerance (max_abs), not on cosine")
    if any(r["status"] in ("ok", "cached") and not r.get("verified") for r in report.records):
        text += ("\nnote: unverified targets were never run on the HTP emulator (this route has none here): "
                 "`package --require-verified` refuses them")
    generated = sorted({r["model"] for r in report.records
                        if r["status"] in ("ok", "cached") and verdict(r) == "generated-inputs"})
    if generated:
        text += (f"\nnote: verified on generated inputs only: {', '.join(generated)} (give the model real samples "
                 "with `samples:` in the matrix; `package --require-verified` refuses it otherwise)")
    for r in report.failed:
        text += f"\nFAILED {r['id']}: {r['error']}"
    for r in report.refused:
        text += f"\nREFUSED {r['model']} {r['precision']} for {r['soc']}: {r['reason']}"
    return text
