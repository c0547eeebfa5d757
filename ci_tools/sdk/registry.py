"""The SDK image never becomes public: ``qnn-release image --guard-private``, run before and after a push.

The image holds Qualcomm's QAIRT SDK, which its licence does not let us redistribute. GitHub gives a
package created by a workflow's ``GITHUB_TOKEN`` the visibility of the repository (docs: "Publishing and
installing a package with GitHub Actions", *Default permissions and access settings for packages modified
through workflows*), so the first push from a public repository would publish the SDK to anyone. The guard
asks the registry, as the Docker Registry token protocol defines it (``GET /token?scope=repository:<name>:pull``,
then ``GET /v2/<name>/tags/list`` with the bearer token):

- anonymously: a token and a tag list mean anyone can pull it: refused ("public");
- with the workflow's token (``GITHUB_ACTOR:GITHUB_TOKEN``, basic auth on ``/token``, as GHCR takes it):
  404 ``NAME_UNKNOWN`` means no package yet. From a public repository the first push would create a public
  one: refused, with the way to create it private first. 401/403 means the package exists but this
  repository's workflows may not use it (another repository's package of the same name, finding 26 of
  the first-tag review): refused, naming the setting.
Anything else (5xx, 429, no answer) is refused too: the guard cannot tell, so nothing is pushed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import PublishError

HOW_TO_CREATE_PRIVATE = (
    "create the package private before the first push: from your machine, `docker login ghcr.io` with a classic "
    "token (write:packages), push any small image as {name}:placeholder (a package pushed by a person is private), "
    "then in the package's settings: Manage Actions access -> add {repo} with the Write role")


@dataclass(frozen=True)
class Answer:
    status: int
    code: str  # the registry's error code (NAME_UNKNOWN, DENIED, UNAUTHORIZED) or ""


def _ask(session, registry: str, name: str, auth: tuple[str, str] | None) -> Answer:
    """The tag list of ``name`` after the token dance, anonymously or with ``auth``."""
    host = registry.split("://", 1)[-1].rstrip("/")
    r = session.get(f"{registry}/token", params={"service": host, "scope": f"repository:{name}:pull"},
                    auth=auth, timeout=30)
    if r.status_code != 200:
        return Answer(r.status_code, _code(r))
    token = (r.json() or {}).get("token") or (r.json() or {}).get("access_token")
    if not token:
        return Answer(401, "NO_TOKEN")
    r = session.get(f"{registry}/v2/{name}/tags/list", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Answer(r.status_code, _code(r))


def _code(r) -> str:
    try:
        return str((r.json().get("errors") or [{}])[0].get("code", ""))
    except ValueError:
        return ""


def guard_private(registry: str, name: str, repo: str, repo_visibility: str, actor: str, token: str) -> str:
    """'private' when a push of ``name`` can never make the SDK public; else PublishError (exit 10)."""
    import requests

    ref = f"{registry.split('://', 1)[-1].rstrip('/')}/{name}"
    if registry.rstrip("/") != "https://ghcr.io" and not os.environ.get("QNN_RELEASE_REGISTRY"):
        raise PublishError(f"{ref}: the guard knows GHCR's visibility rules only; the workflow token goes to no "
                           "other registry", hint="release.image: ghcr.io/<owner>/<name>")
    try:
        with requests.Session() as s:
            anonymous = _ask(s, registry, name, None)
            mine = _ask(s, registry, name, (actor, token)) if token else Answer(401, "NO_GITHUB_TOKEN")
    except requests.RequestException as e:
        raise PublishError(f"{ref}: the registry did not answer whether the SDK image is private "
                           f"({type(e).__name__}): nothing is pushed", hint="re-run the job") from None
    if anonymous.status == 200:
        raise PublishError(f"{ref} is public: anyone can pull Qualcomm's SDK from it, so nothing more is pushed",
                           hint="make it private (package settings -> Danger Zone -> Change visibility) and delete "
                                "the versions that were public")
    if anonymous.status not in (401, 403, 404):
        raise PublishError(f"{ref}: the registry answered {anonymous.status} {anonymous.code} to an anonymous pull: "
                           "it may be public, so nothing is pushed", hint="re-run the job")
    if mine.status == 404 and mine.code == "NAME_UNKNOWN":
        if repo_visibility != "private":  # public, internal (seen by the whole enterprise), or unknown
            raise PublishError(f"{ref} does not exist yet, and a workflow of the {repo_visibility or 'public'} "
                               f"repository {repo} would create it {repo_visibility or 'public'}, with "
                               "Qualcomm's SDK inside", hint=HOW_TO_CREATE_PRIVATE.format(name=ref, repo=repo))
        return "private"  # a private repository's package is private
    if mine.status in (401, 403):
        raise PublishError(f"{ref} exists, but {repo}'s workflows may not use it ({mine.status} {mine.code})",
                           hint=f"in the package's settings: Manage Actions access -> add {repo} with the Write "
                                "role; or name another image in release.image")
    if mine.status != 200:
        raise PublishError(f"{ref}: the registry answered {mine.status} {mine.code}: nothing is pushed",
                           hint="re-run the job")
    return "private"
