"""Compile routes behind one small protocol; adding a route is adding a module to ``BACKENDS``."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ...catalog.socs import Soc
from ...errors import UsageError
from ...matrix.schema import Options
from ...prepare.graph import Prepared

if TYPE_CHECKING:
    from ..doctor import Diagnosis


@dataclass(frozen=True, kw_only=True)
class CompileJob:
    target_id: str
    prepared: Prepared
    soc: Soc
    precision: str
    options: Options
    out_dir: Path  # a fresh, empty folder: the backend writes its files here
    calibration: list[dict[str, np.ndarray]] | None = None
    precompiled: Path | None = None  # what ``Backend.precompile`` made for this graph and precision


@dataclass(kw_only=True)
class CompileResult:
    context_onnx: Path  # EPContext stub ONNX Runtime loads
    binaries: list[Path]  # QNN context binaries
    sdk_version: str  # QNN/QAIRT version with build id
    seconds: float
    warnings: list[str] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)


class NoEmulator(Exception):
    """Raised inside ``Backend.stepper``'s steps by a route with no emulator here: nothing is verified."""


class Backend(Protocol):
    """A compile route. ``sdk_version``, ``precompile``, ``compile`` and ``run`` are what every route does;
    the other methods are abilities with a default a route overrides when it has them (a route subclasses
    this Protocol to take the defaults)."""

    name: str
    # How many steps of a stream the route runs carrying its own state (``stepper``); None: every step. A route
    # that starts a process per run (qairt: one qnn-net-run each) carries the first ones and runs the rest in
    # one batch fed the state CPU carried into them: per-step parity on every step, drift over the carried ones.
    carried_steps: int | None = None

    def sdk_version(self) -> str:
        """Version (with build id) of the toolchain; part of the cache key."""

    def precompile(self, prepared: Prepared, precision: str, calibration: list[dict[str, np.ndarray]] | None,
                   calibration_hash: str | None, per_channel: bool = True) -> Path | None:
        """The chip-independent work, once per graph and precision (quantize, convert); cached on disk."""

    def compile(self, job: CompileJob) -> CompileResult:
        """Compile ``job.prepared`` for ``job.soc``, or raise CompileError naming what failed."""

    def run(self, job: CompileJob, result: CompileResult, feeds: list[dict[str, np.ndarray]]
            ) -> tuple[list[list[np.ndarray]], float] | None:
        """Run the compiled target on an emulator: outputs per feed and seconds per run; None if impossible."""

    def sdk_sha256(self) -> str | None:
        """The sha256 of the SDK archive the toolchain came from, when the route knows it (target records)."""
        return None

    def doctor(self, prepared: Prepared, soc: Soc, quantized: Path | None = None) -> Diagnosis | None:
        """A trial compile (CPU fallback allowed) naming every node HTP rejects: a ``Diagnosis``; None when
        the route has no trial (the per-chip compiles report what they fail on)."""
        return None

    @contextlib.contextmanager
    def stepper(self, job: CompileJob, result: CompileResult) -> Iterator[Callable[[dict], list[np.ndarray]]]:
        """Many runs of one binary (a stream's steps): yields ``step(feed) -> outputs``. By default one
        ``run`` per step (qairt: one qnn-net-run per call): slower, the same judgement; ``NoEmulator`` when
        the route has no emulator here."""

        def step(feed: dict) -> list[np.ndarray]:
            ran = self.run(job, result, [feed])
            if ran is None:
                raise NoEmulator
            return ran[0][0]

        yield step


BACKENDS = {"ort": "ci_tools.compile.backends.ort:OrtBackend",
            "qairt": "ci_tools.compile.backends.qairt:QairtBackend"}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"--backend {name}: unknown compile route", hint=f"one of {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)()
