"""``qnn-release sdk``: fetch the QAIRT SDK zip from Hugging Face (checked), print its env, record its pins.

The zip is fetched at the matrix's pinned revision and checked against the matrix's sha256; before a
digest is recorded, against the sha256 the Hub itself reports for that revision (``X-Linked-Etag``
of an LFS file). Transient Hub failures are retried and a dropped download resumes (``download.py``).
Unzipping refuses absolute paths, '..' and links, and a failed fetch leaves ``DEST`` as it was.

What was installed (repo, file, commit, sha256) is recorded in ``qairt/<version>/.qnn-release-sdk.json``,
written last: a tree without it is a leftover, and a tree whose record differs from the matrix's
pins is fetched again.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError, SourceError, UsageError
from ..matrix.schema import LoadedMatrix, QairtSdk
from ..qairt_zip import MARKER
from ..util.files import replace_dir, staging_dir, write_json

ZIP_NAME = re.compile(r"^v(\d+\.\d+\.\d+\.\d+)\.zip$")
NDK_VARS = ("ANDROID_NDK_ROOT", "ANDROID_NDK_HOME", "ANDROID_NDK_LATEST_HOME")


def pick(loaded: LoadedMatrix, version: str | None) -> QairtSdk:
    entries = loaded.matrix.sdk.qairt
    if version is None:
        return entries[0]
    for e in entries:
        if e.version == version.lstrip("v"):
            return e
    raise UsageError(f"--version {version}: not in the matrix's sdk.qairt",
                     hint=f"versions: {', '.join(e.version for e in entries)}")


def sdk_root(dest: Path, version: str) -> Path:
    """Absolute: the lines go to ``$GITHUB_ENV`` and are read from other working directories."""
    return (Path(dest).expanduser() / "qairt" / version).resolve()


# -- environment ----------------------------------------------------------------------------------

def _prepend(dirs: list[str], existing: str | None) -> str:
    """``dirs`` before ``existing``, without repeating them or adding an empty entry (the current directory)."""
    rest = [p for p in (existing or "").split(os.pathsep) if p and p not in dirs]
    return os.pathsep.join([*dirs, *rest])


def env_lines(root: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """What the SDK's ``bin/envsetup.sh`` sets, as literal ``NAME=value`` lines for ``$GITHUB_ENV``.

    ``$GITHUB_ENV`` does not expand ``$PATH``: the prepended values are computed from ``environ``
    (the current environment) now. ``qnn-model-lib-generator`` needs ``ndk-build`` for
    aarch64-android: when an NDK is named, it goes on ``PATH`` like envsetup.sh puts it there.
    """
    environ = os.environ if environ is None else environ
    root = Path(root).resolve()
    ndk_var = next((v for v in NDK_VARS if environ.get(v)), None)
    path_dirs = [str(root / "bin" / "x86_64-linux-clang")]
    lines = [f"QNN_SDK_ROOT={root}"]
    if ndk_var:
        ndk = str(Path(environ[ndk_var]).expanduser().resolve())
        path_dirs.append(ndk)
        if ndk_var != "ANDROID_NDK_ROOT":
            lines.append(f"ANDROID_NDK_ROOT={ndk}")
    lines += [f"PYTHONPATH={_prepend([str(root / 'lib' / 'python')], environ.get('PYTHONPATH'))}",
              f"PATH={_prepend(path_dirs, environ.get('PATH'))}",
              f"LD_LIBRARY_PATH={_prepend([str(root / 'lib' / 'x86_64-linux-clang')], environ.get('LD_LIBRARY_PATH'))}"]
    return lines


def read_marker(root: Path) -> dict | None:
    try:
        info = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def differences(info: dict, entry: QairtSdk, revision: str | None = None) -> list[str]:
    """How an installed tree's record differs from the pins: empty when it is what the matrix names."""
    wanted = {"hf_repo": entry.hf_repo, "file": entry.file, "revision": revision or entry.revision,
              "sha256": entry.sha256}
    def short(k: str, v: object) -> str:
        return str(v)[:12] if k in ("revision", "sha256") and v else str(v)

    return [f"{k} {short(k, info.get(k))} (the matrix: {short(k, v)})" for k, v in wanted.items()
            if v is not None and info.get(k) != v]


def sdk_env(loaded: LoadedMatrix, version: str | None, dest: Path) -> list[str]:
    entry = pick(loaded, version)
    root = sdk_root(dest, entry.version)
    fetch = f"run `qnn-release sdk fetch --version {entry.version} --dest {dest}`"
    info = read_marker(root)
    if info is None:
        raise UsageError(f"{root}: no QAIRT SDK {entry.version} fetched here", hint=fetch)
    diff = differences(info, entry)
    if diff:
        raise SourceError(f"{root}: the installed SDK differs from the matrix's pins: {'; '.join(diff)}", hint=fetch)
    return env_lines(root)


# -- unzip ----------------------------------------------------------------------------------------

def safe_unzip(zip_path: Path, dest: Path, what: str) -> None:
    """Checked before anything is written (qairt_zip: absolute paths, '..', links leaving the tree)."""
    from ..qairt_zip import ZipRefused, unzip

    try:
        unzip(zip_path, dest, what)
    except ZipRefused as e:
        raise SourceError(str(e), hint="the file on the Hub is damaged or not the SDK: check the pin") from None
    except OSError as e:
        raise SourceError(f"{what}: cannot unzip into {dest}: {e.strerror or e}",
                          hint="check free space and permissions; nothing was kept") from None


# -- fetch ----------------------------------------------------------------------------------------

def fetch_sdk(loaded: LoadedMatrix, version: str | None, dest: Path, *, revision: str | None = None,
              sleep=time.sleep, cache: Path | None = None) -> tuple[Path, dict, bool]:
    """(root, what is installed, whether it was fetched now). An installed tree matching the pins is kept."""
    from ..sources import download, hub_file

    entry = pick(loaded, version)
    root = sdk_root(dest, entry.version)
    installed = read_marker(root)
    if installed is not None and entry.sha256 and not differences(installed, entry, revision):
        return root, installed, False  # the pins name exactly this tree: no need to ask the Hub
    rev = revision or entry.revision or "main"
    hf = hub_file.file_metadata(entry.hf_repo, entry.file, rev, sleep=sleep)
    if entry.sha256 and hf.sha256 and hf.sha256 != entry.sha256:
        raise SourceError(f"{entry.hf_repo}@{rev}: {entry.file} has sha256 {hf.sha256}, not {entry.sha256} "
                          f"(the matrix); nothing was fetched",
                          hint="the file changed at this revision, or the pin is wrong: check sdk.qairt[] in "
                               f"{loaded.path}")
    expected = entry.sha256 or hf.sha256
    if expected is None:
        raise SourceError(f"{entry.hf_repo}@{rev}: {entry.file}: no sha256 in the matrix and the Hub reports none",
                          hint="set sdk.qairt[].sha256 in matrix/models.yaml")
    commit = hf.commit or rev
    pinned_commit = commit if (revision or entry.revision) else None  # unpinned: any commit with this content
    if installed is not None and not differences(installed, entry, pinned_commit) \
            and installed.get("sha256") == expected:
        return root, installed, False
    cache_dir = download.downloads_dir(cache)
    zip_path = download.fetch_verified(
        cache_dir, expected, hub_file.opener(hf), what=f"{entry.hf_repo}@{commit[:12]}: {entry.file}",
        pinned_by="the matrix" if entry.sha256 else "the Hub", sleep=sleep,
        hint=f"check HF_ENDPOINT ({hub_file.endpoint()}), the network and HF_TOKEN; "
             f"run the same command again: it resumes")
    info = {"version": entry.version, "hf_repo": entry.hf_repo, "file": entry.file, "revision": commit,
            "sha256": expected}
    try:
        _install(zip_path, entry, info, root)
    except OSError as e:
        raise UsageError(f"--dest {root.parent.parent}: cannot write there: {e.strerror or e}",
                         hint="check the path and its permissions; nothing was changed") from None
    finally:
        download.discard(zip_path)  # unzipped or refused: a verified zip is not kept twice
    return root, info, True


def _install(zip_path: Path, entry: QairtSdk, info: dict, root: Path) -> None:
    """Unzip into a staging folder beside ``root``, record what it is, then swap it in."""
    with staging_dir(root.parent.parent, ".qairt-fetch.") as tmp:
        safe_unzip(zip_path, tmp / "unzipped", entry.file)
        src = tmp / "unzipped" / "qairt" / entry.version
        if not (src / "bin").is_dir():
            raise SourceError(f"{entry.file}: no qairt/{entry.version}/bin inside",
                              hint="the zip does not hold the QAIRT layout this version names")
        write_json(src / MARKER, info)  # last: a tree without it is a leftover
        root.parent.mkdir(exist_ok=True)
        replace_dir(src, root)  # a leftover or an outdated tree is swapped out only now


def record_pins(loaded: LoadedMatrix, version: str, revision: str, sha256: str) -> bool:
    """Write revision and sha256 into the matrix entry of ``version``; True when the file changed."""
    from ..util.files import write_atomic
    from ..util.yaml_edit import set_scalars

    if not re.fullmatch(r"[0-9a-f]{40}", revision or ""):
        raise SourceError(f"cannot record revision {revision!r}: the Hub named no commit for it",
                          hint="pass --revision with a commit sha")
    text = loaded.path.read_text(encoding="utf-8")
    idx = next((i for i, e in enumerate(loaded.matrix.sdk.qairt) if e.version == version), None)
    if idx is None:
        raise ConfigError(f"{loaded.path}: no sdk.qairt entry for {version}")
    new = set_scalars(loaded.path, text, ("sdk", "qairt", idx), {"revision": revision, "sha256": sha256})
    if new == text:
        return False
    write_atomic(loaded.path, new)
    return True
