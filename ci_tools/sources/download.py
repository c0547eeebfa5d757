"""Downloads that survive flaky servers: retried with backoff, resumed with ``Range``, checked by sha256.

Used by ``fetch`` (GitHub release assets) and ``sdk fetch`` (the QAIRT zip on the Hub). Partial
files live in ``<cache>/downloads/<sha256>.part`` (``QNN_RELEASE_CACHE``), never in the
destination, so a failed run leaves the destination as it was and the next run resumes.
A download is abandoned when attempts stop making progress, not after a fixed number of
attempts that each brought bytes.

``QNN_RELEASE_RETRY_BASE`` (seconds, default 1) is the first backoff delay; it doubles per
attempt without progress, up to 30 s. A server's ``Retry-After`` takes precedence.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ..errors import QnnReleaseError, SourceError, UsageError
from .network import network_errors, unreachable_as  # noqa: F401 (re-exported)

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
PATIENCE = 5  # consecutive attempts without a new byte before giving up
MAX_RETRY_AFTER = 120.0


class Transient(Exception):
    """A failure worth retrying (a 5xx, a 429, a dropped connection); ``wait`` is the server's Retry-After."""

    def __init__(self, reason: str, wait: float | None = None):
        super().__init__(reason)
        self.reason, self.wait = reason, wait


def retry_base() -> float:
    raw = os.environ.get("QNN_RELEASE_RETRY_BASE", "1")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 60:
        raise UsageError(f"QNN_RELEASE_RETRY_BASE={raw!r}: expected seconds between 0 and 60",
                         hint="unset it for the default of 1 second")
    return value


def backoff(attempt: int, cap: float = 30.0) -> float:
    """Seconds before retry number ``attempt`` (0-based): base, 2 x base, 4 x base ... at most ``cap``."""
    return min(retry_base() * 2.0 ** attempt, cap)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), capped; None when absent or unreadable."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, min(seconds, MAX_RETRY_AFTER))


def describe(exc: BaseException) -> str:
    """A short, single-line name for a network failure (never a URL with credentials in it)."""
    return exc.reason if isinstance(exc, Transient) else type(exc).__name__


Opener = Callable[[int], AbstractContextManager]  # offset -> streaming response (200, 206 or 416)


@dataclass(frozen=True, kw_only=True)
class Download:
    """One download as messages and retries see it: ``what`` it is (for messages), who pinned its sha256
    (``pinned_by``, said on a mismatch), how to wait between attempts (``sleep``), how many attempts in a row may
    bring nothing (``patience``), what giving up raises (``give_up``, with ``hint``), and the bytes the file may
    have (``limit``: its declared size; a server sending more is refused, nothing kept)."""

    what: str
    pinned_by: str = ""
    sleep: Callable[[float], object] = time.sleep
    patience: int = PATIENCE
    give_up: type[QnnReleaseError] = SourceError
    hint: str = ""
    limit: int | None = None


def resume(part: Path, open_from: Opener, download: Download) -> None:
    """Fill ``part`` from ``open_from(len(part))`` until a response ends cleanly.

    ``open_from`` raises ``Transient`` (or a network error) for what is worth retrying and a
    ``QnnReleaseError`` for what is not. ``part`` is kept when giving up: the next run resumes it.
    ``download.limit``: the bytes the file may have (its declared size): a server sending more is refused, nothing
    kept.
    """
    what, limit, patience = download.what, download.limit, download.patience
    part.parent.mkdir(parents=True, exist_ok=True)
    best = _size(part)
    stalls = 0
    while True:
        have = _size(part)
        wait = None
        try:
            with open_from(have) as r:
                if r.status_code == 416:  # nothing past ``have``: every byte is here
                    return
                if r.status_code == 206 and not _starts_at(r, have):
                    part.unlink(missing_ok=True)  # resumed elsewhere than asked: start over
                    raise Transient("the server resumed at another offset")
                with _open_part(part, "ab" if r.status_code == 206 else "wb") as f:
                    for chunk in _chunks(r):
                        if limit is not None and f.tell() + len(chunk) > limit:
                            break
                        f.write(chunk)
                    else:
                        return
            part.unlink(missing_ok=True)
            raise SourceError(f"{what}: the server sent more than the {limit:,} bytes declared for it; nothing was "
                              "kept", hint="the release was not made by qnn-release, or the server is broken")
        except Transient as e:
            last, wait = e.reason, e.wait
        except network_errors() as e:
            last = describe(e)
        if _size(part) > best:
            best, stalls = _size(part), 0
        else:
            stalls += 1
        if stalls >= patience:
            kept = f"{best} bytes kept for the next run" if best else "nothing arrived"
            raise download.give_up(f"{what}: no progress in {patience} attempts in a row (last: {last}); {kept}",
                                   hint=download.hint or "run the same command again; it resumes")
        download.sleep(wait if wait is not None else backoff(max(stalls - 1, 0)))


def _chunks(r):
    """The body as it arrives: every byte received before a dropped connection is kept for the resume
    (``iter_content`` reads whole 64 KiB blocks and loses a partial one)."""
    read1 = getattr(r.raw, "read1", None)  # urllib3 >= 2
    if read1 is None or r.headers.get("Content-Encoding", "identity") != "identity":
        yield from r.iter_content(64 * 1024)
        return
    while chunk := read1(64 * 1024):
        yield chunk


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _starts_at(r, offset: int) -> bool:
    rng = r.headers.get("Content-Range", "")
    try:
        return int(rng.split()[1].split("-")[0]) == offset
    except (IndexError, ValueError):
        return False


def downloads_dir(cache: Path | None = None) -> Path:
    from .store import default_cache

    return Path(cache) if cache is not None else default_cache() / "downloads"


def _open_part(part: Path, mode: str):
    """The partial download, opened: another run's ``discard`` may have removed the shared downloads folder
    (empty for a moment) since this run made it; make it again rather than fail."""
    try:
        return open(part, mode)
    except FileNotFoundError:
        part.parent.mkdir(parents=True, exist_ok=True)
        return open(part, mode)


def _taken(done: Path, cache: Path, sha256: str) -> Path:
    mine = private_path(cache, sha256)
    os.replace(done, mine)
    return mine


def discard(path: Path) -> None:
    """Remove a used download, and the downloads folder with it once it is empty."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # partial downloads of other runs wait there


@contextlib.contextmanager
def _locked(cache: Path, sha256: str):
    """One run at a time downloads, resumes or takes a blob: runs that share a cache (an app's parallel fetches,
    CI jobs) wait here instead of writing one ``.part`` together. The lock files sit beside the downloads folder,
    which stays removable once it is empty."""
    import fcntl

    locks = cache.parent / f".{cache.name}-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / sha256, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def private_path(cache: Path, sha256: str, suffix: str = "") -> Path:
    """A name in ``cache`` only this run uses (its process and a random part)."""
    import uuid

    return cache / f"{sha256}.{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"


def fetch_verified(cache: Path, sha256: str, open_from: Opener, **how) -> Path:
    """``<cache>/<sha256>``: downloaded (resuming a partial file), checked, whole; a corrupt file is never kept.
    ``how``: the fields of ``Download``: ``what`` (for messages), ``pinned_by``, ``sleep``, ``give_up``, ``hint``,
    ``limit`` (the declared size: no more is written). One run at a time per blob.

    A mismatch after a complete download is retried once from zero (a corrupted transfer); a
    second one means the content is not what was pinned.
    """
    with _locked(cache, sha256):
        return _fetch(cache, sha256, open_from, Download(**how))


def fetch_taken(cache: Path, sha256: str, open_from: Opener, **how) -> Path:
    """As ``fetch_verified``, with the checked file moved to a name of this run's own (``private_path``): another
    run sharing the cache can neither remove it nor be handed it half-used. The caller ``discard``s it."""
    with _locked(cache, sha256):
        return _taken(_fetch(cache, sha256, open_from, Download(**how)), cache, sha256)


def _fetch(cache: Path, sha256: str, open_from: Opener, download: Download) -> Path:
    from .store import sha256_file

    what, pinned_by = download.what, download.pinned_by
    done = cache / sha256
    if done.is_file() and sha256_file(done) == sha256:
        return done
    part = cache / f"{sha256}.part"
    got = ""
    for _ in range(2):
        resume(part, open_from, download)
        got = sha256_file(part)
        if got == sha256:
            os.replace(part, done)
            return done
        part.unlink(missing_ok=True)
    discard(part)
    by = f" ({pinned_by})" if pinned_by else ""
    raise SourceError(f"{what}: sha256 {got} does not match {sha256}{by}; nothing was kept",
                      hint="a corrupt transfer twice in a row, or the file changed: check the pin")
