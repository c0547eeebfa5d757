"""What a build keeps in its output folder for the stages after it: each model's prepared graphs (with the QDQ
graphs its quantized binaries were compiled from, written beside them) and its licence file. ``package`` copies
them from here and needs neither the prepare cache nor the model's sources again. Hard links into the cache where
the file system allows (no second copy of a large graph); each folder appears whole.
"""

from __future__ import annotations

from pathlib import Path

from ..compile.target_job import copy_atomic
from ..prepare.graph import Prepared
from ..util.files import write_atomic

KEPT = "models"  # <out>/models/<model>/<graph>/ (the prepared folder) and <out>/models/<model>/LICENSE.source


def kept_graph(out: Path, prep: Prepared) -> Path:
    """Where the build keeps a prepared graph (the files beside it, the QDQ graphs, keep their names)."""
    return out / KEPT / prep.model / prep.graph / prep.path.name


def kept_licence(out: Path, model: str) -> Path:
    return out / KEPT / model / "LICENSE.source"


def keep(out: Path, prepared: list[Prepared], licences: dict[str, Path]) -> None:
    """Each prepared graph's folder, and each model's licence file (``licences``: model -> the source file)."""
    for prep in prepared:
        dest = kept_graph(out, prep).parent
        if prep.path.parent.is_dir():
            copy_atomic(prep.path.parent, dest)
    for model, path in licences.items():
        if path.is_file():
            write_atomic(kept_licence(out, model), path.read_bytes())

