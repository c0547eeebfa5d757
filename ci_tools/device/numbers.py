"""``device-numbers.json``: what each target measured on a real device, and the one reader and writer of it.

``qnn-release device-numbers`` writes it beside ``build-report.json``; ``package`` reads it into each
archive's ``metadata.json`` (``numbers.<graph>.device``), ``manifest.json``, the notes and the page. A
target that could not be measured has a record too, with its status and a one-line reason: a release
says plainly which chips have device numbers and why the others do not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny

from ..recipes import RecipeFigures
from ..util.files import write_json

FILE = "device-numbers.json"
VERSION: Final = 1

# ok: measured and on-device parity passed; parity-failed: measured, outputs disagree with CPU (fails the target
# unless the matrix says options.device_parity: record); the rest were not measured, with the reason
Status = Literal["ok", "parity-failed", "failed", "timeout", "unavailable", "no-device", "skipped"]
MEASURED = ("ok", "parity-failed")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Latency(_M):
    median_ms: float = Field(description="the median of the timed runs (AI Hub), or their mean where the tool gives "
                             "only that (qnn-profile-viewer on adb: statistic mean)")
    min_ms: float
    max_ms: float
    runs: int = Field(description="how many timed inferences the numbers are over")
    statistic: Literal["median", "mean"] = "median"


class Device(_M):
    name: str = Field(description="the device that ran it (AI Hub's device name, or adb's model and serial)")
    os: str | None = None
    chipset: str | None = Field(default=None, description="AI Hub's chipset attribute, or ro.soc.model")
    hexagon: str | None = Field(default=None, description="the device's HTP arch (hexagon:vNN)")
    soc_model: int | None = Field(default=None, description="the device's QNN soc_model (soc-model:NN)")
    stands_in_for: str | None = Field(default=None, description="the chip the binary was built for, when the "
                                      "device is another part with the same soc_model and HTP arch")


class Placement(_M):
    npu: int
    gpu: int
    cpu: int
    not_on_npu: list[str] = Field(default=[], description="layers the device ran elsewhere (the first 20)")


class DeviceParity(_M):
    cosine: float
    snr_db: float
    max_abs: float
    nan_count: int
    samples: int = Field(description="how many inputs the device ran")
    passed: bool
    inputs: str = Field(description="what the inputs were (the model's real samples, or generated)")
    verdict: Literal["real-samples", "generated-inputs"]
    worst_output: str | None = None
    failure: str | None = Field(default=None, description="why it failed, one line")


class CpuBaseline(_M):
    """The same graph (the prepared ONNX) on the same phone's CPU: what an app runs without the NPU."""

    latency: Latency
    runtime: str | None = Field(default=None, description="e.g. ONNX Runtime 1.24.1")
    job_id: str | None = None
    job_url: str | None = None


class DeviceRun(_M):
    via: Literal["ai-hub", "adb"]
    status: Status
    reason: str | None = Field(default=None, description="one line: why it was not measured, or what failed")
    device: Device | None = None
    qairt_runtime: str | None = Field(default=None, description="the QNN/QAIRT runtime the device ran it with")
    latency: Latency | None = Field(default=None, description="inference time on the device's NPU")
    first_load_ms: float | None = None
    warm_load_ms: float | None = None
    peak_memory_mb: tuple[float, float] | None = Field(default=None, description="inference peak memory, min-max")
    placement: Placement | None = None
    parity: DeviceParity | None = None
    cpu: CpuBaseline | None = None
    speedup_vs_cpu: float | None = Field(default=None, description="CPU median / NPU median on the same device")
    job_id: str | None = None
    job_url: str | None = None
    measured: str | None = Field(default=None, description="when (UTC, ISO 8601)")
    binary_sha256: str | None = Field(default=None, description="the context binary measured (package uses a run "
                                      "only for the binary it measured)")

    @property
    def measured_ok(self) -> bool:
        return self.status in MEASURED


class DeviceNumbers(_M):
    version: Literal[1] = VERSION
    via: Literal["ai-hub", "adb"]
    created: str
    note: str | None = Field(default=None, description="said for the whole run: e.g. no token, so no numbers")
    runtimes: list[str] = Field(default=[], description="the QAIRT runtimes the service offered")
    targets: dict[str, DeviceRun] = Field(default={}, description="target id -> its device run")

    def write(self, path: Path) -> None:
        write_json(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: Path) -> DeviceNumbers:
        """Raises OSError, ValueError (bad JSON) or pydantic.ValidationError: the caller names the file."""
        return cls.model_validate(json.loads(Path(path).read_text()))


def summary_line(target: str, run: DeviceRun) -> str:
    """One line per target, as the command prints it."""
    if run.latency is None:
        return f"{target}: {run.status}: {run.reason}"
    dev = run.device.name if run.device else "?"
    speed = f", {run.speedup_vs_cpu:.1f}x CPU" if run.speedup_vs_cpu else ""
    par = f", cosine {run.parity.cosine:.5f} on {run.parity.samples}" if run.parity else ""
    tail = f" ({run.reason})" if run.reason else ""
    return f"{target}: {run.status}: {run.latency.median_ms:.3f} ms on {dev}{speed}{par}{tail}"


class OnDevice(_M):
    """One archive's device figures (its graphs together), as the manifest, notes and page show them."""

    via: Literal["ai-hub", "adb"]
    status: Status = Field(description="the weakest of its graphs' runs")
    reason: str | None = None
    device: str | None = None
    latency_ms: float | None = Field(default=None, description="one run of every graph, NPU medians summed")
    cpu_latency_ms: float | None = Field(default=None, description="the same graphs on the device's CPU")
    speedup_vs_cpu: float | None = None
    recipe: Annotated[SerializeAsAny[RecipeFigures], BeforeValidator(RecipeFigures.dispatch)] | None = Field(
        default=None, description="the model's recipe's figures from the runs (a speech recognizer's real-time "
        "factor ...), tagged with its kind")


_ORDER = ("parity-failed", "failed", "timeout", "unavailable", "no-device", "skipped", "ok")
def on_device(runs: dict[str, DeviceRun], recipe: Callable[[dict[str, DeviceRun]], dict | None] | None = None
              ) -> OnDevice | None:
    """The archive's figures from its graphs' runs (graph -> run); None when no graph has a run. ``recipe``:
    the model's recipe's figures from the runs (tagged with its kind), asked for when every graph has a latency."""
    if not runs:
        return None
    weakest = min(runs.values(), key=lambda r: _ORDER.index(r.status))
    npus = [r.latency.median_ms for r in runs.values() if r.latency is not None]
    ok = len(npus) == len(runs)
    npu = round(sum(npus), 3) if ok else None
    cpus = [r.cpu.latency.median_ms for r in runs.values() if r.cpu is not None]
    cpu = round(sum(cpus), 3) if ok and len(cpus) == len(runs) else None
    dev = next((r.device.name + (f" ({r.device.stands_in_for}, same soc_model and HTP arch)"
                                 if r.device.stands_in_for else "") for r in runs.values() if r.device), None)
    return OnDevice(via=weakest.via, status=weakest.status, reason=weakest.reason, device=dev, latency_ms=npu,
                    cpu_latency_ms=cpu, speedup_vs_cpu=round(cpu / npu, 2) if cpu and npu else None,
                    recipe=RecipeFigures.dispatch(recipe(runs)) if ok and recipe is not None else None)
