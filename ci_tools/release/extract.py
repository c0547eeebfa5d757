"""Extracting a release archive safely: every member is checked before anything is written.

The checks are ours and complete on their own: they do not lean on ``tarfile``'s extraction
filters (Python 3.12+, and only some 3.10/3.11 patch releases, have them), and the writer below
does not use ``extractall`` at all. An archive is refused (``PackageError``, one line) unless:

- it has the layout ``package`` writes: every member is ``<top>`` (a folder) or under ``<top>/``,
  where ``<top>`` is the asset's name without ``.tar.bz2``; each name once; regular files,
  folders and links only; no setuid/setgid/sticky bits;
- it has at most ``MAX_MEMBERS`` members and ``MAX_EXPANDED_BYTES`` bytes once expanded (the sizes
  the headers declare, counted before any member's data is read);
- no name is absolute or has '..' (or empty) parts;
- every path, resolved through the links the archive created before it (as the kernel resolves
  it during extraction), stays inside ``<top>``; every symbolic link points inside ``<top>``, when
  it is created and with the archive's final set of links; every hard link names an earlier
  regular file.
"""

from __future__ import annotations

import lzma
import os
import re
import shutil
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackageError
from ..util.text import clip

MAX_MEMBERS = 10_000  # a model archive holds tens of files, qnn-include a few hundred headers
MAX_EXPANDED_BYTES = 8 * 1024**3  # GitHub assets are < 2 GiB, and context binaries barely compress
MAX_LINK_HOPS = 40  # like the kernel's ELOOP limit
_UNREADABLE = (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError)
Key = tuple[str, ...]

_HINT = "this archive is not one `qnn-release package` wrote: do not use it, tell the release's publisher"


@dataclass(frozen=True)
class Member:
    name: str
    parts: Key
    kind: str  # "dir", "file", "symlink", "hardlink"
    size: int
    mode: int
    mtime: int
    linkname: str


def _refuse(archive: Path, what: str) -> PackageError:
    return PackageError(f"{archive.name}: refused: {what}", hint=_HINT)


def _resolve(parts: list[str], links: dict[Key, str], archive: Path, name: str) -> Key | None:
    """``parts`` with every link the archive made so far followed; None when it climbs above the root."""
    out: list[str] = []
    todo = list(parts)
    hops = 0
    while todo:
        p = todo.pop(0)
        if p in ("", "."):
            continue
        if p == "..":
            if not out:
                return None
            out.pop()
            continue
        out.append(p)
        target = links.get(tuple(out))
        if target is not None:
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise _refuse(archive, f"member {name!r} goes through a loop of links")
            if target.startswith("/"):
                return None
            out.pop()  # relative to the folder holding the link
            todo = target.split("/") + todo
    return tuple(out)


def _kind(m: tarfile.TarInfo) -> str | None:
    if m.isdir():
        return "dir"
    if m.isreg():
        return "file"
    if m.issym():
        return "symlink"
    if m.islnk():
        return "hardlink"
    return None


class _Checker:
    def __init__(self, archive: Path, top: str):
        self.archive, self.top = archive, top
        self.links: dict[Key, str] = {}  # location -> target, as the archive creates them
        self.taken: dict[Key, str] = {}  # resolved location -> kind
        self.names: set[str] = set()
        self.members: list[Member] = []
        self.expanded = 0

    def refuse(self, what: str) -> PackageError:
        return _refuse(self.archive, what)

    def inside(self, key: Key | None) -> bool:
        return key is not None and key[:1] == (self.top,)

    def add(self, m: tarfile.TarInfo) -> None:
        name = m.name
        if len(self.members) >= MAX_MEMBERS:
            raise self.refuse(f"more than {MAX_MEMBERS} members")
        self.expanded += max(m.size, 0)
        if self.expanded > MAX_EXPANDED_BYTES:
            raise self.refuse(f"expands to more than {MAX_EXPANDED_BYTES // 1024**3} GiB")
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
            raise self.refuse(f"member {name!r} has an absolute path")
        kind = _kind(m)
        parts = (name[:-1] if kind == "dir" and name.endswith("/") else name).split("/")
        if ".." in parts:
            raise self.refuse(f"member {name!r} points outside the destination")
        if any(p in ("", ".") for p in parts) or "\0" in name:
            raise self.refuse(f"member {name!r} is not a plain relative path")
        if parts[0] != self.top:
            raise self.refuse(f"member {name!r} is not under {self.top}/ (the layout `package` writes)")
        if kind is None:
            raise self.refuse(f"member {name!r} is a device, fifo or other special file")
        if len(parts) == 1 and kind != "dir":
            raise self.refuse(f"member {name!r} should be the archive's top folder")
        if m.mode & 0o7000:
            raise self.refuse(f"member {name!r} has setuid, setgid or sticky bits")
        if "/".join(parts) in self.names:
            raise self.refuse(f"member {name!r} appears twice")
        self.names.add("/".join(parts))
        parent = _resolve(list(parts[:-1]), self.links, self.archive, name)
        if not self.inside(parent) and len(parts) > 1:
            raise self.refuse(f"member {name!r} points outside the destination (through a link)")
        where: Key = (*parent, parts[-1]) if len(parts) > 1 and parent is not None else tuple(parts)
        if kind == "file" and where in self.links:
            raise self.refuse(f"member {name!r} would be written through the link of an earlier member")
        if kind in ("dir", "file"):  # writing a file or a folder follows a link found at its own name
            where = _resolve(list(where), self.links, self.archive, name) or ()
            if not self.inside(where):
                raise self.refuse(f"member {name!r} points outside the destination (through a link)")
        for i in range(1, len(where)):
            if self.taken.get(where[:i]) in ("file", "hardlink"):
                raise self.refuse(f"member {name!r} is under a file")
        if where in self.taken and not (kind == "dir" and self.taken[where] == "dir"):
            raise self.refuse(f"member {name!r} replaces an earlier member")
        if kind == "symlink":
            target = m.linkname
            resolved = None if not target or target.startswith("/") else \
                _resolve([*where[:-1], *target.split("/")], self.links, self.archive, name)
            if not self.inside(resolved):
                raise self.refuse(f"link {name!r} -> {target!r} points outside the destination")
            self.links[where] = target
        elif kind == "hardlink":
            linked = _resolve(m.linkname.split("/"), self.links, self.archive, name)
            if linked is None or not self.inside(linked) or self.taken.get(linked) not in ("file", "hardlink"):
                raise self.refuse(f"hard link {name!r} -> {m.linkname!r} does not name an earlier file of the archive")
        self.taken[where] = kind
        self.members.append(Member(name=name, parts=tuple(parts), kind=kind, size=m.size, mode=m.mode,
                                   mtime=int(m.mtime), linkname=m.linkname))

    def finish(self) -> list[Member]:
        if not self.members:
            raise self.refuse("the archive is empty")
        for where, target in self.links.items():  # a later link must not turn an earlier one outward
            if not self.inside(_resolve([*where[:-1], *target.split("/")], self.links, self.archive, "/".join(where))):
                raise self.refuse(f"link {'/'.join(where)!r} -> {target!r} points outside the destination "
                                  f"through a later link")
        return self.members


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return clip(text, 200) if text else type(e).__name__


def check_archive(archive: Path, top: str) -> list[Member]:
    """Every member of ``archive``, checked (see the module docstring); nothing is written."""
    checker = _Checker(archive, top)
    try:
        with tarfile.open(archive, "r:*") as tar:
            while (m := tar.next()) is not None:  # one header at a time: limits hit before data is read
                checker.add(m)
    except PackageError:
        raise
    except _UNREADABLE as e:
        raise PackageError(f"{archive.name}: not a readable tar archive: {_first_line(e)}", hint=_HINT) from None
    return checker.finish()


def extract_checked(archive: Path, members: list[Member], root: Path) -> list[Path]:
    """Write the checked ``members`` under ``root``; returns the regular files written (relative to ``root``)."""
    files: list[Path] = []
    try:
        with tarfile.open(archive, "r:*") as tar:
            for expected in members:
                m = tar.next()
                if m is None or m.name != expected.name or _kind(m) != expected.kind:
                    raise _refuse(archive, "its members changed while it was extracted")
                rel = Path(*expected.parts)
                target = root / rel
                if expected.kind == "dir":
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if expected.kind == "symlink":
                    os.symlink(expected.linkname, target)
                elif expected.kind == "hardlink":
                    os.link(root.joinpath(*expected.linkname.split("/")), target, follow_symlinks=False)
                    files.append(rel)
                else:
                    src = tar.extractfile(m)
                    assert src is not None
                    with src, open(target, "xb") as out:  # "x": never through something already there
                        shutil.copyfileobj(src, out, 1 << 20)
                    os.chmod(target, 0o755 if expected.mode & 0o111 else 0o644)
                    os.utime(target, (expected.mtime, expected.mtime))
                    files.append(rel)
    except PackageError:
        raise
    except _UNREADABLE as e:
        raise PackageError(f"{archive.name}: cannot extract into {root}: {_first_line(e)}",
                           hint="check free space and permissions; nothing was kept") from None
    return files
