"""The download client apps and build scripts use: the right archive for a device's chip.

``fetch_model("owner/name@v1.0.0", "silero-vad", soc="sm8750-ac", dest=Path("models"))`` reads the
release's ``manifest.json``, resolves the chip (aliases, ``adb shell getprop ro.soc.model``), downloads
the archive and the ``qnn-libs`` of the same SDK version (retrying, resuming, checking sha256) and
extracts them into ``dest`` once both have passed every check (``extract.py``).

Failures, each one line with its exit code: no build for the chip ``NoBuildForChip`` (3: use the
CPU model); a download that stopped making progress, GitHub unreachable or a sha256 mismatch
``SourceError`` (4); a malformed manifest or a refused archive ``PackageError`` (9); no such
release or asset, or a request GitHub refused ``PublishError`` (10); a model the release does not
have ``UsageError`` (2). A failed or refused fetch leaves ``dest`` as it was: partial downloads
wait in ``<cache>/downloads`` (``QNN_RELEASE_CACHE``) for the next run to resume them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ..catalog.socs import UnknownSocError, load_catalog
from ..errors import (
    NoBuildForChip,
    PackageError,
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


_ASSET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.tar\.bz2")


_PIECE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.tar\.bz2\.[0-9]{3}")
_SHA = re.compile(r"[0-9a-f]{64}")


MAX_ASSETS_LISTED = 100_000  # 100 linked releases of GitHub's 1,000 assets
MAX_PARTS = 100
MAX_PIECES = 999  # <name>.001 ... .999
MAX_ASSET_BYTES = 1 << 40  # what a manifest may declare for one asset (1 TiB): bounds what a download writes


def _parts(manifest: dict, tag: str | None) -> list[str]:
    """The manifest's linked releases: exactly the tags ``package`` makes for this release (``<tag>-part2`` ...):
    a part's name goes into an API path and a URL, so nothing else is ever followed."""
    from .layout import part_tag

    parts = manifest.get("parts") or []
    if not isinstance(parts, list) or len(parts) > MAX_PARTS or not all(isinstance(p, str) for p in parts):
        raise PackageError("manifest.json: parts is not a list of at most 100 tags",
                           hint="the release was not made by qnn-release package")
    want = [part_tag(tag, k) for k in range(2, len(parts) + 2)] if tag else None
    if (want is not None and parts != want) or any(not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", p) for p in parts):
        bad = next((p for p, w in zip(parts, want or parts) if p != w or not re.fullmatch(
            r"[A-Za-z0-9][A-Za-z0-9._+-]*", p)), parts[0] if parts else "")
        raise PackageError(f"manifest.json: part {clip(bad, 80)!r} is not a linked release of {tag or 'this tag'} "
                           f"(expected {', '.join(want[:3]) if want else '<tag>-part2 ...'} in order)",
                           hint="the release was not made by qnn-release package; nothing was requested from it")
    return parts


def _pieces_ok(name: str, size: object, pieces: object) -> bool:
    """An asset's pieces are exactly ``<name>.001``, ``.002`` ... in order, each with a sha256 and a size, their
    sizes adding up to the asset's."""
    if not isinstance(pieces, list) or not pieces or len(pieces) > MAX_PIECES:
        return False
    for i, x in enumerate(pieces, 1):
        if not isinstance(x, dict) or x.get("name") != f"{name}.{i:03d}" or not _SHA.fullmatch(str(x.get("sha256"))):
            return False
        if not isinstance(x.get("size"), int) or isinstance(x.get("size"), bool) or x["size"] < 0:
            return False
    return sum(x["size"] for x in pieces) == size


def _manifest_assets(manifest: object, tag: str | None = None) -> list[dict]:
    """The manifest's assets, each with a plain archive name, a sha256 and a bounded size (a name is used as a path),
    its pieces exactly as ``package`` names them, and its release one of the manifest's parts, which are exactly
    this tag's linked releases (``tag``: the release it was read from)."""
    assets = manifest.get("assets") if isinstance(manifest, dict) else None
    if not isinstance(assets, list):
        raise PackageError("manifest.json: no list of assets", hint="the release was not made by qnn-release package")
    if manifest.get("manifest_version", 1) not in (1, 2):
        raise PackageError(f"manifest.json: manifest_version {manifest.get('manifest_version')!r}; this qnn-release "
                           "reads 1 and 2", hint="upgrade qnn-release")
    if len(assets) > MAX_ASSETS_LISTED:
        raise PackageError(f"manifest.json: {len(assets)} assets listed (at most {MAX_ASSETS_LISTED:,})",
                           hint="the release was not made by qnn-release package")
    parts = _parts(manifest, tag)
    for a in assets:
        name = a.get("name") if isinstance(a, dict) else None
        if not isinstance(name, str) or not _ASSET.fullmatch(name) or not _SHA.fullmatch(str(a.get("sha256"))):
            raise PackageError(f"manifest.json: asset {clip(name, 80)!r} has no plain .tar.bz2 name or no sha256",
                               hint="the release was not made by qnn-release package")
        size = a.get("size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool)
                                 or not 0 <= size <= MAX_ASSET_BYTES):
            raise PackageError(f"manifest.json: asset {name!r} declares size {clip(size, 40)!r} (expected 0 to 1 TiB)",
                               hint="the release was not made by qnn-release package")
        pieces = a.get("pieces")
        if pieces is not None and not _pieces_ok(name, size, pieces):
            raise PackageError(f"manifest.json: asset {name!r} has pieces that are not {name}.001, .002 ... in order, "
                               "each with its sha256 and size, adding up to the asset's size",
                               hint="the release was not made by qnn-release package")
        if a.get("release") is not None and a.get("release") not in parts:
            raise PackageError(f"manifest.json: asset {name!r} is in release {clip(a.get('release'), 80)!r}, which "
                               "is not one of the manifest's parts", hint="the release was not made by qnn-release")
        if a.get("kind") == "model" and (a.get("precision") not in PRECISION_ORDER
                                         or not isinstance(a.get("sdk_version"), str)):
            raise PackageError(f"manifest.json: model asset {name!r} has no precision or sdk_version",
                               hint="the release was not made by qnn-release package")
    return assets


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
            rel = self.gh.release_by_tag(release)
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
        r = self.gh.call("GET", url, "download manifest.json", headers=headers)  # small: retried whole
        try:
            manifest = json.loads(r.content)
        except (ValueError, RecursionError):  # nested past Python's recursion limit: not a manifest package writes
            raise PackageError(f"{self.where}: manifest.json is not JSON, or nested too deep",
                               hint="the release was not made by qnn-release package") from None
        _manifest_assets(manifest, self.tag)
        return manifest

    def _file(self, name: str, sha256: str, release: str | None) -> Path:
        def open_from(offset: int):
            url, headers = self.url(name, release)
            if offset:
                headers = {**headers, "Range": f"bytes={offset}-"}
            return self.gh.call("GET", url, f"download {name}", expect=(200, 206, 416), headers=headers,
                                stream=True)

        return fetch_taken(self.cache, sha256, open_from, what=f"{self.gh.repo}@{release or self.tag}: {name}",
                           pinned_by="the manifest", sleep=self.sleep)

    def get(self, asset: dict) -> Path:
        """The asset, whole and checked against the manifest's sha256, in the download cache: from the release
        that holds it, and joined from its pieces (each checked first) when it was uploaded in pieces."""
        release = asset.get("release")
        if not asset.get("pieces"):
            return self._file(asset["name"], asset["sha256"], release)
        pieces = [self._file(p["name"], p["sha256"], release) for p in asset["pieces"]]
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
    for ``soc`` the app's QNN ``runtime`` loads: its OWNER/NAME@TAG, or None. Each release's manifest is read
    (newest first, drafts never)."""
    from .publish import tag_version

    via = via or Connection()
    repo, tag = _split(release)
    chip = load_catalog().resolve(soc)
    gh = via.client(repo, give_up=SourceError)
    mine = tag_version(tag)
    releases = [r for r in gh.paginate(f"/repos/{repo}/releases") if not r.get("draft")]  # newest first
    if all(tag_version(r.get("tag_name", "")) is not None for r in releases):  # by version where tags are versions
        releases.sort(key=lambda r: tag_version(r["tag_name"]), reverse=True)
    for rel in releases:
        v = tag_version(rel.get("tag_name", ""))
        if mine is not None and v is not None and v > mine:
            continue
        try:
            assets = _manifest_assets(_Downloader(gh, rel, via.token, downloads_dir(None), gh.sleep).manifest(),
                                      rel.get("tag_name"))
        except QnnReleaseError:
            continue  # no manifest (not a qnn-release release), or one this client refuses: not a candidate
        fits = [a for a in assets if a.get("kind") == "model" and a.get("model") == model
                and (a.get("soc") == chip.name or chip.name.lower() in _aliases(a))
                and (precision is None or a.get("precision") == precision) and loads_on(needs(a), runtime)]
        if fits:
            return f"{repo}@{rel['tag_name']}"
    return None


def fetch_model(release: str, model: str, *, dest: Path, soc: str | None = None, adb: str | bool | None = None,
                precision: str | None = None, via: Connection | None = None, runtime: str | None = None) -> FetchResult:
    """``runtime``: the QNN runtime the app ships (major.minor.patch): a binary that needs a newer one is refused
    (``RuntimeTooOld``, exit 12) before anything is downloaded."""
    via = via or Connection()
    repo, tag = _split(release)
    if soc is None and adb is None:
        raise UsageError("give --soc CHIP or --adb [SERIAL]")
    spelling = soc if soc is not None else soc_from_adb(adb if isinstance(adb, str) else None)
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
    assets = _manifest_assets(manifest, tag)
    candidates = [a for a in assets if chip is not None and a.get("kind") == "model" and a.get("model") == model
                  and (a.get("soc") == chip.name or chip.name.lower() in _aliases(a))]
    if precision:
        candidates = [a for a in candidates if a.get("precision") == precision]
    kind, libs = "binary", None
    if candidates:
        asset = min(candidates, key=lambda a: PRECISION_ORDER.index(a["precision"]))
        if runtime is not None:
            _check_runtime(release, model, chip.name, asset, runtime)
        libs = next((a for a in assets if a.get("kind") == "qnn-libs"
                     and a.get("sdk_version") == asset.get("sdk_version")), None)
    else:
        asset, kind = _twin_or_refuse(release, model, chip, spelling, precision, assets)
    wanted = [asset] + ([libs] if libs else [])
    dest = Path(dest)
    # a failed download keeps what arrived in the cache: the same command resumes it
    downloaded = [dl.get(a) for a in wanted]
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


def _twin_or_refuse(release: str, model: str, chip, spelling: str, precision: str | None,
                    assets: list[dict]) -> tuple[dict, str]:
    """No binary for the chip: the model's twin (``jit`` on a chip the catalog knows to have an HTP, ``cpu``
    otherwise), or ``NoBuildForChip`` (exit 3) when the release has none or another precision was asked for."""
    known = sorted({str(a.get("model")) for a in assets if a.get("kind") == "model"})
    if model not in known:
        raise UsageError(f"{release}: no model {model!r} in this release", hint=f"models: {', '.join(known)}")
    twin = next((a for a in assets if a.get("kind") == "twin" and a.get("model") == model), None)
    if twin is not None and precision in (None, "fp16"):
        return twin, "jit" if chip is not None and chip.htp_arch else "cpu"
    raise NoBuildForChip(f"no NPU build of {model} for {chip.name if chip is not None else spelling.strip()}"
                         + (f" ({precision})" if precision else "") + ": use the CPU model",
                         hint=None if chip is not None else "this chip is not in qnn-release's catalog")


__all__ = ["FetchResult", "NoBuildForChip", "QnnReleaseError", "fetch_model", "soc_from_adb"]
