"""Deterministic, parallel-compressed ``.tar.bz2`` archives (``extract.py`` reads them back safely).

Same inputs -> byte-identical archive: entries sorted, fixed mtime, uid/gid 0, fixed modes.
Compression: lbzip2 or pbzip2 when on PATH, else bzip2 streams compressed in parallel
threads (``bz2`` releases the GIL) over fixed-size chunks and concatenated. Chunking does not
depend on the worker count, so the bytes do not either; ``tar xjf`` and Python's ``tarfile``
read multi-stream bzip2.
"""

from __future__ import annotations

import bz2
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import PackageError
from ..util import cmd
from ..util.text import clip

MTIME = 1_577_836_800  # 2020-01-01T00:00:00Z: a fixed date, not the build's
CHUNK = 4 * 900_000  # four bzip2 blocks of 900 kB per stream


def _tarinfo(name: str, size: int, executable: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = size, MTIME
    info.mode = 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tar(tar_path: Path, members: Iterable[tuple[str, Path | bytes]]) -> None:
    """Write an uncompressed tar of (archive name, file or bytes), sorted by name."""
    items = sorted(members, key=lambda m: m[0])
    names = [n for n, _ in items]
    if len(set(names)) != len(names):
        raise PackageError(f"{tar_path.name}: duplicate archive member names")
    dirs = sorted({str(Path(n).parent) for n in names} - {"."}, key=lambda d: d)
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in _with_parents(dirs):
            info = _tarinfo(d, 0)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, src in items:
            if isinstance(src, bytes):
                tar.addfile(_tarinfo(name, len(src)), io.BytesIO(src))
            else:
                st = src.stat()
                with open(src, "rb") as f:
                    tar.addfile(_tarinfo(name, st.st_size, bool(st.st_mode & 0o111)), f)


def _with_parents(dirs: list[str]) -> list[str]:
    out: set[str] = set()
    for d in dirs:
        p = Path(d)
        while str(p) not in (".", ""):
            out.add(str(p))
            p = p.parent
    return sorted(out)


def external_compressor() -> list[str] | None:
    for tool in ("lbzip2", "pbzip2"):
        path = shutil.which(tool)
        if path:
            return [path, "-9", "-c"] if tool == "pbzip2" else [path, "-9", "-c", "-n", str(os.cpu_count() or 1)]
    return None


def compress_bz2(src: Path, dest: Path, workers: int | None = None, use_external: bool = True) -> None:
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        tool = external_compressor() if use_external else None
        if tool:
            with open(src, "rb") as f, open(tmp, "wb") as g:
                r = cmd.run(tool, stdin=f, stdout=g, stderr=subprocess.PIPE)
            if r.returncode != 0:
                raise PackageError(f"{tool[0]} failed on {src.name}: {clip(r.stderr.decode(errors='replace'), 200)}")
        else:
            with open(src, "rb") as f, open(tmp, "wb") as g, \
                    ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
                window = max(2, 2 * (workers or os.cpu_count() or 1))
                while True:
                    chunks = [c for c in (f.read(CHUNK) for _ in range(window)) if c]
                    if not chunks:
                        break
                    for block in pool.map(lambda c: bz2.compress(c, 9), chunks):
                        g.write(block)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def make_tar_bz2(dest: Path, members: Iterable[tuple[str, Path | bytes]], use_external: bool = True) -> Path:
    """Write ``dest`` atomically: it appears whole or not at all."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.") as tmp:
        tar = Path(tmp) / "archive.tar"
        write_tar(tar, members)
        compress_bz2(tar, dest, use_external=use_external)
    return dest
