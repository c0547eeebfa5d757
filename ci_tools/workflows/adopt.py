"""``qnn-release init``: adopt qnn-release in a repository of your own, with a matrix and one pinned reference.

It writes ``matrix/models.yaml`` (one demo model to start from, the SDK pins, and ``tool:``: the qnn-release
repository and the full commit the workflows check out), the workflows rendered from it, the download clients, and
a ``.gitignore`` line for the tool's checkout: nothing of qnn-release's source. The repository's CI then checks its
matrix and workflows (``render --check``), not qnn-release's tests. ``--upgrade`` moves the pin (the ``tool:``
block, nothing else of the matrix) and renders again: the change an upgrade pull request holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import SourceError, UsageError
from ..paths import CHECKOUT, MATRIX_DATA, REPO_ROOT
from ..util.files import write_atomic
from ..util.git import git_out

DEMO = MATRIX_DATA / "models.yaml"
IGNORED = (".qnn-release-tool/", "dist/")
PIN = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)@(?P<ref>[0-9a-f]{40})$")


def own_pin() -> tuple[str, str, str | None]:
    """(OWNER/NAME, commit, tag or None) of the qnn-release checkout this runs from, from its git remote and HEAD."""
    def git(*argv: str) -> str:
        return (git_out(REPO_ROOT, *argv) or "").strip()

    url, ref = (git("remote", "get-url", "origin"), git("rev-parse", "HEAD")) if CHECKOUT else ("", "")
    found = re.search(r"github\.com[:/]([\w.-]+/[\w.-]+?)(\.git)?/?$", url)
    if not found or not re.fullmatch(r"[0-9a-f]{40}", ref):
        raise UsageError("--tool: this qnn-release is not a checkout of a GitHub repository, so there is nothing to "
                         "pin", hint="pass --tool OWNER/NAME@<40-hex commit> (a commit of qnn-release on GitHub)")
    return found[1], ref, git("describe", "--tags", "--exact-match") or None


def parse_pin(text: str) -> tuple[str, str]:
    found = PIN.match(text.strip())
    if not found:
        raise UsageError(f"--tool {text!r}: expected OWNER/NAME@<full 40-hex commit>",
                         hint="a tag can be moved, a commit cannot: `git rev-parse v1.2.0` gives the commit")
    return found["repo"], found["ref"]


ABOUT = ("# qnn-release itself, at one pinned commit: the workflows check it out beside this repository's files.\n"
         "# Upgrade: qnn-release init --upgrade --tool OWNER/NAME@<commit> (then commit the re-rendered workflows)\n")


def tool_block(repo: str, ref: str, version: str | None) -> str:
    return (# quoted: a commit of digits only would be read by YAML as a number
            f"tool:\n  repository: {repo}\n  ref: \"{ref}\"\n" + (f"  version: \"{version}\"\n" if version else ""))


def starter_matrix(repo: str, ref: str, version: str | None) -> str:
    """The demo matrix's SDK block and its first model, with the tool's pin: a matrix that builds as it is."""
    text = DEMO.read_text()
    sdk = text[text.index("sdk:"):text.index("\nmodels:")].rstrip() + "\n"
    models = text[text.index("\nmodels:") + 1:]
    starts = [m.start() for m in re.finditer(r"^  - name: ", models, re.M)]
    first = models[:starts[1]] if len(starts) > 1 else models
    return ("# Your release matrix: models x chips x precision. Add a model with `qnn-release inspect model.onnx`\n"
            "# (it prints a graphs[] entry), then `qnn-release render` and commit the workflows it writes.\n"
            "# Reference: https://github.com/" + repo + "/blob/" + ref + "/docs/reference/matrix.md\n"
            "version: 1\n\n" + sdk + "\n" + ABOUT + tool_block(repo, ref, version) + "\n" + first.rstrip() + "\n")


def init(root: Path, pin: str | None, version: str | None) -> Path:
    """A new adopter's files in ``root``; the matrix's path."""
    repo, ref, own = own_pin() if pin is None else (*parse_pin(pin), None)
    matrix = root / "matrix" / "models.yaml"
    if matrix.exists():
        raise UsageError(f"{matrix}: this repository already has a matrix",
                         hint="edit it and run `qnn-release render`; to move the tool's pin: init --upgrade")
    if (root / "ci_tools").is_dir():
        raise UsageError(f"{root}: this is a copy of qnn-release itself (it has ci_tools/)",
                         hint="adopt from a repository of your own: init writes a matrix and workflows, no source")
    write_atomic(matrix, starter_matrix(repo, ref, version or own))
    ignore = root / ".gitignore"
    have = ignore.read_text().splitlines() if ignore.is_file() else []
    missing = [line for line in IGNORED if line not in have]
    if missing:
        write_atomic(ignore, "\n".join([*have, *missing]) + "\n")
    return matrix


def upgrade(matrix: Path, pin: str | None, version: str | None) -> str:
    """The matrix with its ``tool:`` block moved to the new pin (comments and everything else kept); its text."""
    repo, ref, own = own_pin() if pin is None else (*parse_pin(pin), None)
    text = matrix.read_text()
    block = re.compile(r"^tool:\n(  .*\n)+", re.M)
    if not block.search(text):
        raise UsageError(f"{matrix}: no tool: block to move", hint="a repository adopts qnn-release with `init`; "
                         "qnn-release's own matrix has none (it is the tool)")
    new = block.sub(lambda _: tool_block(repo, ref, version or own), text, count=1)
    # the starter's link to the matrix reference follows the pin (the docs of the tool that renders it)
    new = re.sub(r"^(# Reference: https://github\.com/)[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/", rf"\g<1>{repo}/blob/{ref}/",
                 new, count=1, flags=re.M)
    write_atomic(matrix, new)
    return new


TOOL_TAG = re.compile(r"^qnn-release-v(\d+)\.(\d+)\.(\d+)$")  # what tool-release.yaml publishes
PINNED_VERSION = re.compile(r"^(?:qnn-release-)?v(\d+)\.(\d+)\.(\d+)$")  # a pin's `version`, when it is one


@dataclass(frozen=True)
class NewerTool:
    tag: str
    commit: str

    def pin(self, repository: str) -> str:
        return f"{repository}@{self.commit}"


def newer_tool(tool, via) -> NewerTool | None:
    """The newest published release of the pinned qnn-release (``qnn-release-vX.Y.Z`` tags: the repository also
    releases models under other tags; drafts and pre-releases never) when it is another commit than the pin and newer
    than the pin's version (where the pin has one); None when the pin is that commit, that version or newer, or
    nothing is released. The tag's commit comes from GitHub's "Get a commit"
    (an annotated tag resolves to its commit)."""
    gh = via.client(tool.repository, give_up=SourceError)
    tags = [(tuple(int(x) for x in m.groups()), rel["tag_name"]) for rel in gh.paginate(f"/repos/{gh.repo}/releases")
            if isinstance(rel, dict) and not rel.get("draft") and not rel.get("prerelease")
            and isinstance(rel.get("tag_name"), str) and (m := TOOL_TAG.match(rel["tag_name"]))]
    if not tags:
        return None
    version, tag = max(tags)
    pinned = PINNED_VERSION.match(tool.version or "")
    if pinned and version <= tuple(int(x) for x in pinned.groups()):
        return None  # the pin is that release or newer (a checkout's HEAD past it): never a downgrade
    commit = gh.call("GET", f"/repos/{gh.repo}/commits/{tag}", f"read the commit of {tag}").json().get("sha")
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise SourceError(f"{tool.repository}: release {tag} names no commit GitHub could give",
                          hint="look at the release on GitHub; upgrade by hand with init --upgrade --tool")
    return None if commit == tool.ref else NewerTool(tag=tag, commit=commit)
