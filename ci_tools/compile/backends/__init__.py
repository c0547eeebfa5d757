"""Compile routes behind one small protocol; adding a route is adding a module to ``BACKENDS``."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ...catalog.socs import Soc
from ...errors import UsageError
from ...matrix.schema import Options
from ...prepare.graph import Prepared


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


class Backend(Protocol):
    name: str

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


BACKENDS = {"ort": "ci_tools.compile.backends.ort:OrtBackend",
            "qairt": "ci_tools.compile.backends.qairt:QairtBackend"}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"--backend {name}: unknown compile route", hint=f"one of {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)()
