"""The download client apps and build scripts use: the right archive for a device's chip.

``fetch_model("owner/name@v1.0.0", "silero-vad", soc="sm8750-ac", dest=Path("models"))`` reads the
release's ``manifest.json``, resolves the chip (aliases; ``soc=AdbPhone()``: ``adb shell getprop ro.soc.model``),
downloads the archive and the ``qnn-libs`` of the same SDK version (retrying, resuming, checking sha256) and
extracts them into ``dest`` once both have passed every check (``extract.py``).

Failures, each one line with its exit code: no build for the chip ``NoBuildForChip`` (3: use the
CPU model); a download that stopped making progress, GitHub unreachable or a sha256 mismatch
``SourceError`` (4); a malformed manifest or a refused archive ``PackageError`` (9); no such
release or asset, or a request GitHub refused ``PublishError`` (10); a model the release does not
have ``UsageError`` (2). A failed or refused fetch leaves ``dest`` as it was: partial downloads
wait in ``<cache>/downloads`` (``QNN_RELEASE_CACHE``) for the next run to resume them.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ..catalog.socs import UnknownSocError, load_catalog
from ..errors import (
    NoBuildForChip,
    PublishError,
    QnnReleaseError,
    RuntimeTooOld,
    SourceError,
    UsageError,
)
from ..sources.download import discard, downloads_dir, fetch_taken, private_path
from ..sources.store import sha256_file
from ..util import cmd
from ..util.files import replace_dir, staging_dir
from ..util.precision import PRECISIONS
from ..util.text import clip
from .contract import MAX_MANIFEST_BYTES, check_manifest, parse_manifest, refuse
from .extract import check_archive, extract_checked
from .github import Connection, GitHub
from .runtime import loads_on, runtime_needed

PRECISION_ORDER = PRECISIONS


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
    # binary: a context binary for the chip; jit: the twin (prepared float graphs), for a chip the catalog knows to
    # have an HTP but the release has no binary for (the QNN EP compiles it at session creation); cpu: the twin, for
    # a chip without a known HTP (run it on CPU)
    kind: str = "binary"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class AdbPhone:
    """The phone on adb (``serial``; None: the only one), as ``fetch_model``'s ``soc``: its chip is what it says."""

    serial: str | None = None


@dataclass(frozen=True, kw_only=True)
class AppNeeds:
    """What the app takes: the ``precision`` it wants (None: the first of fp16, w8a16, ... the chip has) and the QNN
    ``runtime`` it ships (major.minor.patch; None: any)."""

    precision: str | None = None
    runtime: str | None = None


def soc_from_adb(serial: str | None = None) -> str:
    adb = shutil.which("adb")
    if not adb:
        raise UsageError("--adb: no adb on PATH", hint="install Android platform-tools, or pass --soc")
    argv = [adb, *(["-s", serial] if serial else []), "shell", "getprop", "ro.soc.model"]
    r = cmd.run(argv, capture_output=True, text=True, timeout=30)
    value = r.stdout.strip()
    if r.returncode == 0 and not value:  # no ro.soc.model (Android < 12): the kernel's soc_id
        soc_id = cmd.run([*argv[:-2], "cat", "/sys/devices/soc0/soc_id"], capture_output=True, text=True,
                                timeout=30).stdout.strip()
        value = f"soc_id:{soc_id}" if soc_id.isdigit() else ""
    if r.returncode != 0 or not value:
        raise UsageError(f"adb getprop ro.soc.model failed: {clip(r.stderr or 'no output', 200)}",
                         hint="is the device connected and authorised (`adb devices`)?")
    return value


def _split(release: str) -> tuple[str, str]:
    repo, sep, tag = release.partition("@")
    if not sep or not tag or repo.count("/") != 1:
        raise UsageError(f"--release {release!r}: expected OWNER/NAME@TAG")
    return repo, tag


def _aliases(asset: dict) -> list[str]:
    aliases = asset.get("soc_aliases")
    return [a for a in aliases if isinstance(a, str)] if isinstance(aliases, list) else []


def top_folder(asset: dict) -> str:
    """The one folder ``package`` puts an archive's members in: the asset's name without .tar.bz2."""
    return asset["name"].removesuffix(".tar.bz2")


class _Downloader:
    def __init__(self, gh: GitHub, release: dict, token: str | None, cache: Path, sleep):
        self.gh, self.token, self.cache, self.sleep = gh, token, cache, sleep
        self.tag = release.get("tag_name", "")
        self.where = f"{gh.repo}@{self.tag}"
        # the release object may list only some assets: page through all of them
        self.assets: dict[str | None, dict[str, dict]] = {None: {a["name"]: a for a in gh.assets(release["id"])}}

    def _in(self, release: str | None) -> dict[str, dict]:
        """The assets of the tag's release (None) or of one of its linked parts, looked up once."""
        if release not in self.assets:
            rel = self.gh.release_by_tag(release) if release is not None else None
            if rel is None:
                raise PublishError(f"{self.where}: the manifest puts assets in release {release}, which is not "
                                   "published", hint="publish the release again: it resumes, parts first")
            self.assets[release] = {a["name"]: a for a in self.gh.assets(rel["id"])}
        return self.assets[release]

    def url(self, name: str, release: str | None = None) -> tuple[str, dict]:
        a = self._in(release).get(name)
        if a is None:
            raise PublishError(f"{self.gh.repo}@{release or self.tag}: the release has no asset {name}",
                               hint="the manifest names an asset that was not uploaded: publish it again")
        if self.token or not a.get("browser_download_url"):  # private repos and drafts: the API URL
            return a["url"], {"Accept": "application/octet-stream"}
        return a["browser_download_url"], {}

    def manifest(self) -> dict:
        url, headers = self.url("manifest.json")
        listed = self._in(None)["manifest.json"].get("size")
        if isinstance(listed, int) and listed > MAX_MANIFEST_BYTES:  # GitHub says its size: not downloaded at all
            raise refuse("json", f"{listed:,} bytes (at most {MAX_MANIFEST_BYTES:,})")
        r = self.gh.call("GET", url, "download manifest.json", headers=headers, stream=True)  # retried whole
        data = bytearray()
        for chunk in r.iter_content(1 << 20):  # never more than the contract's bound, whatever the listing said
            data += chunk
            if len(data) > MAX_MANIFEST_BYTES:
                raise refuse("json", f"more than {MAX_MANIFEST_BYTES:,} bytes")
        manifest = parse_manifest(bytes(data))
        check_manifest(manifest, self.tag)
        return manifest  # type: ignore[return-value]

    def _file(self, name: str, sha256: str, release: str | None, size: int) -> Path:
        def open_from(offset: int):
            url, headers = self.url(name, release)
            if offset:
                headers = {**headers, "Range": f"bytes={offset}-"}
            return self.gh.call("GET", url, f"download {name}", expect=(200, 206, 416), headers=headers,
                                stream=True)

        return fetch_taken(self.cache, sha256, open_from, what=f"{self.gh.repo}@{release or self.tag}: {name}",
                           pinned_by="the manifest", sleep=self.sleep, limit=size)

    def get(self, asset: dict) -> Path:
        """The asset, whole and checked against the manifest's sha256, in the download cache: from the release
        that holds it, and joined from its pieces (each checked first) when it was uploaded in pieces."""
        release = asset.get("release")
        if not asset.get("pieces"):
            return self._file(asset["name"], asset["sha256"], release, asset["size"])
        pieces: list[Path] = []
        try:
            for p in asset["pieces"]:
                pieces.append(self._file(p["name"], p["sha256"], release, p["size"]))
        except BaseException:
            for piece in pieces:  # this run's own checked copies: nobody else would ever use them
                discard(piece)
            raise
        done = private_path(self.cache, asset["sha256"])  # this run's own: no other fetch touches it
        joined = done.with_name(done.name + ".joining")
        with open(joined, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        got = sha256_file(joined)
        if got != asset["sha256"]:
            joined.unlink(missing_ok=True)
            for piece in pieces:  # this run's own copies: kept by nobody
                discard(piece)
            raise SourceError(f"{self.where}: {asset['name']}: its {len(pieces)} pieces join to sha256 {got[:16]}..., "
                              f"not the manifest's {asset['sha256'][:16]}...; nothing was kept",
                              hint="every piece matched its own sha256: the release was not made by qnn-release")
        os.replace(joined, done)
        for piece in pieces:
            discard(piece)
        return done


def needs(asset: dict) -> str | None:
    """The oldest QNN runtime that loads an asset's binaries: the manifest's ``qnn_runtime``, else its QNN's."""
    return asset.get("qnn_runtime") or runtime_needed(asset.get("sdk_version"))


def _check_runtime(release: str, model: str, soc: str, asset: dict, runtime: str) -> None:
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", runtime or ""):
        raise UsageError(f"--qnn-runtime {runtime!r}: expected the app's QNN runtime version, as 2.50.40")
    need = needs(asset)
    if not loads_on(need, runtime):
        raise RuntimeTooOld(f"{release}: {model} for {soc} needs QNN runtime {need} or newer; the app ships {runtime}",
                            hint=f"ship QNN runtime {need} or newer "
                            f"({asset.get('qnn_libs') or 'qnn-libs of ' + str(need)}), fetch the newest earlier "
                            "release this runtime loads (--look-back), or use the CPU model")


def loadable_release(release: str, model: str, soc: str, runtime: str, precision: str | None = None,
                     via: Connection | None = None) -> str | None:
    """The newest published release of the repository, not newer than ``release``'s tag, whose binary of ``model``
    for ``soc`` the app's QNN ``runtime`` loads: its OWNER/NAME@TAG, or None. Each release's manifest is read: by
    version where every tag is a plain version, else in GitHub's order (newest first); drafts and linked parts
    never. qnn-fetch.sh and the Java installer apply the same rule."""
    via = via or Connection()
    repo, tag = _split(release)
    chip = load_catalog().resolve(soc)
    gh = via.client(repo, give_up=SourceError)
    mine = _plain_version(tag)
    releases = [r for r in gh.paginate(f"/repos/{repo}/releases") if not r.get("draft")  # newest first
                and r.get("tag_name") != tag and not re.search(r"-part\d+$", r.get("tag_name", ""))]
    if mine is not None and all(_plain_version(r.get("tag_name", "")) for r in releases):  # every tag a version
        releases.sort(key=lambda r: _plain_version(r["tag_name"]) or (), reverse=True)
    for rel in releases:
        v = _plain_version(rel.get("tag_name", ""))
        if mine is not None and v is not None and v > mine:  # never a release newer than the one asked for
            continue
        try:
            assets = check_manifest(_Downloader(gh, rel, via.token, downloads_dir(None), gh.sleep).manifest(),
                                      rel.get("tag_name"))
        except QnnReleaseError:
            continue  # no manifest (not a qnn-release release), or one this client refuses: not a candidate
        fits = [a for a in assets if a.get("kind") == "model" and a.get("model") == model
                and (a.get("soc") == chip.name or chip.name.lower() in _aliases(a))
                and (precision is None or a.get("precision") == precision) and loads_on(needs(a), runtime)]
        if fits:
            return f"{repo}@{rel['tag_name']}"
    return None


def _plain_version(tag: str) -> tuple[int, ...] | None:
    """A tag that is a plain version (v1.2.0, 2.0): its numbers, as every client reads it for --look-back (a
    pre-release or any other tag is not one: the releases then go in GitHub's order)."""
    m = re.fullmatch(r"v?(\d{1,9}(?:\.\d{1,9})*)", tag or "")
    if m is None:
        return None
    parts = [int(x) for x in m[1].split(".")]
    return tuple(parts + [0] * (8 - len(parts)))


def fetch_model(release: str, model: str, *, dest: Path, soc: str | AdbPhone | None = None,
                via: Connection | None = None, needs: AppNeeds | None = None) -> FetchResult:
    """``soc``: the chip's spelling, or an ``AdbPhone`` asked for it. ``needs``: the precision the app wants, and the
    QNN runtime it ships: a binary that needs a newer one is refused (``RuntimeTooOld``, exit 12) before anything is
    downloaded."""
    precision, runtime = (needs or AppNeeds()).precision, (needs or AppNeeds()).runtime
    via = via or Connection()
    repo, tag = _split(release)
    if soc is None:
        raise UsageError("give --soc CHIP or --adb [SERIAL]")
    spelling = soc_from_adb(soc.serial) if isinstance(soc, AdbPhone) else soc
    try:
        chip = load_catalog().resolve(spelling)
    except UnknownSocError:
        chip = None  # not in the catalog: no binary, but the release's twin runs on its CPU
    gh = via.client(repo, give_up=SourceError)
    rel = gh.release_by_tag(tag)
    if rel is None:
        raise PublishError(f"{repo}: no published release {tag}", hint="check the tag (drafts are not visible)")
    dl = _Downloader(gh, rel, via.token, downloads_dir(None), gh.sleep)
    manifest = dl.manifest()
    assets = check_manifest(manifest, tag)
    candidates = [a for a in assets if chip is not None and a.get("kind") == "model" and a.get("model") == model
                  and (a.get("soc") == chip.name or chip.name.lower() in _aliases(a))]
    if precision:
        candidates = [a for a in candidates if a.get("precision") == precision]
    kind, libs = "binary", None
    if candidates:
        asset = min(candidates, key=lambda a: PRECISION_ORDER.index(a["precision"]))
        if runtime is not None and chip is not None:
            _check_runtime(release, model, chip.name, asset, runtime)
        libs = next((a for a in assets if a.get("kind") == "qnn-libs"
                     and a.get("sdk_version") == asset.get("sdk_version")), None)
    else:
        asset, kind = _twin_or_refuse(release, model, chip, spelling, precision, assets)
    wanted = [asset] + ([libs] if libs else [])
    dest = Path(dest)
    downloaded = _download_all(dl, wanted)
    try:
        # every member of every archive checked before anything is written
        checked = [check_archive(path, top_folder(a)) for a, path in zip(wanted, downloaded)]
        files: list[Path] = []
        with staging_dir(dest, ".fetch.") as tmp:
            for path, members in zip(downloaded, checked):
                files += [dest / f for f in extract_checked(path, members, tmp)]
            for a in wanted:  # an earlier fetch of the same archive is swapped out only now
                replace_dir(tmp / top_folder(a), dest / top_folder(a))
    except OSError as e:
        raise UsageError(f"--dest {dest}: cannot write there: {e.strerror or e}",
                         hint="check the path and its permissions; nothing was changed") from None
    finally:
        for path in downloaded:  # extracted or refused: a checked archive is not kept
            discard(path)
    return FetchResult(model=model, soc=chip.name if chip is not None else spelling.strip(),
                       precision=asset["precision"], sdk_version=asset.get("sdk_version") or "",
                       archive=asset["name"], path=str(dest / top_folder(asset)),
                       qnn_libs=libs["name"] if libs else None,
                       qnn_libs_path=str(dest / top_folder(libs)) if libs else None,
                       files=sorted(str(f) for f in files), kind=kind)


def _download_all(dl: _Downloader, wanted: list[dict]) -> list[Path]:
    """Each asset, whole and checked. A failed download keeps what arrived in the cache (its .part): the same command
    resumes it; a whole, checked archive already taken by this run is this run's own copy, removed."""
    downloaded: list[Path] = []
    try:
        for a in wanted:
            downloaded.append(dl.get(a))
    except BaseException:
        for path in downloaded:
            discard(path)
        raise
    return downloaded


def _twin_or_refuse(release: str, model: str, chip, spelling: str, precision: str | None,
                    assets: list[dict]) -> tuple[dict, str]:
    """No binary for the chip: the model's twin (``jit`` on a chip the catalog knows to have an HTP, ``cpu``
    otherwise) of the precision asked for (float for fp16 or none; a quantized precision's QDQ twin), or
    ``NoBuildForChip`` (exit 3) when the release has none of it."""
    known = sorted({str(a.get("model")) for a in assets if a.get("kind") == "model"})
    if model not in known:
        raise UsageError(f"{release}: no model {model!r} in this release", hint=f"models: {', '.join(known)}")
    want = "float" if precision in (None, "fp16") else precision  # fp16 binaries' twin is the float graph
    twin = next((a for a in assets if a.get("kind") == "twin" and a.get("model") == model
                 and a.get("precision", "float") == want), None)
    if twin is not None:
        return twin, "jit" if chip is not None and chip.htp_arch else "cpu"
    raise NoBuildForChip(f"no NPU build of {model} for {chip.name if chip is not None else spelling.strip()}"
                         + (f" ({precision})" if precision else "") + ": use the CPU model",
                         hint=None if chip is not None else "this chip is not in qnn-release's catalog")


__all__ = ["AdbPhone", "AppNeeds", "FetchResult", "NoBuildForChip", "QnnReleaseError", "fetch_model", "soc_from_adb"]
