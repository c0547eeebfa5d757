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
from typing import Any, cast

import numpy as np

from ..catalog.socs import Soc
from ..compile import qnn_ep
from ..compile.records import BuildReport, TargetRecord
from ..errors import QnnReleaseError
from ..matrix.schema import LoadedMatrix
from ..sources.store import sha256_file
from .binary_io import BinaryIO
from .common import Build, NoRuntime, Settings, judge, log_path, major_minor, now, prepared_for, status_of, triple
from .hub import (
    Hub,
    HubFault,
    cpu_baseline,
    credentials,
    device_info,
    latency,
    memory_mb,
    ms,
    placement,
)
from .inputs import DeviceInputs, device_inputs
from .numbers import DeviceRun, Status

PROFILE_ITERATIONS = 100  # AI Hub's default; with inputs, it runs iterations / entries times over them
COLLECT_SECONDS = 300.0  # after the budget: downloading the finished jobs' profiles and outputs


@dataclass(kw_only=True)
class _Job:
    record: TargetRecord
    device: Any  # the client's Device
    stands_in_for: str | None
    qairt: str
    inputs: DeviceInputs
    io: BinaryIO  # what the binary itself takes and gives (the stub's conversion around it)
    names: dict[str, str]  # ONNX name -> the stub's name (qairt: `<name>_dq` where the binary has the name)
    npu: Any = None  # the client's InferenceJob
    cpu: Any = None


@dataclass
class _Run:
    out: Path
    loaded: LoadedMatrix
    report: BuildReport
    settings: Settings
    runs: dict[str, DeviceRun]
    hub: Hub
    deadline: float = float("inf")
    jobs: list[_Job] = field(default_factory=list)
    runtimes: list[tuple[str, str, list[str]]] = field(default_factory=list)
    _devices: dict[str, tuple] = field(default_factory=dict)
    _inputs: dict[tuple[str, str], DeviceInputs] = field(default_factory=dict)
    _cpu_jobs: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def record(self, r: TargetRecord, status: Status, reason: str | None, **more) -> None:
        self.runs[r.id] = DeviceRun(via="ai-hub", status=status, reason=reason, **more)


def measure(build: Build, records: list[TargetRecord], settings: Settings, env: Mapping[str, str],
            runs: dict[str, DeviceRun]) -> tuple[str | None, list[str]]:
    """Every target (``records``, of ``build``) through AI Hub, into ``runs`` (target id -> run, filled as they end:
    the caller writes what there is if the run is stopped): (a note for the whole run, the runtimes offered)."""
    token, url, note = credentials(env)
    if not token:
        for r in records:
            runs[r.id] = DeviceRun(via="ai-hub", status="skipped", reason=note)
        return note, []
    deadline = time.monotonic() + settings.budget_seconds  # uploads, submissions and waiting, all of it
    hub = Hub(token, url, log=log_path(build.out), deadline=deadline)
    run = _Run(build.out, build.loaded, build.report, settings, runs, hub, deadline)
    note = _measure(run, records)
    return note, [f"{v} ({full})" for v, full, _ in run.runtimes]


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
    run.hub.deadline = time.monotonic() + COLLECT_SECONDS  # finished jobs' results, past the budget if need be
    for job in run.jobs:
        if job.record.id not in run.runs:
            _collect(run, job)
    return None


# -- plan: device, runtime, inputs ----------------------------------------------------------------


def _plan(run: _Run, r: TargetRecord) -> None:
    soc = run.loaded.catalog.get(r.soc)
    ctx = run.out / r.id / cast(str, r.context_onnx)  # a built target's stub
    try:
        built = qnn_ep.compiled_for(ctx)  # the binary's own HTP arch and soc_model, from its stub
        # arch 0: onnxruntime-qnn 2.6.0 records none for some chips (qnn_ep.proves_chip); the chip's own then
        arch = f"v{built['htp_arch']}" if built["htp_arch"] else soc.arch
        device, stands_in = _device(run, soc, arch, int(built["soc_model"]))
        if device is None:
            run.record(r, "no-device", stands_in)
            return
        qairt = _runtime(run, r)
        prep = prepared_for(run.report, r)
        key = (r.model, r.graph)
        if key not in run._inputs:
            run._inputs[key] = device_inputs(run.report, run.loaded.matrix.model(r.model), prep,
                                             max_entries=run.settings.max_entries)
        run.jobs.append(_Job(record=r, device=device, stands_in_for=stands_in, qairt=qairt,
                             inputs=run._inputs[key], io=BinaryIO(ctx), names=qnn_ep.stub_io_names(ctx, prep)))
    except HubFault as f:
        run.record(r, f.status, f.reason)
    except QnnReleaseError as e:
        run.record(r, "skipped" if isinstance(e, NoRuntime) else "failed", str(e))


def _device(run: _Run, soc: Soc, arch: str, soc_model: int) -> tuple[Any, str | None]:
    """AI Hub's device for the binary (and the chip it stands in for), or None and why not: a device of the
    chip's chipsets whose hexagon: and soc-model: are the binary's; one that does not state them is taken
    only when none states them."""
    key = f"{soc.name}/{arch}/{soc_model}"
    if key not in run._devices:
        run._devices[key] = _pick_device(run, soc, arch, soc_model)
    return run._devices[key]


def _pick_device(run: _Run, soc: Soc, arch: str, soc_model: int) -> tuple[Any, str | None]:
    missing, other, unstated = [], [], None
    for chipset, named in run.loaded.catalog.hub_chipsets(soc):
        devices = run.hub.devices(chipset)
        if not devices:
            missing.append(f"chipset:{chipset}")
        for dev in devices:
            info = device_info(dev)
            stands_in = None if named.name == soc.name else named.name
            if (info.hexagon, info.soc_model) == (arch, soc_model):
                return dev, stands_in
            if info.hexagon is None and info.soc_model is None:
                unstated = unstated or (dev, stands_in)
            else:
                other.append(f"{dev.name} (hexagon:{info.hexagon} soc-model:{info.soc_model})")
    if unstated is not None:
        return unstated
    if other:
        return None, f"{soc.name}: AI Hub's {', '.join(other)} do not match the binary ({arch}, soc_model {soc_model})"
    if missing:
        return None, f"{soc.name}: AI Hub has no device that runs QNN for {' or '.join(missing)}"
    return None, f"{soc.name}: no AI Hub chipset in matrix/socs.yaml (aihub) runs this chip's build"


def _runtime(run: _Run, r: TargetRecord) -> str:
    """The QAIRT runtime to ask for (its api_version, as --qairt_version takes it): the oldest AI Hub offers
    whose full version is at least the one that built the binary (an older runtime cannot load it: AI Hub fails
    such a job with QNN_VERSION_MISMATCH); 2.45.40 is older than 2.45.41."""
    built = triple(r.sdk_version)
    wanted = run.settings.qairt
    if wanted:
        asked = major_minor(wanted)  # None: not a version (AI Hub's own words, as "latest"): it judges them
        if built and asked is not None and asked < built[:2]:
            raise NoRuntime(f"--qairt {wanted} is older than QNN {r.sdk_version}, which built the binary")
        return wanted
    offered = sorted(((triple(full) or (*mm, 0), api) for api, full, _ in run.runtimes
                      if (mm := major_minor(api))))
    fits = [api for full, api in offered if built is None or full >= built]
    if not fits:
        names = ", ".join(api for _, api in offered) or "none"
        raise NoRuntime(f"AI Hub offers QAIRT {names}; none is >= {r.sdk_version}, which built the binary (a "
                        "runtime older than the build cannot load it)")
    return fits[0]


# -- submit, wait, collect -----------------------------------------------------------------------


def _submit(run: _Run, job: _Job) -> None:
    r, hub = job.record, run.hub
    binary = run.out / r.id / cast("list[str]", r.binaries)[0]  # a built target's
    if time.monotonic() >= run.deadline:
        run.record(r, "timeout", f"not submitted: the budget ({run.settings.budget_seconds:.0f} s) ended before it")
        return
    try:
        model = hub.upload_model(binary, key=sha256_file(binary))
        fed = [job.io.to_binary({job.names.get(k, k): v for k, v in f.items()}) for f in job.inputs.feeds]
        entries = {n: [f[n] for f in fed] for n in job.io.inputs}
        data = hub.upload_dataset(entries, key=_digest(entries))
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
        try:
            prep = prepared_for(run.report, r)
            onnx_model = hub.upload_model(prep.path, key=prep.sha256)
            data = hub.upload_dataset(job.inputs.entries, key=_digest(job.inputs.entries))
            run._cpu_jobs[key] = _retrying(run, lambda: hub.submit(f"{r.model}.{r.graph} cpu", onnx_model,
                                                                   job.device, data, "--compute_unit cpu"))
        except (HubFault, QnnReleaseError):
            run._cpu_jobs[key] = None  # the NPU numbers stand without the comparison
    return run._cpu_jobs[key]


def _retrying(run: _Run, submit, attempts: int = 4):
    """A rate-limited submission is tried again, waiting longer each time, within the run's budget."""
    for i in range(attempts):
        try:
            return submit()
        except HubFault as f:
            left = run.deadline - time.monotonic()
            if "429" not in f.reason or i == attempts - 1 or left <= 0:
                raise
            time.sleep(min(run.settings.poll_seconds * 2 ** (i + 1), 120.0, left))
    raise AssertionError("unreachable")


def _wait(run: _Run) -> None:
    """Poll every job until all are finished or the budget ends; a refused token or client stops at once."""
    pending = {id(j): j for job in run.jobs for j in (job.npu, job.cpu) if j is not None}
    while pending:
        for key, j in list(pending.items()):
            try:
                if run.hub.state(j).done:
                    del pending[key]
            except HubFault as f:
                if "(401)" in f.reason or "(426)" in f.reason:
                    for job in run.jobs:
                        if job.npu is not None and id(job.npu) in pending and job.record.id not in run.runs:
                            run.record(job.record, f.status, f.reason)
                    return
                if f.status == "timeout":
                    break  # an outage while polling: poll again until the budget ends
        if not pending or time.monotonic() >= run.deadline:
            break
        time.sleep(max(0.0, min(run.settings.poll_seconds, run.deadline - time.monotonic())))
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
        profile, tools = hub.profile(j)
    except HubFault as f:
        run.record(r, f.status, f.reason, **where)
        return
    why = "the job gave no outputs"
    try:
        outputs = hub.outputs(j)
    except HubFault as f:
        outputs, why = None, f.reason
    summary = profile.get("execution_summary") or {}
    try:
        par = judge(run.loaded, r, job.inputs, job.names, _as_onnx(job, outputs)) if outputs is not None else why
    except QnnReleaseError as e:
        par = str(e)
    base, lat = _baseline(run, job), latency(summary)
    status, reason = status_of(par)
    run.runs[r.id] = DeviceRun(
        via="ai-hub", status=status, reason=reason,
        qairt_runtime=tools.get("QAIRT") or tools.get("QNN") or job.qairt, latency=lat,
        first_load_ms=ms(summary.get("first_load_time")), warm_load_ms=ms(summary.get("warm_load_time")),
        peak_memory_mb=memory_mb(summary), placement=placement(profile.get("execution_detail") or []),
        parity=par if not isinstance(par, str) else None, cpu=base,
        speedup_vs_cpu=round(base.latency.median_ms / lat.median_ms, 2) if base and lat and lat.median_ms > 0
        else None, measured=now(), **where)


def _as_onnx(job: _Job, outputs: dict | None) -> dict | None:
    """The device's outputs (the binary's tensors) as the ONNX graph's, per entry, through the stub's nodes."""
    if not outputs:
        raise QnnReleaseError("the job gave no outputs")
    names = job.io.outputs if all(n in outputs for n in job.io.outputs) else list(outputs)
    if len(names) != len(job.io.outputs):
        raise QnnReleaseError(f"the job returned {len(outputs)} outputs, the binary has {len(job.io.outputs)}")
    count = min(len(v) for v in outputs.values())
    per = [job.io.from_binary({b: outputs[n][i] for b, n in zip(job.io.outputs, names)}) for i in range(count)]
    return {n: [p[n] for p in per] for n in job.io.graph_outputs}


def _digest(entries: dict) -> str:
    import hashlib

    h = hashlib.sha256()
    for name in sorted(entries):
        h.update(name.encode())
        for a in entries[name]:
            h.update(str(a.dtype).encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
    return "inputs-" + h.hexdigest()[:16]


def _baseline(run: _Run, job: _Job):
    if job.cpu is None:
        return None
    try:
        if not run.hub.state(job.cpu).ok:
            return None
        profile, tools = run.hub.profile(job.cpu)
    except HubFault:
        return None
    return cpu_baseline(profile, tools, job.cpu)
