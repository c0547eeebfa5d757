"""Newer QAIRT zips (Hugging Face repo) and onnxruntime-qnn releases (PyPI JSON API); apply; open a PR.

``QNN_RELEASE_PYPI_URL`` points the PyPI look-up elsewhere (a mirror, a test server), like
``HF_ENDPOINT`` does for the Hub.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import requests
from packaging.version import InvalidVersion, Version

from ..errors import ConfigError, PublishError, SourceError
from ..matrix.schema import LoadedMatrix, load_matrix
from ..release.github import GitHub
from ..sources.network import unreachable_as
from ..util import cmd
from ..util.files import write_atomic
from ..util.text import clip
from ..util.yaml_lines import load_with_lines
from .install import ZIP_NAME


@dataclass
class Updates:
    qairt: list[str] = field(default_factory=list)  # newest first
    onnxruntime_qnn: list[str] = field(default_factory=list)


def _v(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split("."))


def check_updates(loaded: LoadedMatrix) -> Updates:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    sdk = loaded.matrix.sdk
    current = max(_v(e.version) for e in sdk.qairt)
    try:
        with unreachable_as(SourceError, f"{sdk.qairt[0].hf_repo}: cannot list files"):
            files = HfApi().list_repo_files(sdk.qairt[0].hf_repo)
    except (HfHubHTTPError, OSError) as e:
        raise SourceError(f"{sdk.qairt[0].hf_repo}: cannot list files: {clip(str(e), 200)}") from None
    qairt = sorted({m[1] for f in files if (m := ZIP_NAME.match(f)) and _v(m[1]) > current}, key=_v, reverse=True)
    base = os.environ.get("QNN_RELEASE_PYPI_URL", "https://pypi.org").rstrip("/")
    try:
        r = requests.get(f"{base}/pypi/onnxruntime-qnn/json", timeout=30)
        r.raise_for_status()
        releases = r.json()["releases"]
    except (requests.RequestException, ValueError, KeyError) as e:
        raise SourceError(f"PyPI JSON API: cannot read onnxruntime-qnn releases: {type(e).__name__}") from None
    mine = Version(sdk.onnxruntime_qnn)
    ort = []
    for v in releases:
        try:
            pv = Version(v)
        except InvalidVersion:
            continue
        if pv > mine and not pv.is_prerelease and releases[v]:
            ort.append(v)
    return Updates(qairt=qairt, onnxruntime_qnn=sorted(ort, key=Version, reverse=True))


def apply_updates(loaded: LoadedMatrix, updates: Updates) -> list[str]:
    """Put the newest QAIRT first in sdk.qairt (pinned) and bump onnxruntime_qnn; re-render the workflows."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    from ..workflows.render import render_all, write

    _, lines = load_with_lines(loaded.path, "matrix file")
    text = loaded.path.read_text().splitlines(keepends=True)
    out = []
    if updates.onnxruntime_qnn:
        n = lines[("sdk", "onnxruntime_qnn")] - 1
        text[n] = re.sub(r"(onnxruntime_qnn:\s*)\S+", rf"\g<1>{updates.onnxruntime_qnn[0]}", text[n])
        out.append(f"onnxruntime_qnn -> {updates.onnxruntime_qnn[0]}")
    if updates.qairt:
        v = updates.qairt[0]
        first = loaded.matrix.sdk.qairt[0]
        meta = get_hf_file_metadata(hf_hub_url(first.hf_repo, f"v{v}.zip", revision="main"))
        sha = (meta.etag or "").strip('"')
        n = lines[("sdk", "qairt", 0)] - 1
        item = re.match(r"^(\s*)-", text[n])
        if item is None:  # a flow list (qairt: [{...}]) has no line of its own to add one before
            raise ConfigError(f"{loaded.path}:{n + 1}: sdk.qairt is not a block list (one '- version: ...' item "
                              f"a line): QAIRT {v} cannot be added to it", hint="write sdk.qairt as a block list")
        indent = item[1]
        block = [f"{indent}- version: {v}\n", f"{indent}  hf_repo: {first.hf_repo}\n",
                 f"{indent}  file: v{v}.zip\n", f"{indent}  revision: {meta.commit_hash}\n",
                 f"{indent}  sha256: {sha if re.fullmatch(r'[0-9a-f]{64}', sha) else 'null'}\n"]
        text[n:n] = block
        out.append(f"sdk.qairt: added {v} (revision {str(meta.commit_hash)[:12]}) as the default")
    write_atomic(loaded.path, "".join(text))
    fresh = load_matrix(loaded.path, loaded.catalog)  # still valid, or a one-line error
    written = write(fresh.root, render_all(fresh))
    out.append(f"re-rendered {len(written)} workflow file(s)")
    return out


def hub_pins(loaded: LoadedMatrix, version: str | None = None) -> tuple[str, str, str]:
    """(version, revision, sha256) of an sdk.qairt zip as the Hub states them, without downloading it:
    the commit ``main`` (or the pinned revision) resolves to, and the sha256 in the file's LFS metadata
    (``X-Linked-Etag``). The image build downloads the zip and refuses it unless it has that sha256."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    from .install import pick

    entry = pick(loaded, version)
    try:
        with unreachable_as(SourceError, f"{entry.hf_repo}: {entry.file}: the Hub did not answer",
                            hint="check hf_repo and file in sdk.qairt, and the network (HF_ENDPOINT)"):
            meta = get_hf_file_metadata(hf_hub_url(entry.hf_repo, entry.file, revision=entry.revision or "main"))
    except (HfHubHTTPError, OSError) as e:
        raise SourceError(f"{entry.hf_repo}: {entry.file}: the Hub did not answer: {clip(str(e), 200)}",
                          hint="check hf_repo and file in sdk.qairt, and the network") from None
    sha = (meta.etag or "").strip('"')
    commit = meta.commit_hash or ""
    if not re.fullmatch(r"[0-9a-f]{64}", sha) or not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise SourceError(f"{entry.hf_repo}: {entry.file}: the Hub states no sha256 and commit for it "
                          "(not an LFS file)",
                          hint=f"pin it from one checked download: qnn-release sdk fetch --version {entry.version} "
                               "--dest /tmp/qairt --record")
    return entry.version, commit, sha


@dataclass(frozen=True)
class Proposal:
    """What a bot's pull request is: its branch's prefix, title, commit message and the body's last line."""

    kind: str = "sdk-bump"
    title: str = "Bump the QNN SDK"
    message: str = "Bump the QNN SDK versions (qnn-release sdk check-updates --apply)"
    note: str = "The checks of this pull request rebuild every model with the new SDK."


SDK_PINS = Proposal(kind="sdk-pins", title="Pin the QNN SDK (revision and the Hub's sha256)",
                    message="Pin the QNN SDK: the revision and the sha256 the Hub states (qnn-release sdk pin)")


def tool_bump(tag: str) -> Proposal:
    return Proposal(kind="tool-bump", title=f"Upgrade qnn-release to {tag}",
                    message=f"Upgrade qnn-release to {tag} (qnn-release init --upgrade): the pin and the workflows it "
                            "renders",
                    note="The tool's pin (matrix/models.yaml `tool:`) moved and the workflows were rendered again by "
                         "that release of qnn-release. The checks of this pull request check the matrix and the "
                         "workflows with it, and rebuild every target with it, compared with the latest release "
                         "(sdk-bump-check.yaml); the next release is built by it.")


def open_pr(repo: str, base: str, *, token: str | None, root: Path, api_url: str | None = None,
            what: Proposal = Proposal()) -> str:
    """Commit the working tree's changes to a branch through the Git data API and open a pull request.

    Where the repository does not let Actions open pull requests (403, a setting off by default), the
    branch stays pushed and the answer says where to open the pull request by hand."""
    if not token:
        raise PublishError("no GitHub token", hint="set GITHUB_TOKEN (contents and pull-requests: write)")
    r = cmd.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise PublishError(f"{root}: not a git checkout: {clip(r.stderr, 200)}")
    changed = sorted(line[3:] for line in r.stdout.splitlines() if line[:2].strip() and not line.startswith(" D"))
    if not changed:
        return "nothing changed: no pull request"
    gh = GitHub(repo, token=token, api_url=api_url)
    base_sha = gh.call("GET", f"/repos/{repo}/git/ref/heads/{base}", f"read branch {base}").json()["object"]["sha"]
    commit = gh.call("GET", f"/repos/{repo}/git/commits/{base_sha}", f"read commit {base_sha}").json()
    entries = [{"path": p, "mode": "100755" if os.access(root / p, os.X_OK) else "100644", "type": "blob",
                "content": (root / p).read_text()} for p in changed]  # an executable (clients/) stays one
    tree = gh.call("POST", f"/repos/{repo}/git/trees", "create tree", expect=(201,),
                   json={"base_tree": commit["tree"]["sha"], "tree": entries})
    digest = hashlib.sha256("".join(e["path"] + e["content"] for e in entries).encode()).hexdigest()[:10]
    branch = f"qnn-release/{what.kind}-{digest}"
    new = gh.call("POST", f"/repos/{repo}/git/commits", "create commit", expect=(201,), json={
        "message": what.message, "tree": tree.json()["sha"], "parents": [base_sha]})
    ref = gh.call("POST", f"/repos/{repo}/git/refs", f"create branch {branch}", expect=(201, 422),
                  json={"ref": f"refs/heads/{branch}", "sha": new.json()["sha"]})
    if ref.status_code == 422:  # the branch exists from an earlier run: move it
        gh.call("PATCH", f"/repos/{repo}/git/refs/heads/{branch}", f"update branch {branch}",
                json={"sha": new.json()["sha"], "force": True})
    pr = gh.call("POST", f"/repos/{repo}/pulls", "open pull request", expect=(201, 403, 422), json={
        "title": what.title, "head": branch, "base": base,
        "body": "Opened by `qnn-release sdk open-pr`. Changed:\n" + "\n".join(f"- `{p}`" for p in changed)
                + f"\n\n{what.note}"})
    if pr.status_code == 422:
        return f"branch {branch} updated; its pull request already exists"
    if pr.status_code == 403:
        return (f"pushed branch {branch}; this repository does not let GitHub Actions open pull requests: open it "
                f"at https://github.com/{repo}/compare/{base}...{branch} (or allow it in Settings > Actions)")
    return f"opened {pr.json().get('html_url', pr.json().get('number'))} from {branch}"
