"""What both device routes (AI Hub, adb) share: the settings, the targets of a build, their prepared graphs,
versions, and how a device's outputs are judged against CPU."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..compile.records import BuildReport, TargetRecord
from ..compile.verify import Judging, Runs, check, thresholds_for
from ..errors import QnnReleaseError, UsageError, VerifyError
from ..matrix.schema import LoadedMatrix, Model
from ..prepare.graph import Prepared
from ..util.metrics import compare, worst
from ..util.qnn_version import major_minor, triple  # noqa: F401 (the device routes take them from here)
from .inputs import MAX_ENTRIES, DeviceInputs
from .numbers import DeviceNumbers, DeviceParity, Status


@dataclass(frozen=True, kw_only=True)
class Build:
    """The build a device route measures: its folder (``out``), its matrix and its report."""

    out: Path
    loaded: LoadedMatrix
    report: BuildReport


@dataclass(kw_only=True)
class Settings:
    budget_seconds: float = 3600.0  # every job submitted, then all waited for within this
    poll_seconds: float = 10.0  # the client's own polling interval
    max_entries: int = MAX_ENTRIES
    qairt: str | None = None  # a runtime version to ask for (else the smallest offered >= the build's)
    cpu: bool = True  # the same graph on the device's CPU as well
    serial: str | None = None  # adb: the phone (else the only one attached)
    qnn_sdk: Path | None = None  # adb: the QAIRT tree whose qnn-net-run and runtime libraries go to the phone


class NoRuntime(QnnReleaseError):
    """No runtime at least as new as the build: a target that cannot be measured, said so."""


def read_report(path: Path) -> BuildReport:
    return BuildReport.load(path, UsageError)


def select_targets(loaded: LoadedMatrix, report: BuildReport, soc, model) -> list[TargetRecord]:
    socs = {loaded.catalog.target(loaded.catalog.resolve(s)).name for s in soc or []}
    known = {r.model for r in report.records}
    for m in model or []:
        if m not in known:
            raise UsageError(f"--model {m}: not in {report.path}", hint=f"built models: {', '.join(sorted(known))}")
    out = [r for r in report.records if r.built and (not socs or r.soc in socs) and (not model or r.model in model)]
    if not out:
        raise UsageError(f"{report.path}: no built target matches", hint="build first, or widen --soc/--model")
    return out


def prepared_for(report: BuildReport, r: TargetRecord) -> Prepared:
    """The target's prepared graph: where the build kept it beside its output (``builder/kept.py``), else in the
    prepare cache."""
    from ..builder.kept import kept_or_cached

    for p in report.prepared:
        if p.get("model") == r.model and p.get("graph") == r.graph:
            prep = kept_or_cached(report.path.parent, Prepared.load_dict(p))
            if prep.path.is_file():
                return prep
    raise QnnReleaseError(f"{r.id}: the prepared graph is gone from the cache",
                          hint="run `qnn-release build` again (nothing recompiles)")


def model_of(loaded: LoadedMatrix, target_id: str) -> Model | None:
    name = target_id.split(".", 1)[0]
    return next((m for m in loaded.matrix.models if m.name == name), None)


def parity_failures(loaded: LoadedMatrix, numbers: DeviceNumbers) -> list[str]:
    """Targets whose device outputs disagree with CPU, where the model says that fails them."""
    out = []
    for tid, r in sorted(numbers.targets.items()):
        m = model_of(loaded, tid)
        if r.status == "parity-failed" and m is not None and m.options.device_parity == "fail":
            out.append(f"{tid}: {r.reason}")
    return out


def now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def status_of(parity: DeviceParity | str) -> tuple[Status, str | None]:
    """A measured run's status: ok, parity-failed (its outputs disagree with CPU), or failed when no outputs
    came back to judge (the timings stand; a missing answer is not a wrong one)."""
    if isinstance(parity, str):
        return "failed", f"timings measured; on-device parity not measured: {parity}"
    return ("ok", None) if parity.passed else ("parity-failed", parity.failure)


def judge(loaded: LoadedMatrix, r: TargetRecord, inp: DeviceInputs, names: dict[str, str],
          outputs: dict | None) -> DeviceParity | str:
    """The device's outputs against CPU on the same inputs, by the thresholds the emulator is held to; a string
    says why there was nothing to judge."""
    got = outputs_in_order(inp, names, outputs)
    if isinstance(got, str):
        return got
    model = loaded.matrix.model(r.model)
    overall = worst([compare(np.asarray(a), np.asarray(b)) for ref, dev in zip(inp.reference, got)
                     for a, b in zip(ref, dev)])
    try:
        how = Judging.of(model.options, precision=r.precision, inputs_note=inp.note, argmax=inp.argmax or None)
        v = check(r.id, inp.output_names, Runs(inp.reference, got, sample_names=inp.names),
                  thresholds_for(model.options, r.precision), how=how)
    except VerifyError as e:
        return DeviceParity(cosine=round(overall.cosine, 6), snr_db=round(overall.snr_db, 2),
                            max_abs=float(f"{overall.max_abs:.4g}"), nan_count=overall.nan_count, passed=False,
                            failure=f"on the device: {e.message}", samples=len(inp.feeds), inputs=inp.note,
                            verdict=inp.verdict)
    p = v.parity  # the numbers the judge passed it on (per output, over the samples), as the emulator's are kept
    return DeviceParity(cosine=round(p.cosine, 6), snr_db=round(p.snr_db, 2), max_abs=float(f"{p.max_abs:.4g}"),
                        nan_count=p.nan_count, passed=True, worst_output=v.worst_output, samples=len(inp.feeds),
                        inputs=inp.note, verdict=inp.verdict)


def outputs_in_order(inp: DeviceInputs, names: dict[str, str], outputs: dict | None):
    """Per entry, the device's outputs in the graph's order (by name, else in the order the job returned)."""
    if not outputs:
        return "the job returned no outputs"
    keys = [names.get(n, n) for n in inp.output_names]
    if not all(k in outputs for k in keys):
        keys = list(outputs)
    if len(keys) != len(inp.output_names):
        return f"{len(outputs)} outputs returned, the graph has {len(inp.output_names)}"
    if any(len(outputs[k]) != len(inp.feeds) for k in keys):
        return f"the job returned {len(outputs[keys[0]])} entries for {len(inp.feeds)} inputs"
    return [[np.asarray(outputs[k][i]) for k in keys] for i in range(len(inp.feeds))]


def log_path(out: Path) -> Path:
    (out / "logs").mkdir(parents=True, exist_ok=True)
    return out / "logs" / "device-numbers.log"
