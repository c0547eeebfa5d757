"""How a build runs: the settings every stage of it reads (the builder, the compile jobs, a recipe's check)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class BuildSettings:
    """How a build runs (``qnn-release build``'s flags); it travels whole, never spread over parameters.

    ``precompile_only``: fetch, prepare and run the chip-independent work (quantize / convert /
    model libraries) for every graph and precision, compile nothing: what a release's precompile
    job does once, for the chip jobs to consume. ``from_store``: every target must already be
    built (in ``out`` or the target store); a missing one fails the build naming it, nothing is
    compiled (the publish job of a release).
    """

    out: Path
    backend: str = "ort"
    jobs: int = 1
    force: bool = False
    cache: Path | None = None  # None: ``default_cache()``
    precompile_only: bool = False
    from_store: bool = False
    # every target in a worker process, -j 1 too (the CLI): an interrupt stops an emulator run within seconds;
    # the Python API runs -j 1 in its own process
    isolate: bool = False
