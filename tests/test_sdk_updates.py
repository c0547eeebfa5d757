"""`sdk check-updates [--apply]` against local stand-ins for the Hub and PyPI; `sdk open-pr` against GitHub."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from ci_tools.sdk.updates import SDK_PINS, open_pr
from tests.conftest import DEMO_MATRIX, REPO, run_cli
from tests.fakes.fake_github import FakeGitHub
from tests.fakes.fake_hf import FakeHub

HF_REPO = "csukuangfj/qnn-toolkit"


@pytest.fixture
def repo(tmp_path):
    """A git checkout holding the demo matrix, catalog and templates."""
    root = tmp_path / "repo"
    (root / "matrix").mkdir(parents=True)
    shutil.copy(DEMO_MATRIX, root / "matrix" / "models.yaml")
    shutil.copytree(REPO / ".github", root / ".github")
    shutil.copy(REPO / "Dockerfile-2.40", root / "Dockerfile-2.40")
    shutil.copytree(REPO / "clients", root / "clients")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init"],
                   check=True)
    return root


def _env(hub):
    return {**os.environ, "HF_ENDPOINT": hub.url, "QNN_RELEASE_PYPI_URL": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1"}


def test_check_updates_lists_and_applies(repo):
    with FakeHub() as hub:
        hub.state.add_file(HF_REPO, "v2.40.0.251030.zip", b"old")
        hub.state.add_file(HF_REPO, "v2.39.0.250926.zip", b"older")
        commit = hub.state.add_file(HF_REPO, "v2.41.0.251128.zip", b"new sdk zip")
        hub.state.add_file(HF_REPO, "README.md", b"readme")
        commit = hub.state.repos[HF_REPO]["commit"]
        hub.state.pypi["onnxruntime-qnn"] = ["2.6.0", "2.7.0", "2.8.0rc1", "2.8.1"]
        matrix = repo / "matrix" / "models.yaml"
        r = run_cli("sdk", "check-updates", "--matrix", str(matrix), env=_env(hub))
        assert r.returncode == 0, r.stderr
        assert "newer QAIRT zip: v2.41.0.251128.zip" in r.stdout and "2.39" not in r.stdout
        assert "newer onnxruntime-qnn: 2.8.1" in r.stdout and "rc1" not in r.stdout
        before = matrix.read_text()
        r = run_cli("sdk", "check-updates", "--apply", "--matrix", str(matrix), env=_env(hub))
        assert r.returncode == 0, r.stderr
    sdk = yaml.safe_load(matrix.read_text())["sdk"]
    assert sdk["onnxruntime_qnn"] == "2.8.1"
    assert sdk["qairt"][0]["version"] == "2.41.0.251128" and sdk["qairt"][0]["revision"] == commit
    import hashlib

    assert sdk["qairt"][0]["sha256"] == hashlib.sha256(b"new sdk zip").hexdigest()
    assert sdk["qairt"][1]["version"] == "2.40.0.251030"
    assert "# The demo matrix" in matrix.read_text() and len(matrix.read_text()) > len(before)  # comments kept
    # the image the workflows will pull is the new SDK's (pinned, so `image` accepts it) ...
    r = run_cli("image", "--matrix", str(matrix), "--owner", "Acme")
    assert r.returncode == 0 and "ref=ghcr.io/acme/qnn-sdk:2.41.0.251128-" in r.stdout, r.stderr
    # ... and the bump changes the matrix only: no workflow holds a value it changes (.ci/run reads the
    # onnxruntime-qnn pin from the matrix), so a token without the Workflows permission can push it
    changed = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert [ln[3:] for ln in changed.stdout.splitlines()] == ["matrix/models.yaml"]
    assert run_cli("render", "--check", "--matrix", str(matrix)).returncode == 0


def test_nothing_newer(repo):
    with FakeHub() as hub:
        hub.state.add_file(HF_REPO, "v2.40.0.251030.zip", b"old")
        hub.state.pypi["onnxruntime-qnn"] = ["2.7.0"]
        r = run_cli("sdk", "check-updates", "--matrix", str(repo / "matrix" / "models.yaml"), env=_env(hub))
    assert r.returncode == 0 and "has the newest" in r.stdout


def test_open_pr_commits_changes_through_the_api(repo):
    (repo / "matrix" / "models.yaml").write_text((repo / "matrix" / "models.yaml").read_text() + "\n# bumped\n")
    (repo / "clients").mkdir(exist_ok=True)
    (repo / "clients" / "fetch.sh").write_text("#!/bin/sh\n")  # an executable stays one (a tool bump re-renders it)
    (repo / "clients" / "fetch.sh").chmod(0o755)
    with FakeGitHub() as gh:
        text = open_pr("acme/models", "main", token=gh.state.token, root=repo, api_url=gh.url)
        assert text.startswith("opened ")
        (pr,) = gh.state.pulls
        assert pr["base"] == "main" and pr["head"].startswith("qnn-release/sdk-bump-")
        assert "`matrix/models.yaml`" in pr["body"]
        commit = gh.state.objects[gh.state.refs[f"heads/{pr['head']}"]]
        assert commit["parents"] == ["c0" * 20]
        tree = gh.state.objects[commit["tree"]]
        assert [(e["path"], e["mode"]) for e in tree["tree"]] == [("clients/fetch.sh", "100755"),
                                                                   ("matrix/models.yaml", "100644")]
        assert tree["tree"][1]["content"].endswith("# bumped\n")
        # a second run updates the branch and does not open a second pull request
        assert "already exists" in open_pr("acme/models", "main", token=gh.state.token, root=repo, api_url=gh.url)
        assert len(gh.state.pulls) == 1


def test_a_first_push_pins_the_sdk_as_the_hub_states_it_without_downloading(repo):
    """A new repository: the matrix names the zip without pins. `image --allow-unpinned` (any run but a tag)
    builds nothing and says so; `sdk pin --record` writes the commit and the sha256 of the Hub's LFS metadata;
    `open-pr --pins` proposes them, or leaves the branch pushed with a link when Actions may not open PRs."""
    import hashlib

    matrix = repo / "matrix" / "models.yaml"
    r = run_cli("image", "--matrix", str(matrix), "--owner", "Acme")
    assert r.returncode != 0 and "no revision and no sha256 pin" in r.stderr  # what a tag does
    r = run_cli("image", "--matrix", str(matrix), "--owner", "Acme", "--allow-unpinned")
    assert r.returncode == 0 and r.stdout.strip() == "unpinned=true" and "sdk-pin.yaml" in r.stderr
    with FakeHub() as hub:
        hub.state.add_file(HF_REPO, "v2.40.0.251030.zip", b"the sdk zip")
        commit = hub.state.repos[HF_REPO]["commit"]
        r = run_cli("sdk", "pin", "--record", "--matrix", str(matrix), env=_env(hub))
        assert r.returncode == 0, r.stderr
        assert "the sha256 the Hub states" in r.stdout and "not computed here" in r.stdout
        r = run_cli("sdk", "pin", "--record", "--matrix", str(matrix), env=_env(hub))
        assert r.returncode == 0 and "is pinned" in r.stdout
        assert not [p for m, p in hub.state.log if m == "GET" and p.endswith(".zip")], "the zip was downloaded"
    sdk = yaml.safe_load(matrix.read_text())["sdk"]["qairt"][0]
    assert sdk["revision"] == commit and sdk["sha256"] == hashlib.sha256(b"the sdk zip").hexdigest()
    r = run_cli("image", "--matrix", str(matrix), "--owner", "Acme", "--allow-unpinned")
    assert r.returncode == 0 and "ref=ghcr.io/acme/qnn-sdk:2.40.0.251030-" in r.stdout
    with FakeGitHub() as gh:
        text = open_pr("acme/models", "main", token=gh.state.token, root=repo, api_url=gh.url, what=SDK_PINS)
        assert text.startswith("opened ") and gh.state.pulls[0]["head"].startswith("qnn-release/sdk-pins-")
