"""#43: a team adopts qnn-release from a repository of its own: `init` in an empty git repository writes a matrix
pinned to one commit of qnn-release and the workflows rendered from it, nothing of qnn-release's source; a model of
their own is added; the release pipeline runs through the rendered workflows (tests/support/workflow_runner.py), the
tool coming from a local copy standing in for the pinned commit, through package and publish to the stand-in GitHub;
an upgrade moves the pin and nothing else."""

from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_cli
from tests.fakes.fake_github import FakeGitHub
from tests.fakes.fake_qairt import make_fake_sdk
from tests.support import models
from tests.support.workflow_runner import Runner

TOOL_REPO, OLD, NEW = "acme/qnn-release", "1" * 40, "2" * 40
OWNER_REPO = "Acme-Labs/speech-models"
PINNED = f"ghcr.io/acme-labs/qnn-sdk:2.40.0.251030-0123456789ab@sha256:{'c' * 64}"
# what qnn-release's own repository has and an adopter's must not
OURS = ("ci_tools", "templates", "tests", ".ci", "Dockerfile-2.40", "pyproject.toml", "constraints.txt", "docs")


def _tool(tmp: Path) -> Path:
    """A checkout of qnn-release at the pinned commit (what actions/checkout fetches on GitHub)."""
    tool = tmp / "tool"
    for name in ("ci_tools", "templates"):
        # symlinks: ci_tools/_data links into this copy, as in a git checkout
        shutil.copytree(REPO / name, tool / name, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    for name in ("pyproject.toml", "README.md", "Dockerfile-2.40", "constraints.txt"):
        shutil.copy2(REPO / name, tool / name)
    (tool / "matrix").mkdir()
    for name in ("socs.yaml", "models.yaml"):
        shutil.copy2(REPO / "matrix" / name, tool / "matrix" / name)
    return tool


def _adopt(tmp: Path) -> Path:
    repo = tmp / "speech-models"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    r = run_cli("init", "--tool", f"{TOOL_REPO}@{OLD}", "--version", "v0.2.0", cwd=repo)
    assert r.returncode == 0, r.stderr
    assert "adopted: matrix/models.yaml pins acme/qnn-release@111111111111 (v0.2.0)" in r.stdout
    return repo


def _add_own_model(repo: Path) -> None:
    """Their own model, a local file, in place of the starter's; the SDK pinned (sdk-pin.yaml's pull request)."""
    (repo / "models").mkdir()
    f = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    from ci_tools.sources.store import sha256_file

    matrix = yaml.safe_load((repo / "matrix" / "models.yaml").read_text())
    matrix["sdk"]["qairt"][0].update(revision="a" * 40, sha256="b" * 64)
    matrix["models"] = [{"name": "m", "description": "our model", "license": "MIT",
                         "source": {"kind": "path", "path": "models/m.onnx", "sha256": sha256_file(f)},
                         "graphs": [{"name": "enc", "file": "m.onnx"}], "chips": ["SM8750"],
                         "generated_inputs_ok": "a random-weight test MLP: it has no data of its own"}]
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))


def test_init_writes_a_matrix_and_workflows_and_no_source(tmp_path):
    repo = _adopt(tmp_path)
    assert not [n for n in OURS if (repo / n).exists()]
    assert ".qnn-release-tool/" in (repo / ".gitignore").read_text()
    matrix = yaml.safe_load((repo / "matrix" / "models.yaml").read_text())
    assert matrix["tool"] == {"repository": TOOL_REPO, "ref": OLD, "version": "v0.2.0"}
    assert run_cli("render", "--check", cwd=repo).returncode == 0  # the matrix found from the working directory
    actions = yaml.safe_load((REPO / "templates" / "workflows" / "actions.yaml").read_text())
    for wf in sorted((repo / ".github" / "workflows").glob("*.yaml")):
        doc = yaml.safe_load(wf.read_text())
        for job_id, job in doc["jobs"].items():
            uses = job.get("uses")
            if uses:  # a reusable workflow of this repository
                assert (repo / ".github" / "workflows" / uses.rsplit("/", 1)[1]).is_file(), (wf.name, job_id)
                continue
            for step in job["steps"]:
                action = step.get("uses", "")
                if action:  # every action pinned by commit, from the one list
                    name, _, sha = action.partition("@")
                    assert actions[name]["sha"] == sha, (wf.name, action)
                if action.startswith("actions/checkout@") and "repository" in step.get("with", {}):
                    # the pinned tool; tool-bump.yaml also checks out the newer release it found, beside it
                    new = (wf.name, step["with"].get("path")) == ("tool-bump.yaml", ".qnn-release-tool-new")
                    assert step["with"] == {"repository": TOOL_REPO, "persist-credentials": False, **(
                        {"ref": "${{ steps.latest.outputs.ref }}", "path": ".qnn-release-tool-new"} if new else
                        {"ref": OLD, "path": ".qnn-release-tool"})}
                run = step.get("run", "")
                # the tool's files only from its checkout, never from this repository
                assert not re.search(r"(?<![\w/.-])(constraints\.txt|Dockerfile-2\.40|\.ci/run|ci_tools/)", run), run
                assert not re.search(r"-e \.(\s|$|\[)", run) and "-e '.[" not in run, run
    ci = (repo / ".github" / "workflows" / "ci.yaml").read_text()
    assert ".ci/run" not in ci and "render --check" in ci  # their CI checks their matrix, not our test suite
    # adopting twice, or inside qnn-release itself, is refused in one line
    r = run_cli("init", "--tool", f"{TOOL_REPO}@{OLD}", cwd=repo)
    assert r.returncode == 2 and "already has a matrix" in r.stderr
    r = run_cli("init", "--tool", "acme/qnn-release@v1", cwd=tmp_path)
    assert r.returncode == 2 and "full 40-hex commit" in r.stderr


def test_an_upgrade_moves_the_pin_and_nothing_else(tmp_path):
    repo = _adopt(tmp_path)
    _add_own_model(repo)
    assert run_cli("render", cwd=repo).returncode == 0
    before = {p: p.read_text() for p in (repo / ".github" / "workflows").glob("*.yaml")}
    matrix_before = (repo / "matrix" / "models.yaml").read_text()
    r = run_cli("init", "--upgrade", "--tool", f"{TOOL_REPO}@{NEW}", "--version", "v0.3.0", cwd=repo)
    assert r.returncode == 0, r.stderr
    matrix_after = (repo / "matrix" / "models.yaml").read_text()
    changed = [line for line in difflib.ndiff(matrix_before.splitlines(), matrix_after.splitlines())
               if line[:1] in "+-"]
    assert changed and all(re.match(r"^[+-]   (ref|version): ", line) for line in changed), changed
    assert yaml.safe_load(matrix_after)["tool"] == {"repository": TOOL_REPO, "ref": NEW, "version": "v0.3.0"}
    for path, text in before.items():  # only the pin (and the version shown) changed in every workflow
        assert path.read_text().replace(NEW, OLD).replace("v0.3.0", "v0.2.0") == text, path.name
    assert any(NEW in p.read_text() for p in before)
    assert run_cli("render", "--check", cwd=repo).returncode == 0


@pytest.mark.timeout(900)
def test_an_adopted_repository_releases_through_its_workflows_with_the_pinned_tool(tmp_path):
    repo = _adopt(tmp_path)
    _add_own_model(repo)
    assert run_cli("render", cwd=repo).returncode == 0
    # the image job's reference: the recipe (Dockerfile, what it copies) is the tool's, which the repository lacks
    r = run_cli("image", "--owner", "Acme-Labs", cwd=repo)
    assert r.returncode == 0 and "ref=ghcr.io/acme-labs/qnn-sdk:" in r.stdout, r.stderr
    sdk = make_fake_sdk(tmp_path / "sdk")
    wf = repo / ".github" / "workflows"
    with FakeGitHub() as gh:
        runner = Runner.tag_push(repo, tmp_path / "runner", gh, sdk, image=PINNED, repository=OWNER_REPO,
                                 tools={f"{TOOL_REPO}@{OLD}": _tool(tmp_path)})
        export, release = wf / "qnn-export.yaml", wf / "release.yaml"
        assert runner.job(export, "precompile"), "\n".join(runner.log[-3:])
        (chip,) = json.loads(runner.context["needs.precompile.outputs.jobs1"])["include"]
        assert runner.job(export, "compile", chip), "\n".join(runner.log[-3:])
        for job in ("device-numbers", "package", "attest", "publish"):
            assert runner.job(release, job), "\n".join(runner.log[-3:])
        (rel,) = gh.releases(OWNER_REPO, "v1.0.0")
        names = set(gh.asset_names(rel["id"]))
    assert rel["draft"] is False and any(n.startswith("m-sm8750-fp16-") for n in names), names
    # every job ran the tool from its pinned checkout, in a job folder holding only the adopter's files
    jobs = sorted((tmp_path / "runner").glob("job*/repo"))
    assert jobs and not any((j / "ci_tools").exists() for j in jobs)
    assert {j.parent.name.split("-", 1)[1] for j in jobs if (j / ".qnn-release-tool" / "ci_tools").is_dir()} >= {
        "precompile", "compile", "package", "publish"}


def test_tool_bump_proposes_the_newest_tool_release_as_a_pull_request(tmp_path):
    """#43: an adopter's tool-bump.yaml, through the workflow runner against the stand-in GitHub. The newest
    qnn-release-vX.Y.Z release of the pinned repository (not a model release of it, a draft or a pre-release, and
    by version, not by date) is checked out, moves the pin and renders the workflows; the change is a pull
    request. A pin at that release already does nothing."""
    repo = _adopt(tmp_path)
    wf = repo / ".github" / "workflows"
    assert (wf / "tool-bump.yaml").is_file() and not (wf / "tool-release.yaml").exists()  # the tool's own only
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "adopt"],
                   check=True)
    tool = _tool(tmp_path)
    with FakeGitHub() as gh:
        gh.add_release(TOOL_REPO, "qnn-release-v0.10.0", NEW)
        gh.add_release(TOOL_REPO, "qnn-release-v0.9.0", "9" * 40)  # published later, an older version
        gh.add_release(TOOL_REPO, "v5.0.0", "5" * 40)  # the tool's repository releasing models
        gh.add_release(TOOL_REPO, "qnn-release-v0.11.0", "6" * 40, prerelease=True)
        gh.add_release(TOOL_REPO, "qnn-release-v0.12.0", "7" * 40, draft=True)
        runner = Runner(repo=repo, work=tmp_path / "runner", git=True,
                        tools={f"{TOOL_REPO}@{OLD}": tool, f"{TOOL_REPO}@{NEW}": tool},
                        context={"github.event.repository.fork": False, "github.token": "",
                                 "secrets.SDK_BUMP_TOKEN": gh.state.token},
                        env={"GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": OWNER_REPO})
        assert runner.job(wf / "tool-bump.yaml", "tool-bump"), "\n".join(runner.log[-3:])
        (pr,) = gh.state.pulls
        assert pr["title"] == "Upgrade qnn-release to qnn-release-v0.10.0" and pr["head"].startswith(
            "qnn-release/tool-bump-"), pr
        tree = gh.state.objects[gh.state.objects[gh.state.refs[f"heads/{pr['head']}"]]["tree"]]
        files = {e["path"]: e["content"] for e in tree["tree"]}
        assert "matrix/models.yaml" in files and any(p.startswith(".github/workflows/") for p in files), sorted(files)
        assert yaml.safe_load(files["matrix/models.yaml"])["tool"] == {
            "repository": TOOL_REPO, "ref": NEW, "version": "qnn-release-v0.10.0"}
        assert not any(".qnn-release-tool" in p for p in files)  # the checkouts are never committed
        assert all(OLD not in text for text in files.values()), [p for p, t in files.items() if OLD in t]

        # the pin at the newest release proposes nothing
        from ci_tools.matrix.schema import Tool
        from ci_tools.release.github import Connection
        from ci_tools.workflows.adopt import newer_tool

        assert newer_tool(Tool(repository=TOOL_REPO, ref=NEW), Connection(api_url=gh.url)) is None
        assert newer_tool(Tool(repository=TOOL_REPO, ref=OLD), Connection(api_url=gh.url)).commit == NEW
        # a pin past the newest release (init from a checkout's HEAD, its version newer) is never moved back
        assert newer_tool(Tool(repository=TOOL_REPO, ref="3" * 40, version="qnn-release-v0.10.1"),
                          Connection(api_url=gh.url)) is None
