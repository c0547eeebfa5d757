"""``qnn-release sdk``: fetch the QAIRT SDK zip from Hugging Face (checked), print its env, look for updates.

The zip is downloaded with huggingface_hub at the matrix's pinned revision and checked against
the matrix's sha256; before a digest is recorded, against the sha256 the Hub itself reports for
that revision (``X-Linked-Etag`` of an LFS file). huggingface_hub only checks sizes, so the check
is ours, and a mismatch leaves nothing behind. Unzipping refuses absolute paths, '..' and links.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

from .errors import SourceError, UsageError
from .matrix import LoadedMatrix, QairtSdk
from .report import write_json
from .sources import sha256_file

MARKER = ".qnn-release-sdk.json"
ZIP_NAME = re.compile(r"^v(\d+\.\d+\.\d+\.\d+)\.zip$")


def pick(loaded: LoadedMatrix, version: str | None) -> QairtSdk:
    entries = loaded.matrix.sdk.qairt
    if version is None:
        return entries[0]
    for e in entries:
        if e.version == version.lstrip("v"):
            return e
    raise UsageError(f"--version {version}: not in the matrix's sdk.qairt",
                     hint=f"versions: {', '.join(e.version for e in entries)}")


def env_lines(root: Path) -> list[str]:
    """``KEY=value`` lines for ``$GITHUB_ENV`` (or ``export`` in a shell)."""
    return [f"QNN_SDK_ROOT={root}", f"LD_LIBRARY_PATH={root / 'lib' / 'x86_64-linux-clang'}"]


def sdk_env(loaded: LoadedMatrix, version: str | None, dest: Path) -> list[str]:
    entry = pick(loaded, version)
    root = dest / "qairt" / entry.version
    if not (root / "bin" / "x86_64-linux-clang").is_dir():
        raise UsageError(f"{root}: no QAIRT SDK {entry.version} here",
                         hint=f"run `qnn-release sdk fetch --version {entry.version} --dest {dest}`")
    return env_lines(root)


def _check_member(info: zipfile.ZipInfo, zip_name: str) -> None:
    name = info.filename
    mode = info.external_attr >> 16
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
        raise SourceError(f"{zip_name}: refused: member {name!r} has an absolute path")
    if ".." in Path(name).parts:
        raise SourceError(f"{zip_name}: refused: member {name!r} points outside the destination")
    if stat.S_ISLNK(mode):
        raise SourceError(f"{zip_name}: refused: member {name!r} is a symbolic link")


def safe_unzip(zip_path: Path, dest: Path) -> None:
    with zipfile.ZipFile(zip_path) as zf:
        infos = zf.infolist()
        for info in infos:  # every member checked before anything is written
            _check_member(info, zip_path.name)
        for info in infos:
            target = dest / info.filename
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            if mode & 0o111:  # zipfile drops permissions: keep the tools executable
                target.chmod(0o755)


def fetch_sdk(loaded: LoadedMatrix, version: str | None, dest: Path) -> tuple[Path, dict]:
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError

    entry = pick(loaded, version)
    root = dest / "qairt" / entry.version
    if (root / MARKER).is_file():
        return root, json.loads((root / MARKER).read_text())
    revision = entry.revision or "main"
    try:
        meta = get_hf_file_metadata(hf_hub_url(entry.hf_repo, entry.file, revision=revision))
    except (EntryNotFoundError, RepositoryNotFoundError) as e:
        raise SourceError(f"{entry.hf_repo}@{revision}: {entry.file}: {type(e).__name__}",
                          hint="check sdk.qairt[].hf_repo, file and revision in the matrix") from None
    except (HfHubHTTPError, OSError) as e:
        raise SourceError(f"{entry.hf_repo}: {str(e).splitlines()[0][:200]}") from None
    hub_sha = (meta.etag or "").strip('"')
    expected = entry.sha256 or (hub_sha if re.fullmatch(r"[0-9a-f]{64}", hub_sha) else None)
    if expected is None:
        raise SourceError(f"{entry.file}: no sha256 in the matrix and the Hub reports none",
                          hint="set sdk.qairt[].sha256 in matrix/models.yaml")
    commit = meta.commit_hash or revision
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".qairt-fetch.", dir=dest))
    try:
        try:
            zip_path = Path(hf_hub_download(entry.hf_repo, entry.file, revision=commit, cache_dir=str(tmp / "hf")))
        except (HfHubHTTPError, OSError) as e:
            raise SourceError(f"{entry.hf_repo}: download of {entry.file} failed: {str(e).splitlines()[0][:200]}",
                              hint="run again; nothing was kept") from None
        got = sha256_file(zip_path)
        if got != expected:
            raise SourceError(f"{entry.file}: sha256 {got} does not match {expected} "
                              f"({'the matrix' if entry.sha256 else 'the Hub'}); nothing was kept",
                              hint="a corrupt download or a changed file: run again, or check the pin")
        try:
            safe_unzip(zip_path, tmp / "unzipped")
        except zipfile.BadZipFile as e:
            raise SourceError(f"{entry.file}: not a zip file: {e}") from None
        src = tmp / "unzipped" / "qairt" / entry.version
        if not (src / "bin").is_dir():
            raise SourceError(f"{entry.file}: no qairt/{entry.version}/bin inside",
                              hint="the zip does not hold the QAIRT layout this version names")
        info = {"version": entry.version, "hf_repo": entry.hf_repo, "file": entry.file,
                "revision": commit, "sha256": got}
        write_json(src / MARKER, info)
        root.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, root)
        return root, info
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record_pins(loaded: LoadedMatrix, version: str, revision: str, sha256: str) -> bool:
    """Write revision and sha256 into the matrix entry of ``version`` where they are null (text edit: comments stay)."""
    from .yaml_lines import load_with_lines

    data, lines = load_with_lines(loaded.path, "matrix file")
    idx = next(i for i, e in enumerate(data["sdk"]["qairt"]) if str(e.get("version")) == version)
    text = loaded.path.read_text().splitlines(keepends=True)
    changed = False
    for key, value in (("revision", revision), ("sha256", sha256)):
        if data["sdk"]["qairt"][idx].get(key) is not None:
            continue
        n = lines[("sdk", "qairt", idx, key)] - 1
        new = re.sub(rf"^(\s*(?:- )?{key}:\s*)null\b.*$", rf"\g<1>{value}", text[n].rstrip("\n"))
        if new != text[n].rstrip("\n"):
            text[n] = new + "\n"
            changed = True
    if changed:
        from .report import write_atomic

        write_atomic(loaded.path, "".join(text))
    return changed
