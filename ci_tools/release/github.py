"""A small GitHub REST client for releases: retries, rate limits, pagination, never printing the token.

Honours ``GITHUB_API_URL`` (GitHub Enterprise, local test servers) instead of hard-coding the host.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from ..errors import PublishError, QnnReleaseError, UsageError
from ..sources.download import backoff, retry_after
from ..util.text import clip

RETRY_STATUS = {500, 502, 503, 504}
MAX_ATTEMPTS = 6


def token_from_env() -> str | None:
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None


def redact(text: str, secrets: list[str | None]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


@dataclass(frozen=True, kw_only=True)
class Connection:
    """How a command reaches GitHub: the token (never printed), the API (``GITHUB_API_URL``, GitHub Enterprise
    Server, a stand-in), and how to wait between retries (tests pass one that does not)."""

    token: str | None = None
    api_url: str | None = None
    sleep: Callable[[float], None] | None = None

    def client(self, repo: str, give_up: type[QnnReleaseError] = PublishError) -> GitHub:
        sleep: dict[str, Any] = {"sleep": self.sleep} if self.sleep else {}
        return GitHub(repo, token=self.token, api_url=self.api_url, give_up=give_up, **sleep)


class GitHub:
    def __init__(self, repo: str, token: str | None = None, api_url: str | None = None,
                 sleep=time.sleep, max_attempts: int = MAX_ATTEMPTS,
                 give_up: type[QnnReleaseError] = PublishError):
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo or ""):
            raise UsageError(f"--repo {repo!r}: expected OWNER/NAME")
        self.repo = repo
        self.api = (api_url or os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
        self.token = token
        self.sleep = sleep
        self.max_attempts = max_attempts
        self.give_up = give_up  # what unanswered requests raise: PublishError, SourceError for downloads
        self.session = requests.Session()
        self.session.headers.update({"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                                     "User-Agent": "qnn-release"})
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    # -- transport -------------------------------------------------------------------------------

    def _wait_for(self, r: requests.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying ``r``, or None when it is final."""
        if r.status_code in RETRY_STATUS:
            return backoff(attempt)
        if r.status_code in (403, 429):
            if "retry-after" in r.headers:
                wait = retry_after(r.headers)
                return 5.0 if wait is None else wait
            if r.headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in r.headers:
                return max(0.0, min(float(r.headers["x-ratelimit-reset"]) - time.time(), 300.0)) + 1
            if r.status_code == 429 or "secondary rate limit" in r.text.lower():
                return backoff(attempt + 6, cap=120.0)  # a minute and more, as GitHub asks
        return None

    def request(self, method: str, url: str, *, ok: tuple[int, ...] = (200, 201, 204), data_path: Path | None = None,
                **kw) -> requests.Response:
        if not url.startswith("http"):
            url = f"{self.api}{url}"
        last = ""
        for attempt in range(self.max_attempts):
            try:
                if data_path is not None:
                    with open(data_path, "rb") as f:  # a new stream for every attempt
                        r = self.session.request(method, url, data=f, timeout=(10, 300), **kw)
                else:
                    r = self.session.request(method, url, timeout=(10, 120), **kw)
            except requests.RequestException as e:
                last = f"{type(e).__name__}"
                if attempt + 1 < self.max_attempts:
                    self.sleep(backoff(attempt))
                continue
            if r.status_code in ok:
                return r
            wait = self._wait_for(r, attempt)
            if wait is None:
                return r
            last = f"HTTP {r.status_code}"
            if attempt + 1 < self.max_attempts:
                self.sleep(wait)
        raise self.give_up(f"{method} {self._safe(url)}: gave up after {self.max_attempts} attempts ({last})",
                           hint="GitHub is failing, rate-limiting or unreachable (check GITHUB_API_URL and the "
                                "network); run the same command again later: it resumes")

    def _safe(self, url: str) -> str:
        return redact(url.split("?")[0], [self.token])

    def call(self, method: str, url: str, what: str, *, expect: tuple[int, ...] = (200,),
             **kw) -> requests.Response:
        """``request`` that raises a one-line PublishError naming ``what`` unless the status is expected."""
        r = self.request(method, url, ok=expect, **kw)
        if r.status_code not in expect:
            raise self.fail(r, what)
        return r

    def fail(self, r: requests.Response, what: str) -> PublishError:
        try:
            body = r.json()
            msg = body.get("message", "")
            # a 422's reasons ("errors": [{"code": "already_exists", "field": "name"}, ...]) are the useful part
            reasons = [e.get("message") or " ".join(str(e[k]) for k in ("field", "code") if e.get(k))
                       for e in body.get("errors") or [] if isinstance(e, dict)]
            msg = f"{msg}: {'; '.join(filter(None, reasons))}" if any(reasons) else msg
        except (ValueError, AttributeError):
            msg = clip(r.text, 200)
        hint = {401: "the token is missing or invalid: set GITHUB_TOKEN or GH_TOKEN",
                403: "the token lacks permission (contents: write) for this repository",
                404: "check OWNER/NAME and the tag; private repositories need a token"}.get(r.status_code)
        return PublishError(redact(f"{what}: HTTP {r.status_code} {msg}".strip(), [self.token]), hint=hint)

    def paginate(self, url: str) -> Iterator[dict]:
        """Follow ``Link: <...>; rel="next"`` headers."""
        next_url: str | None = f"{self.api}{url}{'&' if '?' in url else '?'}per_page=100"
        while next_url:
            r = self.call("GET", next_url, f"GET {self._safe(next_url)}")
            yield from r.json()
            next_url = r.links.get("next", {}).get("url")

    # -- releases --------------------------------------------------------------------------------

    def release_by_tag(self, tag: str) -> dict | None:
        """The PUBLISHED release of ``tag`` (GitHub never returns drafts here)."""
        r = self.request("GET", f"/repos/{self.repo}/releases/tags/{tag}")
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise self.fail(r, f"get release {tag}")
        return r.json()

    def latest_release(self) -> dict | None:
        """The repository's latest published release (GitHub: the newest non-pre-release marked latest), or None."""
        r = self.request("GET", f"/repos/{self.repo}/releases/latest")
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise self.fail(r, "get the latest release")
        return r.json()

    def drafts_for(self, tag: str) -> list[dict]:
        return sorted((rel for rel in self.paginate(f"/repos/{self.repo}/releases")
                       if rel.get("draft") and rel.get("tag_name") == tag), key=lambda rel: rel["id"])

    def create_draft(self, tag: str, name: str, body: str, target: str | None = None) -> dict:
        """A draft release; ``target`` (a commit sha) is where GitHub puts the tag if it does not exist yet
        (REST API, "Create a release": target_commitish, default the default branch)."""
        extra = {"target_commitish": target} if target else {}
        return self.call("POST", f"/repos/{self.repo}/releases", f"create draft release {tag}", expect=(201,),
                         json={"tag_name": tag, "name": name, "body": body, "draft": True, **extra}).json()

    def delete_release(self, release_id: int) -> None:
        self.call("DELETE", f"/repos/{self.repo}/releases/{release_id}", f"delete release {release_id}",
                  expect=(204, 404))

    def update_release(self, release_id: int, **fields: Any) -> dict:
        return self.call("PATCH", f"/repos/{self.repo}/releases/{release_id}", f"update release {release_id}",
                         json=fields).json()

    def assets(self, release_id: int) -> list[dict]:
        return list(self.paginate(f"/repos/{self.repo}/releases/{release_id}/assets"))

    def upload(self, release: dict, name: str, path: Path, content_type: str, label: str | None = None
               ) -> requests.Response:
        base = release["upload_url"].split("{", 1)[0]
        params = {"name": name, **({"label": label} if label else {})}
        return self.request("POST", base, ok=(201, 422), data_path=path, params=params,
                            headers={"Content-Type": content_type, "Content-Length": str(path.stat().st_size)})

    def rename_asset(self, asset_id: int, name: str) -> dict:
        return self.call("PATCH", f"/repos/{self.repo}/releases/assets/{asset_id}",
                         f"rename asset {asset_id} to {name}", json={"name": name}).json()

    def delete_asset(self, asset_id: int) -> None:
        self.call("DELETE", f"/repos/{self.repo}/releases/assets/{asset_id}", f"delete asset {asset_id}",
                  expect=(204, 404))
