"""``qnn-release device-numbers``: every built target run on a real device of its chip, through Qualcomm AI Hub
(``via_hub``) or a phone on adb (``via_adb``), written to ``device-numbers.json``.

Whatever happens is recorded per target, in one line: no token, no device for the chip, an outage, a rate
limit, a failed or unfinished job never stops the others and never blocks a release; a device whose outputs
disagree with CPU fails the target (exit 7, and package refuses it) unless the model says
``options.device_parity: record``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, cast

from ..compile.records import REPORT
from ..matrix.schema import load_matrix
from ..sources.store import sha256_file
from .common import Build, Settings, now, read_report, select_targets
from .numbers import FILE, DeviceNumbers, DeviceRun

# The device routes, as compile/backends has BACKENDS: each module has ``measure(build, records, settings, env, runs)
# -> (note, runtimes)``; adding a route is adding a module and a line here.
VIAS = {"ai-hub": "ci_tools.device.via_hub", "adb": "ci_tools.device.via_adb"}
Via = Literal["ai-hub", "adb"]


def device_numbers(out: Path, *, via: Via = "ai-hub", soc: list[str] | None = None,
                   model: list[str] | None = None, settings: Settings | None = None,
                   env: Mapping[str, str] | None = None) -> DeviceNumbers:
    """Measure every built target of ``out`` on a device and write ``out/device-numbers.json``."""
    env = os.environ if env is None else env
    out = Path(out)
    report = read_report(out / REPORT)
    loaded = load_matrix(report.matrix)
    records = select_targets(loaded, report, soc, model)
    settings = settings or Settings()
    import importlib

    measure = importlib.import_module(VIAS[via]).measure
    runs: dict[str, DeviceRun] = {}
    note, runtimes = "stopped before every target was measured (interrupted, or an internal error)", []
    try:
        note, runtimes = measure(Build(out=out, loaded=loaded, report=report), records, settings, env, runs)
    finally:  # stopped or not, what was measured is written, and every other target says why it has nothing
        for r in records:
            run = runs.get(r.id) or DeviceRun(via=via, status="timeout", reason="not measured: the run was stopped")
            binaries = cast("list[str]", r.binaries)  # a built target's (select_targets keeps those)
            runs[r.id] = run.model_copy(update={"binary_sha256": sha256_file(out / r.id / binaries[0])})
        numbers = DeviceNumbers(via=via, created=now(), note=note, targets=runs, runtimes=runtimes)
        numbers.write(out / FILE)
    return numbers
