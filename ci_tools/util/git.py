"""One git command's output, or None when git is missing or the command fails (no repository, an unknown commit)."""

from __future__ import annotations

from pathlib import Path

from . import cmd


def git_out(root: Path, *argv: str) -> str | None:
    try:
        r = cmd.run(["git", "-C", str(root), *argv], capture_output=True, text=True)
    except OSError:
        return None
    return r.stdout if r.returncode == 0 else None
