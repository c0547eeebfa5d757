"""Model recipes: turn a checkpoint into graphs a matrix's ``export`` command names.

A recipe depends on the stages below it (``sources``, ``prepare``, ``errors``), never on
``build`` or ``cli``; those call into it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def code_digest(argv: list[str]) -> str | None:
    """A digest of the recipe an export command runs (``python -m ci_tools.recipes.<name>...``), so that a
    changed recipe exports again instead of reusing the cached graphs; None for other commands."""
    module = next((a for a in argv if a.startswith(f"{__name__}.")), None)
    if module is None:
        return None
    folder = Path(__file__).resolve().parent / module[len(__name__) + 1:].split(".")[0]
    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*.py")):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()
