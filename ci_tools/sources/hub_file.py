"""One file of a Hugging Face repo: its commit and sha256 (asked through huggingface_hub), then its bytes.

huggingface_hub retries neither a 5xx nor a dropped connection on the metadata request, checks only
the size of a download and never resumes one in a new process (REFERENCE.md 4b); so retries, resume
and the sha256 check are ours (``download.py``). The bytes come from the same ``resolve`` URL its
download uses, at the commit the metadata named. ``HF_ENDPOINT`` and ``HF_TOKEN`` are honoured.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import requests

from ..errors import SourceError
from ..util.text import clip
from .download import PATIENCE, RETRY_STATUS, Opener, Transient, backoff, network_errors, retry_after

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class HubFile:
    repo: str
    file: str
    revision: str  # as asked: a commit, branch or tag
    commit: str | None  # what the Hub resolved it to
    sha256: str | None  # of an LFS file (X-Linked-Etag); None for small files kept in git
    size: int | None


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def _unreachable(repo: str, file: str, attempts: int, last: str) -> SourceError:
    return SourceError(f"{endpoint()}: no answer from the Hub for {repo}/{file} after {attempts} attempts ({last})",
                       hint="check HF_ENDPOINT, the network (proxy, firewall) and HF_TOKEN; or run again later")


def _refused(status: int | None, code: str, repo: str, file: str, revision: str, detail: str) -> SourceError:
    """A final answer of the Hub as one line naming the repo, revision and file."""
    if code == "GatedRepo":
        return SourceError(f"{repo}: a gated repository: {file} needs its terms accepted",
                           hint="accept them on the Hub and set HF_TOKEN to that account's token")
    if code == "RepoNotFound":
        return SourceError(f"{repo}: no such repository on {endpoint()} (or it is private)",
                           hint="check the repository name (hf_repo); a private repository needs HF_TOKEN")
    if code == "RevisionNotFound":
        return SourceError(f"{repo}: revision {revision!r} not found (looking for {file})",
                           hint=f"check the revision: a commit, branch or tag of {repo}")
    if code == "EntryNotFound":
        return SourceError(f"{repo}@{revision}: no file {file} (EntryNotFound)",
                           hint=f"check the file name; the repository's files are listed at {endpoint()}/{repo}")
    if status in (401, 403):
        return SourceError(f"{repo}@{revision}: {file}: HTTP {status}: not authorised",
                           hint="check HF_TOKEN (a token with read access to this repository)")
    return SourceError(clip(f"{repo}@{revision}: {file}: HTTP {status} {detail}", 300))


def _error_code(exc: BaseException) -> str:
    """The Hub's X-Error-Code, or the one huggingface_hub's exception class stands for."""
    from huggingface_hub import errors

    response = getattr(exc, "response", None)
    code = response.headers.get("X-Error-Code", "") if response is not None else ""
    if code:
        return code
    for cls, name in (("GatedRepoError", "GatedRepo"), ("RepositoryNotFoundError", "RepoNotFound"),
                      ("RevisionNotFoundError", "RevisionNotFound"), ("EntryNotFoundError", "EntryNotFound")):
        if isinstance(exc, getattr(errors, cls, ())):
            return name
    return ""


def file_metadata(repo: str, file: str, revision: str, *, sleep=time.sleep, patience: int = PATIENCE) -> HubFile:
    """Commit, sha256 and size of ``repo/file`` at ``revision``; 5xx, 429 and dropped connections are retried."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    url = hf_hub_url(repo, file, revision=revision, endpoint=endpoint())
    last = ""
    for attempt in range(patience):
        wait = None
        try:
            meta = get_hf_file_metadata(url)
        except OfflineModeIsEnabled:
            raise SourceError(f"{repo}/{file}: HF_HUB_OFFLINE is set", hint="unset it to download the SDK") from None
        except HfHubHTTPError as e:  # before network_errors(): it derives from httpx's (requests') HTTPError
            status = e.response.status_code if e.response is not None else None
            if status not in RETRY_STATUS:
                detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise _refused(status, _error_code(e), repo, file, revision, detail) from None
            last, wait = f"HTTP {status}", retry_after(e.response.headers)
        except network_errors() as e:
            last = type(e).__name__
        except OSError as e:  # e.g. an HF_ENDPOINT that is not a Hub: no X-Repo-Commit in the answer
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SourceError(f"{endpoint()}: {repo}/{file}: {clip(first, 200)}",
                              hint="is HF_ENDPOINT a Hugging Face Hub?") from None
        else:
            sha = (meta.etag or "").strip('"')
            return HubFile(repo=repo, file=file, revision=revision, commit=meta.commit_hash,
                           sha256=sha if _SHA256.fullmatch(sha) else None, size=meta.size)
        if attempt + 1 < patience:
            sleep(wait if wait is not None else backoff(attempt))
    raise _unreachable(repo, file, patience, last)


def opener(hf: HubFile, session: requests.Session | None = None) -> Opener:
    """``offset -> response`` for ``download.resume``: a GET of the file at its commit, from ``offset`` on."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    session = session or requests.Session()
    revision = hf.commit or hf.revision
    url = hf_hub_url(hf.repo, hf.file, revision=revision, endpoint=endpoint())
    base = {**build_hf_headers(), "Accept-Encoding": "identity"}  # the token, if any: never printed

    def open_from(offset: int):
        headers = {**base, **({"Range": f"bytes={offset}-"} if offset else {})}
        try:
            r = session.get(url, headers=headers, stream=True, timeout=(10, 60))
        except requests.RequestException as e:
            raise Transient(f"{type(e).__name__} ({endpoint()})") from None
        if r.status_code in (200, 206, 416):
            return r
        r.close()
        if r.status_code in RETRY_STATUS:
            raise Transient(f"HTTP {r.status_code}", retry_after(r.headers))
        raise _refused(r.status_code, r.headers.get("X-Error-Code", ""), hf.repo, hf.file, revision, r.reason or "")

    return open_from
