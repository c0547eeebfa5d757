"""A model's source folder: the pinned files, or what its ``export`` command makes of them (cached by key)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from ..errors import SourceError
from ..matrix.schema import Model
from ..sources.store import SourceStore
from ..util import cmd
from ..util.text import clip


def command_digest(argv: list[str], root: Path) -> str:
    """What an export command runs, by content: every argument that names a file (a script, a config), relative
    to the repository or absolute, and the module after ``-m``, hashed by their bytes; so a changed script
    exports again instead of the cached graphs being served (and "verified") as before. Folders are not read
    (an argument ``.`` would hash a virtualenv on every build); the sources are keyed by their sha256 anyway."""
    h = hashlib.sha256()
    for i, arg in enumerate(argv):
        if "{src}" in arg or "{out}" in arg:
            continue
        found = _module_file(arg) if i and argv[i - 1] == "-m" else None
        path = found or (Path(arg) if Path(arg).is_absolute() else root / arg)
        try:
            if path.is_file():
                h.update(f"{i}:{path.name}\0".encode() + path.read_bytes())
        except OSError:
            continue
    return h.hexdigest()


def _module_file(name: str) -> Path | None:
    """The file ``python -m name`` runs (its package's ``__main__`` for a package), where Python finds it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        return None
    origin = Path(spec.origin)
    return origin.parent / "__main__.py" if origin.name == "__init__.py" else origin


def model_sources(store: SourceStore, model: Model, work: Path) -> tuple[Path, str]:
    """The folder the graphs are read from, and a digest of everything in it."""
    files = store.fetch(model)
    digest = hashlib.sha256(json.dumps({k: p.name for k, p in sorted(files.items())}).encode()).hexdigest()
    src = store.materialize(model, work / "src" / model.name)
    if model.export is None:
        return src, digest
    from ..recipes import code_digest

    key = hashlib.sha256(json.dumps([digest, model.export.model_dump(), code_digest(model.export.command),
                                     command_digest(model.export.command, store.repo_root)],
                                    sort_keys=True).encode()).hexdigest()[:16]
    out = work / "export" / model.name / key
    if not (out / ".done").exists():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        # absolute: the command runs in the repository, a relative --cache would point elsewhere
        argv = [a.replace("{src}", str(src.resolve())).replace("{out}", str(tmp.resolve()))
                for a in model.export.command]
        if argv[0] == "python":
            argv[0] = sys.executable
        r = cmd.run(argv, capture_output=True, text=True, cwd=store.repo_root)
        (tmp / "export.log").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise SourceError(f"{model.name}: export command failed ({r.returncode}): {clip(last, 300)}",
                              hint=f"see {out.name}.tmp/export.log in {out.parent}")
        missing = [o for o in model.export.outputs if not (tmp / o).is_file()]
        if missing:
            raise SourceError(f"{model.name}: export did not write {', '.join(missing)}",
                              hint="export.outputs must name files the command writes into {out}")
        (tmp / ".done").write_text(key)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out, key
