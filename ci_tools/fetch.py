"""The download client apps and build scripts use: the right archive for a device's chip.

``fetch_model("owner/name@v1.0.0", "silero-vad", soc="sm8750-ac", dest=Path("models"))`` reads the
release's ``manifest.json``, resolves the chip (aliases, ``adb shell getprop ro.soc.model``), downloads
the archive and the ``qnn-libs`` of the same SDK version (resuming, checking sha256) and extracts
them safely into ``dest``. No build for the chip raises ``NoBuildForChip`` (exit code 3): use the CPU model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import requests

from .archive import safe_extract
from .errors import NoBuildForChip, PublishError, QnnReleaseError, UsageError
from .github import GitHub
from .socs import UnknownSocError, load_catalog

PRECISION_ORDER = ("fp16", "w8a16", "int8")


@dataclass
class FetchResult:
    model: str
    soc: str
    precision: str
    sdk_version: str
    archive: str
    path: str
    qnn_libs: str | None
    qnn_libs_path: str | None
    files: list[str]

    def as_dict(self) -> dict:
        return asdict(self)


def soc_from_adb(serial: str | None = None) -> str:
    adb = shutil.which("adb")
    if not adb:
        raise UsageError("--adb: no adb on PATH", hint="install Android platform-tools, or pass --soc")
    argv = [adb, *(["-s", serial] if serial else []), "shell", "getprop", "ro.soc.model"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    value = r.stdout.strip()
    if r.returncode == 0 and not value:  # no ro.soc.model (Android < 12): the kernel's soc_id
        soc_id = subprocess.run([*argv[:-2], "cat", "/sys/devices/soc0/soc_id"], capture_output=True, text=True,
                                timeout=30).stdout.strip()
        value = f"soc_id:{soc_id}" if soc_id.isdigit() else ""
    if r.returncode != 0 or not value:
        raise UsageError(f"adb getprop ro.soc.model failed: {(r.stderr or 'no output').strip()[:200]}",
                         hint="is the device connected and authorised (`adb devices`)?")
    return value


def _split(release: str) -> tuple[str, str]:
    repo, sep, tag = release.partition("@")
    if not sep or not tag or repo.count("/") != 1:
        raise UsageError(f"--release {release!r}: expected OWNER/NAME@TAG")
    return repo, tag


class _Downloader:
    def __init__(self, gh: GitHub, release: dict, token: str | None):
        self.gh, self.token = gh, token
        # the release object may list only some assets: page through all of them
        self.assets = {a["name"]: a for a in gh.assets(release["id"])}

    def url(self, name: str) -> tuple[str, dict]:
        a = self.assets.get(name)
        if a is None:
            raise PublishError(f"the release has no asset {name}")
        if self.token or not a.get("browser_download_url"):  # private repos and drafts: the API URL
            return a["url"], {"Accept": "application/octet-stream"}
        return a["browser_download_url"], {}

    def get(self, name: str, dest: Path, sha256: str | None, attempts: int = 5) -> Path:
        """Download with resume (Range) across dropped connections; check sha256; never keep a bad file."""
        part = dest.with_name(dest.name + ".part")
        for attempt in range(attempts):
            have = part.stat().st_size if part.exists() else 0
            url, headers = self.url(name)
            if have:
                headers = {**headers, "Range": f"bytes={have}-"}
            try:
                with self.gh.call("GET", url, f"download {name}", expect=(200, 206, 416), headers=headers,
                                  stream=True) as r:
                    if r.status_code != 416:  # 416: we already have every byte
                        mode = "ab" if r.status_code == 206 else "wb"
                        with open(part, mode) as f:
                            # small reads: what arrived before a dropped connection is kept for the resume
                            for chunk in r.iter_content(64 * 1024):
                                f.write(chunk)
            except (requests.RequestException, OSError):
                self.gh.sleep(min(2.0 ** attempt, 10.0))
                continue
            if sha256 is None or _sha256(part) == sha256:
                os.replace(part, dest)
                return dest
            part.unlink()  # corrupt: start over
        part.unlink(missing_ok=True)
        raise PublishError(f"download of {name} failed or did not match its sha256 after {attempts} attempts",
                           hint="run the same command again; it resumes")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fetch_model(release: str, model: str, *, dest: Path, soc: str | None = None, adb: str | bool | None = None,
                precision: str | None = None, token: str | None = None, api_url: str | None = None,
                sleep=None) -> FetchResult:
    repo, tag = _split(release)
    if soc is None and adb is None:
        raise UsageError("give --soc CHIP or --adb [SERIAL]")
    spelling = soc if soc is not None else soc_from_adb(adb if isinstance(adb, str) else None)
    try:
        chip = load_catalog().resolve(spelling)
    except UnknownSocError:
        raise NoBuildForChip(f"no NPU build of {model} for {spelling.strip()}: use the CPU model",
                             hint="this chip is not in qnn-release's catalog") from None
    gh = GitHub(repo, token=token, api_url=api_url, **({"sleep": sleep} if sleep else {}))
    rel = gh.release_by_tag(tag)
    if rel is None:
        raise PublishError(f"{repo}: no published release {tag}", hint="check the tag (drafts are not visible)")
    dl = _Downloader(gh, rel, token)
    dest = Path(dest)
    downloads = dest / ".downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    manifest = json.loads(dl.get("manifest.json", downloads / "manifest.json", None).read_text())
    candidates = [a for a in manifest.get("assets", []) if a.get("kind") == "model" and a.get("model") == model
                  and (a.get("soc") == chip.name or chip.name.lower() in a.get("soc_aliases", []))]
    if precision:
        candidates = [a for a in candidates if a["precision"] == precision]
    if not candidates:
        known = sorted({a.get("model") for a in manifest.get("assets", []) if a.get("kind") == "model"})
        if model not in known:
            raise UsageError(f"{release}: no model {model!r} in this release", hint=f"models: {', '.join(known)}")
        raise NoBuildForChip(f"no NPU build of {model} for {chip.name}"
                             + (f" ({precision})" if precision else "") + ": use the CPU model")
    asset = min(candidates, key=lambda a: PRECISION_ORDER.index(a["precision"]))
    archive = dl.get(asset["name"], downloads / asset["name"], asset["sha256"])
    files = safe_extract(archive, dest)
    top = dest / asset["name"].removesuffix(".tar.bz2")
    libs = next((a for a in manifest["assets"] if a.get("kind") == "qnn-libs"
                 and a.get("sdk_version") == asset["sdk_version"]), None)
    libs_path = None
    if libs is not None:
        libs_archive = dl.get(libs["name"], downloads / libs["name"], libs["sha256"])
        files += safe_extract(libs_archive, dest)
        libs_path = str(dest / libs["name"].removesuffix(".tar.bz2"))
    return FetchResult(model=model, soc=chip.name, precision=asset["precision"], sdk_version=asset["sdk_version"],
                       archive=asset["name"], path=str(top), qnn_libs=libs["name"] if libs else None,
                       qnn_libs_path=libs_path, files=sorted(str(f) for f in files))


__all__ = ["FetchResult", "NoBuildForChip", "QnnReleaseError", "fetch_model", "soc_from_adb"]
