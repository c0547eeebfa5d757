"""The QAIRT SDK zip: checked before anything is written, unzipped safely; standard library only.

Used by ``qnn-release sdk fetch`` and, on its own, by the first stage of ``Dockerfile-2.40``
(``python qairt_zip.py fetch ...``), so that the image's SDK layer depends on the pins and this
file only, not on the rest of the toolkit.

Every member is refused when its name is absolute or has ``..``; a symbolic link is kept only when
it is relative and its target stays inside the tree (whether the QAIRT zip holds links is not
documented: a link that stays inside is harmless, one that leaves is an attack).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import shutil
import stat
import sys
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

MARKER = ".qnn-release-sdk.json"  # what was installed, written last: a tree without it is a leftover


class ZipRefused(Exception):
    """One line: the zip is not one to unpack."""


def _is_link(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def check(zf: zipfile.ZipFile, what: str) -> dict[str, str]:
    """Every member checked; returns {link name: target} for the links that stay inside."""
    links: dict[str, str] = {}
    for info in zf.infolist():
        name = info.filename
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
            raise ZipRefused(f"{what}: refused: member {name!r} has an absolute path")
        if ".." in name.split("/"):
            raise ZipRefused(f"{what}: refused: member {name!r} points outside the destination")
        if _is_link(info):
            target = zf.read(info).decode("utf-8", "replace")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
                raise ZipRefused(f"{what}: refused: link {name!r} -> {target!r} points outside the destination")
            links[name] = target
    for name in links:  # nothing may be written through a link of the same archive
        for other in zf.namelist():
            if other != name and other.startswith(name.rstrip("/") + "/"):
                raise ZipRefused(f"{what}: refused: member {other!r} is written through the link {name!r}")
    return links


def unzip(zip_path: Path, dest: Path, what: str) -> None:
    try:
        with zipfile.ZipFile(zip_path) as zf:
            links = check(zf, what)  # every member checked before anything is written
            for info in zf.infolist():
                target = dest / info.filename
                if info.filename in links:
                    continue
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "xb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                if (info.external_attr >> 16) & 0o111:  # zipfile drops permissions: keep the tools executable
                    target.chmod(0o755)
            for name, link_target in links.items():  # links last: nothing is written through them
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(link_target, dest / name.rstrip("/"))
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as e:
        raise ZipRefused(f"{what}: not a readable zip file: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                         ) from None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class PinnedZip:
    """The QAIRT zip as the matrix pins it: ``file`` of the Hub repo ``repo`` at ``revision``, its ``sha256``, and
    the SDK ``version`` it holds (``qairt/<version>``)."""

    repo: str
    revision: str
    file: str
    sha256: str
    version: str


def fetch(endpoint: str, pin: PinnedZip, dest: Path) -> Path:
    """Download ``pin.file`` of ``pin.repo`` at ``pin.revision`` from the Hub at ``endpoint``, check its sha256,
    unzip ``qairt/<version>`` into ``dest`` and write the marker: what the image's first stage runs (HF_TOKEN from
    the environment)."""
    repo, revision, file, sha256, version = pin.repo, pin.revision, pin.file, pin.sha256, pin.version
    url = f"{endpoint.rstrip('/')}/{repo}/resolve/{revision}/{file}"
    zip_path = dest / f".{file}.part"
    dest.mkdir(parents=True, exist_ok=True)
    for attempt in range(6):
        req = urllib.request.Request(url, headers={"User-Agent": "qnn-release-docker"})  # noqa: S310 - https
        if os.environ.get("HF_TOKEN"):  # to the Hub only: urllib copies ordinary headers to every redirect target
            req.add_unredirected_header("Authorization", f"Bearer {os.environ['HF_TOKEN']}")
        try:
            with urllib.request.urlopen(req, timeout=60) as r, \
                    open(zip_path, "wb") as out:  # noqa: S310 - the Hub's https URL
                shutil.copyfileobj(r, out, 1 << 20)
            break
        except (urllib.error.URLError, OSError) as e:
            if attempt == 5:
                raise ZipRefused(f"{repo}@{revision}: {file}: download failed: {e}") from None
            time.sleep(min(2 ** attempt, 30))
    got = sha256_of(zip_path)
    if got != sha256:
        zip_path.unlink()
        raise ZipRefused(f"{file}: sha256 {got} does not match the pin {sha256}")
    unpacked = dest / f".{version}.unzipped"
    shutil.rmtree(unpacked, ignore_errors=True)
    unzip(zip_path, unpacked, file)
    zip_path.unlink()
    src = unpacked / "qairt" / version
    if not (src / "bin").is_dir():
        raise ZipRefused(f"{file}: no qairt/{version}/bin inside")
    info = {"version": version, "hf_repo": repo, "file": file, "revision": revision, "sha256": got}
    (src / MARKER).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    root = dest / "qairt" / version
    root.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, root)
    shutil.rmtree(unpacked, ignore_errors=True)
    return root


def main(argv: list[str]) -> int:
    if len(argv) != 8 or argv[0] != "fetch":
        print("usage: qairt_zip.py fetch ENDPOINT REPO REVISION FILE SHA256 VERSION DEST", file=sys.stderr)
        return 2
    try:
        endpoint, repo, revision, file, sha256, version = argv[1:7]
        pin = PinnedZip(repo=repo, revision=revision, file=file, sha256=sha256, version=version)
        print(fetch(endpoint, pin, Path(argv[7])))
    except ZipRefused as e:
        print(f"qairt_zip: error: {e}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
