"""``qnn-release build``: plan -> prepare (once per graph) -> compile + verify (per target, in workers).

Each target is cached under a content-addressed key: an unchanged target is not rebuilt.
One failing target does not stop the others; ``build-report.json`` says which failed and why.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..catalog import routes
from ..compile.backends import Backend, get_backend
from ..compile.records import FAILED, OK, PRECOMPILE_REPORT, REPORT, BuildReport, TargetRecord, write_precompile_report
from ..compile.settings import BuildSettings
from ..compile.target_job import TargetSpec, forget
from ..errors import PrepareError, QnnReleaseError, SourceError
from ..matrix.plan import Refusal, Target, make_plan
from ..matrix.schema import LoadedMatrix, Model
from ..prepare.graph import CheckInputs, Prepared, prepare
from ..prepare.quantize import calibration_hash, weight_scales
from ..recipes import recipe_for
from ..sources.samples import SampleSet
from ..sources.store import SourceStore, default_cache, sha256_file
from ..util.text import clip
from .exports import model_sources
from .gates import fp16_range_gate, trial_compile, unused_samples
from .inputs import calibration, check_samples, generated, sample_set
from .kept import KEPT, keep
from .keys import cached, compile_key, target_key, verify_digest
from .progress import Progress
from .recipe_checks import recipe_checks
from .recipe_inputs import drop_recipe_inputs, keep_recipe_inputs
from .twin import TWINS
from .twins import stage_twins
from .workers import run_all


@dataclass(frozen=True, kw_only=True)
class TargetFilter:
    """Which targets of the matrix a build takes: each a value or a list of values that add up (None: all)."""

    model: str | list[str] | None = None
    soc: str | list[str] | None = None
    precision: str | list[str] | None = None
    graph: str | list[str] | None = None


def build(loaded: LoadedMatrix, settings: BuildSettings, pick: TargetFilter | None = None,
          progress: Progress | None = None) -> BuildReport:
    """Build the targets ``pick`` picks from the matrix, as ``settings`` say."""
    started = time.monotonic()
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    pick = pick or TargetFilter()
    planned = make_plan(loaded, model=pick.model, soc=pick.soc, precision=pick.precision, graph=pick.graph,
                        route=routes.detect(settings.backend, loaded.matrix.sdk.qairt[0].version))
    targets = planned.targets
    if not targets:
        raise QnnReleaseError("nothing to build: the filters match no target"
                              + (f" ({planned.refused[0].reason})" if planned.refused else ""),
                              hint="see `qnn-release plan`")
    route = get_backend(settings.backend)
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    with _exclusive(out):
        _remove_temporaries(out)
        run = _Run(loaded=loaded, settings=settings, route=route, sdk=route.sdk_version(),
                   progress=progress or Progress(len(targets)), started=started, when=when)
        return _build(run, targets, planned.refused)


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
    """Half-written target and twin folders of an interrupted or killed build (they start with a dot), and the
    files it was moving beside the kept graphs."""
    for p in [*out.glob(".*"), *(out / TWINS).glob(".*"), *(out / KEPT).glob("*/.*")]:
        if p.is_dir() and (re.search(r"\.old-\d+$", p.name) or re.match(r"^\.[\w.-]+\.[a-z0-9_]{8}$", p.name)):
            shutil.rmtree(p, ignore_errors=True)
    for p in (out / KEPT).glob("*/*/.ran.npz.*"):
        p.unlink(missing_ok=True)


def _build(run: _Run, targets: list[Target], refused: list[Refusal]) -> BuildReport:
    jobs = run.settings.jobs
    loaded, out, started, when = run.loaded, run.out, run.started, run.when
    by_model: dict[str, list[Target]] = {}
    for t in targets:
        by_model.setdefault(t.model.name, []).append(t)
    for model_targets in by_model.values():
        run.model(model_targets)
    if run.missing:  # an incomplete build (exit 8), not a release package refused
        from ..errors import BuildFailed

        raise BuildFailed(f"{len(run.missing)} target(s) are not in the downloaded store: "
                           f"{', '.join(run.missing[:6])}"
                           + (f" and {len(run.missing) - 6} more" if len(run.missing) > 6 else ""),
                           hint="their chip jobs failed or their artifacts were not downloaded: re-run the failed "
                                "jobs (--from-store never compiles)")
    if run.precompile_only:
        return _precompile_report(run, started, when, refused)
    interrupted = run.compile_all(jobs)
    recipe_checks(run, interrupted)
    ordered = [run.records[t.id] for t in targets if t.id in run.records]
    for r in ordered:  # a target that failed now never looks built from an earlier success
        if r.status == FAILED:
            forget(out / r.id)
    report = BuildReport(records=ordered, prepared=run.prepared_dicts(), path=out / REPORT, backend=run.backend,
                         sdk_version=run.sdk, seconds=round(time.monotonic() - started, 3), interrupted=interrupted,
                         refused=[r.as_dict() for r in refused], matrix=str(loaded.path), started=when,
                         toolkit=f"qnn-release {__version__}",
                         exports={name: str(path) for name, path in run.exports.items()})
    report.timings = {
        "total": report.seconds, "prepare": round(run.prepare_seconds, 3),
        "precompile": round(run.precompile_seconds, 3),
        "compile": round(sum(r.compile_seconds or 0 for r in ordered if r.status == OK and not r.compile_reused), 3),
        "emulator": round(sum(r.emulator_seconds_total or 0 for r in ordered if r.status == OK), 3),
        "jobs": jobs,
    }
    report.work = work_ratio(ordered)
    interrupted = _twins(run, report, ordered) or interrupted
    drop_recipe_inputs(run)  # made again below, after the report: a build stopped between leaves none
    report.write()
    try:  # what package copies: the prepared graphs, the licence files (it falls back to the cache without them)
        keep(out, run.prepared, run.licences)
    except OSError as e:
        print(f"warning: {out / KEPT}: could not keep the prepared graphs beside the build ({e}); package "
              "reads them from the cache instead", file=sys.stderr)
    if not interrupted:  # what a device runs a recipe's graphs on, beside them (device-numbers computes nothing)
        keep_recipe_inputs(run)
    if interrupted:
        raise KeyboardInterrupt
    return report


def _twins(run: _Run, report: BuildReport, ordered: list[TargetRecord]) -> bool:
    """Each model's twins, measured and kept (package copies them), the time they took in the report; True when
    interrupted meanwhile (the report says so)."""
    if report.interrupted:
        return True
    t0 = time.monotonic()
    try:
        stage_twins(run, ordered)
    except KeyboardInterrupt:
        report.interrupted = True
    report.timings["twins"] = round(time.monotonic() - t0, 3)
    report.seconds = report.timings["total"] = round(time.monotonic() - run.started, 3)  # the twins too
    return report.interrupted


@dataclass(frozen=True)
class _Inputs:
    """What one (graph, precision) of a model is checked and calibrated on, once for all its chips."""

    sample_set: SampleSet | None
    calibration: list | None
    calibration_hash: str | None


@dataclass
class _ModelWalk:
    """What the build knows of the model it is walking, per (graph, precision): made anew for each model."""

    inputs: dict[tuple[str, str], _Inputs] = field(default_factory=dict)
    range_errors: dict[str, QnnReleaseError | None] = field(default_factory=dict)  # fp16 refused: out of its range
    precompiled: dict[tuple[str, str], Path | None] = field(default_factory=dict)
    unconverted: dict[tuple[str, str], QnnReleaseError] = field(default_factory=dict)  # whose precompile failed
    quant_trials: dict[tuple[str, str], QnnReleaseError | None] = field(default_factory=dict)  # a quantized trial


@dataclass(kw_only=True)
class _Run:
    """One build's walk over the matrix: per model its sources and prepared graphs, the checks before any
    chip, then per target a cached record or the job (``TargetSpec``) that compiles and verifies it."""

    loaded: LoadedMatrix
    settings: BuildSettings  # as the build was asked for, whole
    route: Backend
    sdk: str
    progress: Progress
    started: float  # time.monotonic() when the build began
    when: str  # and the UTC time it began at
    records: dict[str, TargetRecord] = field(default_factory=dict)
    specs: list[TargetSpec] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # --from-store: targets that would need a compile
    precompiled_log: list[dict] = field(default_factory=list)  # --precompile-only: what was converted
    prepared: list[Prepared] = field(default_factory=list)
    exports: dict[str, Path] = field(default_factory=dict)  # models with a recipe: their export folder
    recipe_digests: dict[str, str] = field(default_factory=dict)  # ... and what their recipe's verdict rests on
    licences: dict[str, Path] = field(default_factory=dict)  # models with a license_file: that source file
    prepare_seconds: float = 0.0
    precompile_seconds: float = 0.0
    walk: _ModelWalk = field(default_factory=lambda: _ModelWalk())  # the model being walked

    def __post_init__(self) -> None:
        self.cache = self.settings.cache or default_cache()
        self.work = self.cache / "work"
        self.store = SourceStore(self.cache, self.loaded.root)

    # what the settings say, read where they are (never copied)
    out = property(lambda self: self.settings.out)
    backend = property(lambda self: self.settings.backend)
    force = property(lambda self: self.settings.force)
    precompile_only = property(lambda self: self.settings.precompile_only)
    from_store = property(lambda self: self.settings.from_store)
    isolate = property(lambda self: self.settings.isolate)

    def fail(self, targets: list[Target], e: QnnReleaseError) -> None:
        for t in targets:
            self.records[t.id] = _failed(t, e)
            self.progress.finished(self.records[t.id])

    def prepared_dicts(self) -> list[dict]:
        return [p.as_dict() for p in self.prepared]

    def model(self, model_targets: list[Target]) -> None:
        """Every target of one model (a model's failure never stops the others)."""
        m = model_targets[0].model
        t0 = time.monotonic()
        try:
            src, src_digest = model_sources(self.store, m, self.work)
            if m.license_file:  # the source's own file, under its name where the sources are laid out
                self.licences[m.name] = self.work / "src" / m.name / m.license_file
            recipe = recipe_for(m)
            if recipe is not None:  # its own inputs refused before any compile; its export kept for later stages
                recipe.check_inputs(self.loaded, m, src.resolve())
                self.exports[m.name] = src.resolve()
                # the recipe's verdict rests on the whole export (not only the graphs) and on its own inputs' bytes
                self.recipe_digests[m.name] = f"{src_digest}:{recipe.inputs_digest(self.loaded, m)}"
        except Exception as e:
            self.fail(model_targets, _as_error(e, f"{m.name}: sources", SourceError))
            return
        preps = self._prepare(m, model_targets, src, src_digest)
        self.prepare_seconds += time.monotonic() - t0
        model_targets = [t for t in model_targets if t.graph in preps]
        self._fp16_trials(m, preps, model_targets)
        model_targets = [t for t in model_targets if t.id not in self.records]
        unused = unused_samples(m, preps)
        if unused is not None:
            self.fail(model_targets, unused)
            return
        self.walk = _ModelWalk()
        sample_sets: dict[str, SampleSet | None] = {}
        for t in model_targets:
            if self.precompile_only and (t.graph, t.precision) in self.walk.precompiled:
                continue
            try:
                spec = self._target(m, t, preps[t.graph], src, model_targets, sample_sets)
            except Exception as e:  # a bad sample file or an unexpected library error stays on its target
                self.records[t.id] = _failed(t, _as_error(e, f"{m.name}/{t.graph}: samples", PrepareError))
                self.progress.finished(self.records[t.id])
                continue
            if spec is not None:
                self.specs.append(spec)

    def _prepare(self, m: Model, model_targets: list[Target], src: Path, src_digest: str) -> dict[str, Prepared]:
        preps: dict[str, Prepared] = {}
        for g in m.graphs:
            mine = [t for t in model_targets if t.graph == g.name]
            if not mine:
                continue
            try:
                source_sha = sha256_file(src / g.file) if (src / g.file).is_file() else src_digest
                samples, digest = check_samples(self.store, self.loaded, m, g.name)
                preps[g.name] = prepare(m, g, src, self.work / "prepared", source_sha,
                                        CheckInputs(samples=samples, digest=digest, seed=m.calibration.seed))
                self.prepared.append(preps[g.name])
            except Exception as e:  # one graph's failure never stops the others
                self.fail(mine, _as_error(e, f"{m.name}/{g.name}: prepare", PrepareError))
        return preps

    def _fp16_trials(self, m: Model, preps: dict[str, Prepared], model_targets: list[Target]) -> None:
        """One trial compile per graph for its fp16 targets: a rejection fails them once, with its cause."""
        for g_name, prep in preps.items():
            mine = [t for t in model_targets if t.graph == g_name and t.precision == "fp16"]
            if self.from_store or self.precompile_only or not mine:
                continue
            try:
                rejected = trial_compile(self.route, prep, mine, self.out, self.cache)
            except Exception as e:  # the check is a help: its own failure leaves the per-chip compiles to report
                rejected = None
                if os.environ.get("QNN_RELEASE_VERBOSE"):
                    print(f"the trial compile of {m.name}/{g_name} failed: {type(e).__name__}: {e}", file=sys.stderr)
            if rejected is not None:
                self.fail(mine, rejected)

    def _target(self, m: Model, t: Target, prep: Prepared, src: Path, model_targets: list[Target],
                sample_sets: dict[str, SampleSet | None]) -> TargetSpec | None:
        """The job for one target, or None when it is cached, missing from the store or only precompiled."""
        gp = (t.graph, t.precision)
        if gp in self.walk.unconverted:  # once per graph and precision, not once per chip
            raise self.walk.unconverted[gp]
        if t.graph not in sample_sets:
            ss = sample_set(self.store, self.loaded, m, prep)
            fp16 = any(x.precision == "fp16" for x in model_targets if x.graph == t.graph)
            self.walk.range_errors[t.graph] = fp16_range_gate(m, prep, ss) if ss is not None and fp16 else None
            sample_sets[t.graph] = ss
        ss = sample_sets[t.graph]
        range_error = self.walk.range_errors[t.graph]
        if t.precision == "fp16" and range_error is not None:
            raise range_error
        if gp not in self.walk.inputs:
            samples = None
            if t.precision != "fp16":
                samples = calibration(self.loaded, m, prep, src, t.precision, ss) or generated(m, prep)
            self.walk.inputs[gp] = _Inputs(ss, samples, calibration_hash(samples) if samples is not None else None)
        inputs = self.walk.inputs[gp]
        key = target_key(t, prep, self.backend, self.sdk, inputs.calibration_hash,
                         verify_digest(m, prep, ss, self.recipe_digests.get(m.name)))
        recipe = recipe_for(m)
        hit = None if self.force or self.precompile_only else \
            cached(self.out, self.cache / "targets", t, key, recipe_check=recipe is not None)
        if hit is None and self.from_store:
            self.missing.append(t.id)
            return None
        if hit is not None:
            self.records[t.id] = hit
            self.progress.finished(hit)
            return None
        if gp not in self.walk.precompiled and not self._precompile(m, t, prep, inputs):
            return None
        self._quantized_trial(t, prep, model_targets)
        return TargetSpec(
            target_id=t.id, model=m.name, graph=t.graph, soc=t.soc, precision=t.precision, options=m.options,
            prepared=prep, backend=self.backend, key=key, out=self.out, store=self.cache / "targets",
            compiled=self.cache / "compiled" / compile_key(t, prep, self.backend, self.sdk, inputs.calibration_hash),
            reuse_compile=not self.force,
            seed=m.calibration.seed, sample_set=ss, calibration=inputs.calibration,
            calibration_hash=inputs.calibration_hash,
            weight_scales=weight_scales(m.calibration.per_channel) if inputs.calibration_hash else None,
            precompiled=self.walk.precompiled[gp], precompile_run=_precompile_run(self.walk.precompiled[gp]),
            recipe_check=recipe.pending_note if recipe is not None else None,
            inputs_note=recipe.inputs_note if recipe is not None else None,
            graph_samples=recipe.graph_samples if recipe is not None else True)

    def _precompile(self, m: Model, t: Target, prep: Prepared, inputs: _Inputs) -> bool:
        """The chip-independent work, once per graph and precision, when some chip needs it; False when this
        build only precompiles (the target needs no job)."""
        gp = (t.graph, t.precision)
        t0 = time.monotonic()
        try:
            self.walk.precompiled[gp] = self.route.precompile(prep, t.precision, inputs.calibration,
                                                              inputs.calibration_hash,
                                                              per_channel=m.calibration.per_channel)
        except QnnReleaseError as e:
            self.walk.unconverted[gp] = e
            raise
        finally:
            self.precompile_seconds += time.monotonic() - t0
        if self.precompile_only:
            self.precompiled_log.append({"model": m.name, "graph": t.graph, "precision": t.precision,
                                         "precompile_run": _precompile_run(self.walk.precompiled[gp])})
            return False
        return True

    def _quantized_trial(self, t: Target, prep: Prepared, model_targets: list[Target]) -> None:
        """A quantized precision's QDQ graph gets its own trial compile (HTP takes other ops quantized)."""
        gp = (t.graph, t.precision)
        qdq = self.walk.precompiled[gp]
        quantized = t.precision != "fp16" and isinstance(qdq, Path) and qdq.suffix == ".onnx"
        if gp not in self.walk.quant_trials and quantized:
            same = [x for x in model_targets if (x.graph, x.precision) == gp]
            try:
                self.walk.quant_trials[gp] = trial_compile(self.route, prep, same, self.out, self.cache, quantized=qdq)
            except Exception:  # a help: the per-chip compile reports what it fails on
                self.walk.quant_trials[gp] = None
        trial = self.walk.quant_trials.get(gp)
        if trial is not None:
            raise trial

    def compile_all(self, jobs: int) -> bool:
        """Run every job; True when interrupted (the targets not finished are recorded as such)."""
        try:
            for record in run_all(self.specs, jobs, self.progress, isolate=self.isolate):
                self.records[record.id] = record
                self.progress.finished(record)
        except KeyboardInterrupt:
            _remove_temporaries(self.out)
            for s in self.specs:
                self.records.setdefault(s.target_id, TargetRecord.make(
                    id=s.target_id, model=s.model, graph=s.graph, soc=s.soc.name, precision=s.precision,
                    status=FAILED, error="interrupted", exit_code=130))
            return True
        return False


def _precompile_run(path: Path | None) -> str | None:
    """The id of the conversion run that made ``path`` (a backend writes it in done.json), if any."""
    if path is None or not (path / "done.json").is_file():
        return None
    try:
        return json.loads((path / "done.json").read_text()).get("run_id")
    except (OSError, ValueError):
        return None


def work_ratio(records: list[TargetRecord]) -> dict:
    """How often the chip-independent conversion ran per graph and precision (1.0: once, as it should).

    Counted from the targets themselves: each carries the id of the conversion run it was compiled
    from, so a release whose chip jobs each converted again shows a ratio of the chip count.
    """
    runs: dict[tuple[str, str, str], set[str]] = {}
    for r in records:
        if r.precompile_run:
            runs.setdefault((r.model, r.graph, r.precision), set()).add(r.precompile_run)
    total = sum(len(v) for v in runs.values())
    return {"converter_runs": total, "graph_precisions": len(runs),
            "converter_runs_per_graph": round(total / len(runs), 3) if runs else None}


def _precompile_report(run: _Run, started: float, when: str, refused: list[Refusal]) -> BuildReport:
    failed = list(run.records.values())
    report = BuildReport(records=failed, prepared=run.prepared_dicts(), path=run.out / PRECOMPILE_REPORT,
                         backend=run.backend, sdk_version=run.sdk, seconds=round(time.monotonic() - started, 3),
                         toolkit=f"qnn-release {__version__}", matrix=str(run.loaded.path), started=when,
                         work={"precompiled": run.precompiled_log}, refused=[r.as_dict() for r in refused])
    write_precompile_report(report)
    return report


def _as_error(e: Exception, what: str, kind: type[QnnReleaseError]) -> QnnReleaseError:
    """A failure as the one-line error of its stage: an unexpected exception becomes ``kind`` too,
    with its type and message (the build goes on with the other graphs and writes its report)."""
    if isinstance(e, QnnReleaseError):
        return e
    import traceback

    err = kind(f"{what} failed: {type(e).__name__}: {clip(str(e), 300) if str(e) else ''}".rstrip(": "),
               hint="an unexpected error (run with --verbose for the traceback); please report it")
    if os.environ.get("QNN_RELEASE_VERBOSE"):
        traceback.print_exc()
    return err


def _failed(t: Target, e: QnnReleaseError) -> TargetRecord:
    who = {"id": t.id, "model": t.model.name, "graph": t.graph, "soc": t.soc.name, "precision": t.precision}
    return TargetRecord.failure(who, str(e), e.exit_code, e.details)



