"""Atomic writes: a reader sees the old file or folder or the new one, never half of one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def umask() -> int:
    """The process umask, read without changing it (Linux: /proc/self/status), else by the set-and-restore."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def as_if_created(path: Path) -> None:
    """tempfile makes folders 0700 and files 0600; a finished one gets the mode any other file gets
    (0755/0644 under the usual umask), so an upload step or a web server running as another user reads it."""
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~umask())


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write via a temp file in the same folder + os.replace: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def replace_dir(src: Path, dest: Path) -> None:
    """Move a finished folder into place: readers see the old folder or the new one, never a mix."""
    as_if_created(src)
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
        os.replace(src, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dest)


@contextmanager
def staging_dir(dest: Path, prefix: str) -> Iterator[Path]:
    """A temporary folder inside ``dest`` (same file system, so ``replace_dir`` can move out of it).

    It is removed in any case; when the block fails, so are the folders this created for it, and
    ``dest`` is as it was before.
    """
    dest = Path(dest)
    created = [p for p in (dest, *dest.parents) if not p.exists()]
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=dest))
    ok = False
    try:
        yield tmp
        ok = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not ok:
            for p in created:  # innermost first; a folder somebody else wrote into meanwhile stays
                try:
                    p.rmdir()
                except OSError:
                    break


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """``dst`` a hard link of ``src`` where the file system allows (no second copy), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
