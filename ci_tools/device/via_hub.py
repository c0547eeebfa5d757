"""``qnn-release device-numbers``: every built target run on a real device of its chip through Qualcomm AI Hub.

For each target: the device AI Hub picks for its chip (``matrix/socs.yaml`` ``aihub``; its ``hexagon:`` and
``soc-model:`` must be the binary's), the runtime (the smallest QAIRT the service offers that is at least
the one that built the binary), the context binary uploaded, and one profiled inference job on the graph's
real samples; the same samples through the prepared ONNX graph on the same phone's CPU give the speedup.
Every job is submitted first, then all are waited for within one budget. Whatever happens is recorded
per target, in one line: no token, no device for the chip, an outage, a rate limit, a failed or unfinished
job never stops the others and never blocks a release; a device whose outputs disagree with CPU fails
the target (exit 7) unless the model says ``options.device_parity: record``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog.socs import Soc
from ..compile import qnn_ep
from ..compile.records import BuildReport, TargetRecord
from ..errors import QnnReleaseError
from ..matrix.schema import LoadedMatrix
from ..sources.store import default_cache, sha256_file
from .common import NoRuntime, Settings, judge, major_minor, now, prepared_for
from .hub import (
    DEFAULT_URL,
    TOKEN_ENV,
    URL_ENV,
    Hub,
    HubFault,
    cpu_baseline,
    device_info,
    latency,
    memory_mb,
    placement,
)
from .inputs import DeviceInputs, device_inputs
from .numbers import DeviceRun

PROFILE_ITERATIONS = 100  # AI Hub's default; with inputs, it runs iterations / entries times over them


@dataclass(kw_only=True)
class _Job:
    record: TargetRecord
    soc: Soc
    device: object  # the client's Device
    stands_in_for: str | None
    qairt: str
    inputs: DeviceInputs
    names: dict[str, str]  # ONNX name -> the binary's name
    npu: object = None  # the client's InferenceJob
    cpu: object = None


@dataclass
class _Run:
    out: Path
    loaded: LoadedMatrix
    report: BuildReport
    settings: Settings
    hub: Hub | None = None
    runs: dict[str, DeviceRun] = field(default_factory=dict)
    jobs: list[_Job] = field(default_factory=list)
    runtimes: list[tuple[str, str, list[str]]] = field(default_factory=list)
    _devices: dict[str, tuple] = field(default_factory=dict)
    _inputs: dict[tuple[str, str], DeviceInputs] = field(default_factory=dict)
    _cpu_jobs: dict[tuple[str, str, str], object] = field(default_factory=dict)

    def record(self, r: TargetRecord, status: str, reason: str, **more) -> None:
        self.runs[r.id] = DeviceRun(via="ai-hub", status=status, reason=reason, **more)


def measure(out: Path, loaded: LoadedMatrix, report: BuildReport, records: list[TargetRecord], settings: Settings,
            env: Mapping[str, str]) -> tuple[dict[str, DeviceRun], str | None, list[str]]:
    """Every target through AI Hub: (runs by target id, a note for the whole run, the runtimes offered)."""
    run = _Run(out, loaded, report, settings)
    token = env.get(TOKEN_ENV, "").strip()
    if not token:
        note = (f"no device numbers: {TOKEN_ENV} is not set (a fork's pull request, or a repository without "
                "the secret)")
        for r in records:
            run.record(r, "skipped", note)
        return run.runs, note, []
    run.hub = Hub(token, env.get(URL_ENV) or DEFAULT_URL, log=log_path(out))
    note = _measure(run, records)
    return run.runs, note, [f"{v} ({full})" for v, full, _ in run.runtimes]


def _measure(run: _Run, records: list[TargetRecord]) -> str | None:
    try:
        run.runtimes = run.hub.runtimes()
    except HubFault as f:
        for r in records:
            run.record(r, f.status, f.reason)
        return f"no device numbers: {f.reason}"
    for r in records:
        _plan(run, r)
    for job in run.jobs:
        _submit(run, job)
    _wait(run)
    for job in run.jobs:
        if job.record.id not in run.runs:
            _collect(run, job)
    return None


# -- plan: device, runtime, inputs ----------------------------------------------------------------


def _plan(run: _Run, r: TargetRecord) -> None:
    soc = run.loaded.catalog.get(r.soc)
    try:
        device, stands_in = _device(run, soc)
        if device is None:
            run.record(r, "no-device", stands_in)
            return
        qairt = _runtime(run, r)
        prep = prepared_for(run.report, r)
        key = (r.model, r.graph)
        if key not in run._inputs:
            run._inputs[key] = device_inputs(run.loaded, run.report, run.loaded.matrix.model(r.model), prep,
                                             default_cache(), max_entries=run.settings.max_entries)
        ctx = run.out / r.id / r.context_onnx
        run.jobs.append(_Job(record=r, soc=soc, device=device, stands_in_for=stands_in, qairt=qairt,
                             inputs=run._inputs[key], names=qnn_ep.stub_io_names(ctx, prep)))
    except HubFault as f:
        run.record(r, f.status, f.reason)
    except QnnReleaseError as e:
        run.record(r, "skipped" if isinstance(e, NoRuntime) else "failed", str(e))


def _device(run: _Run, soc: Soc) -> tuple[object | None, str | None]:
    """AI Hub's device for the chip (and the chip it stands in for), or None and why not."""
    if soc.name in run._devices:
        return run._devices[soc.name]
    chipsets = run.loaded.catalog.hub_chipsets(soc)
    found: tuple = (None, f"{soc.name}: no AI Hub chipset in matrix/socs.yaml (aihub) runs this chip's build")
    missing = []
    for chipset, named in chipsets:
        dev = run.hub.device(chipset)
        if dev is None:
            missing.append(f"chipset:{chipset}")
            found = (None, f"{soc.name}: AI Hub has no device that runs QNN for {' or '.join(missing)}")
            continue
        info = device_info(dev)
        if info.hexagon != soc.arch or info.soc_model != soc.soc_model:
            found = (None, f"{soc.name}: AI Hub's {dev.name} (chipset:{chipset}) reports hexagon:{info.hexagon} "
                     f"soc-model:{info.soc_model}; the binary is for {soc.arch}, soc_model {soc.soc_model}")
            continue
        found = (dev, None if named.name == soc.name else named.name)
        break
    run._devices[soc.name] = found
    return found


def _runtime(run: _Run, r: TargetRecord) -> str:
    """The QAIRT runtime to ask for: at least the version that built the binary (an older runtime cannot
    load it: AI Hub fails such a job with QNN_VERSION_MISMATCH)."""
    built = major_minor(r.sdk_version)
    offered = sorted({v for v, _, _ in run.runtimes if major_minor(v)}, key=major_minor)
    wanted = run.settings.qairt
    if wanted:
        if built and major_minor(wanted) < built:
            raise NoRuntime(f"--qairt {wanted} is older than QNN {r.sdk_version}, which built the binary")
        return wanted
    fits = [v for v in offered if built is None or major_minor(v) >= built]
    if not fits:
        raise NoRuntime(f"AI Hub offers QAIRT {', '.join(offered) or 'none'}; none is >= {r.sdk_version}, which "
                         "built the binary (a runtime older than the build cannot load it)")
    return fits[0]


# -- submit, wait, collect -----------------------------------------------------------------------


def _submit(run: _Run, job: _Job) -> None:
    r, hub = job.record, run.hub
    binary = run.out / r.id / r.binaries[0]
    try:
        model = hub.upload_model(binary, key=sha256_file(binary))
        entries = {job.names.get(k, k): v for k, v in job.inputs.entries.items()}
        data = hub.upload_dataset(entries, key=f"{r.model}/{r.graph}/{'-'.join(entries)}")
        opts = f"--qairt_version {job.qairt} --max_profiler_iterations {PROFILE_ITERATIONS}"
        job.npu = _retrying(run, lambda: hub.submit(f"{r.id} npu", model, job.device, data, opts))
        if run.settings.cpu:
            job.cpu = _cpu_job(run, job)
    except HubFault as f:
        run.record(r, f.status, f.reason)


def _cpu_job(run: _Run, job: _Job):
    """The prepared ONNX graph on the same device's CPU (once per graph and device)."""
    r, hub = job.record, run.hub
    key = (r.model, r.graph, job.device.name)
    if key not in run._cpu_jobs:
        prep = prepared_for(run.report, r)
        onnx_model = hub.upload_model(prep.path, key=prep.sha256)
        data = hub.upload_dataset(job.inputs.entries, key=f"{r.model}/{r.graph}/{'-'.join(job.inputs.entries)}")
        try:
            run._cpu_jobs[key] = _retrying(run, lambda: hub.submit(f"{r.model}.{r.graph} cpu", onnx_model,
                                                                   job.device, data, "--compute_unit cpu"))
        except HubFault:
            run._cpu_jobs[key] = None  # the NPU numbers stand without the comparison
    return run._cpu_jobs[key]


def _retrying(run: _Run, submit, attempts: int = 4):
    """A rate-limited submission is tried again, waiting longer each time, within the run's budget."""
    for i in range(attempts):
        try:
            return submit()
        except HubFault as f:
            if "429" not in f.reason or i == attempts - 1:
                raise
            time.sleep(min(run.settings.poll_seconds * 2 ** (i + 1), 120.0))
    raise AssertionError("unreachable")


def _wait(run: _Run) -> None:
    deadline = time.monotonic() + run.settings.budget_seconds
    pending = {id(j): j for job in run.jobs for j in (job.npu, job.cpu) if j is not None}
    done: set[int] = set()
    while pending:
        for key, j in list(pending.items()):
            try:
                if run.hub.state(j).done:
                    done.add(key)
                    del pending[key]
            except HubFault:
                pass  # an outage while polling: poll again until the budget ends
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(run.settings.poll_seconds)
    for job in run.jobs:
        if job.npu is not None and id(job.npu) in pending and job.record.id not in run.runs:
            run.record(job.record, "timeout", f"AI Hub job {job.npu.job_id} still running after "
                       f"{run.settings.budget_seconds:.0f} s (the budget): {job.npu.url}",
                       job_id=job.npu.job_id, job_url=job.npu.url)


def _collect(run: _Run, job: _Job) -> None:
    r, hub, j = job.record, run.hub, job.npu
    where = {"job_id": j.job_id, "job_url": j.url, "device": device_info(job.device, job.stands_in_for)}
    try:
        state = hub.state(j)
        if not state.ok:
            run.record(r, "failed", state.reason, qairt_runtime=job.qairt, **where)
            return
        profile, outputs, tools = hub.results(j)
    except HubFault as f:
        run.record(r, f.status, f.reason, **where)
        return
    summary = profile.get("execution_summary") or {}
    par = judge(run.loaded, r, job.inputs, job.names, outputs)
    base = _baseline(run, job)
    lat = latency(summary)
    run.runs[r.id] = DeviceRun(
        via="ai-hub", status="ok" if par.passed else "parity-failed", reason=par.failure,
        qairt_runtime=tools.get("QAIRT") or tools.get("QNN") or job.qairt, latency=lat,
        first_load_ms=_ms(summary.get("first_load_time")), warm_load_ms=_ms(summary.get("warm_load_time")),
        peak_memory_mb=memory_mb(summary), placement=placement(profile.get("execution_detail") or []),
        parity=par, cpu=base, speedup_vs_cpu=round(base.latency.median_ms / lat.median_ms, 2)
        if base and lat and lat.median_ms > 0 else None, measured=now(), **where)


def _baseline(run: _Run, job: _Job):
    if job.cpu is None:
        return None
    try:
        if not run.hub.state(job.cpu).ok:
            return None
        profile, _, tools = run.hub.results(job.cpu)
    except HubFault:
        return None
    return cpu_baseline(profile, tools, job.cpu)


def _ms(us) -> float | None:
    return round(float(us) / 1000.0, 3) if isinstance(us, (int, float)) and us > 0 else None


def log_path(out: Path) -> Path:
    (out / "logs").mkdir(parents=True, exist_ok=True)
    return out / "logs" / "device-numbers.log"
