"""What a build keeps in its output folder for the stages after it: each model's prepared graphs (with the QDQ
graphs its quantized binaries were compiled from, written beside them) and its licence file. ``package`` copies
its model archives and twins' graphs from here, and ``device-numbers`` its graphs, without the prepare cache or
the model's sources. A graph is a hard link into the cache where the file system allows (no second copy of a
large graph); its external weights (``*.data``) are copies of their own, because onnx refuses to read weights
from a file with more than one hard link. Each graph's folder appears whole; one that is current is left alone.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

from ..prepare.graph import Prepared
from ..sources.store import clone_file
from ..util.files import link_or_copy, replace_dir, write_atomic

KEPT = "models"  # <out>/models/<model>/<graph>/ (the prepared folder) and <out>/models/<model>/LICENSE.source
PREPARED_JSON = "prepared.json"


def kept_graph(out: Path, prep: Prepared) -> Path:
    """Where the build keeps a prepared graph (the files beside it, the QDQ graphs, keep their names)."""
    return out / KEPT / prep.model / prep.graph / prep.path.name


def kept_licence(out: Path, model: str) -> Path:
    return out / KEPT / model / "LICENSE.source"


def is_current(out: Path, prep: Prepared) -> bool:
    """Whether the kept graph is the one the build report names (not one an earlier build of other graphs kept)."""
    try:
        kept = json.loads((kept_graph(out, prep).parent / PREPARED_JSON).read_text())
    except (OSError, ValueError):
        return False
    return kept.get("sha256") == prep.sha256 and kept_graph(out, prep).is_file()


def kept_or_cached(out: Path, prep: Prepared) -> Prepared:
    """A prepared graph where the build kept it beside ``out``, when that is the one the report names; else as the
    report says (in the prepare cache)."""
    return dataclasses.replace(prep, path=kept_graph(out, prep)) if is_current(out, prep) else prep


def keep(out: Path, prepared: list[Prepared], licences: dict[str, Path]) -> None:
    """Each prepared graph's folder (its ONNX files, their weights, prepared.json), and each model's licence file
    (``licences``: model -> the source file). Raises OSError as copying does (the caller says so)."""
    for prep in prepared:
        src = prep.path.parent
        names = [p.name for p in sorted(src.iterdir()) if _kept_file(p)] if src.is_dir() else []
        if not names or (is_current(out, prep) and all((kept_graph(out, prep).parent / n).is_file() for n in names)):
            continue
        place(kept_graph(out, prep).parent, [(n, src / n) for n in names])
    for model, path in licences.items():
        if path.is_file():
            write_atomic(kept_licence(out, model), path.read_bytes())


def place(dest: Path, files: list[tuple[str, Path | bytes]]) -> None:
    """``dest`` holding ``files`` (name in it -> bytes, or a file: linked, weights copied: onnx refuses weights
    from a file with more than one hard link), whole or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        for name, data in files:
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, bytes):
                (tmp / name).write_bytes(data)
            else:
                (clone_file if name.endswith(".data") else link_or_copy)(Path(data), tmp / name)
        replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kept_file(p: Path) -> bool:
    """The files of a prepared folder later stages read: its graphs, their weights and prepared.json (no logs, no
    temporaries of a build still writing there)."""
    return p.is_file() and not p.name.startswith(".") and (
        p.name == PREPARED_JSON or p.name.endswith((".onnx", ".data")))
