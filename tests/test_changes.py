"""#43 item 4: a push builds only the models it changed (`qnn-release changed`, main.yaml's `changes` job), in a
real git repository: an entry edited, a file a model reads, the SDK or the tool's pin, qnn-release's own source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.conftest import SDK_SECTION, run_cli


def _git(repo: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True, text=True).stdout.strip()


def _repo(tmp_path: Path, n: int = 3) -> Path:
    repo = tmp_path / "r"
    (repo / "models").mkdir(parents=True)
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    models = []
    for i in range(n):
        (repo / "models" / f"m{i}").mkdir()
        (repo / "models" / f"m{i}" / "g.onnx").write_bytes(b"graph %d" % i)
        models.append({"name": f"m{i}", "description": "d", "license": "MIT",
                       "source": {"kind": "path", "path": f"models/m{i}/g.onnx", "sha256": "0" * 64},
                       "graphs": [{"name": "g", "file": "g.onnx"}], "chips": ["SM8750"]})
    (repo / "matrix").mkdir()
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": models},
                                                                sort_keys=False))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    return repo


def _changed(repo: Path, base: str) -> tuple[list[str], str]:
    from ci_tools.workflows.changes import changed_models

    c = changed_models(repo, repo / "matrix" / "models.yaml", base)
    return c.models, c.why


def _commit(repo: Path) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "edit")
    return _git(repo, "rev-parse", "HEAD")


def test_a_push_builds_only_what_it_changed(tmp_path):
    repo = _repo(tmp_path)
    base = _git(repo, "rev-parse", "HEAD")
    assert _changed(repo, base)[0] == []
    m = yaml.safe_load((repo / "matrix" / "models.yaml").read_text())
    m["models"][1]["chips"] = ["SM8750", "SM8650"]  # one entry edited
    m["release"] = {"tag_pattern": "r*"}  # the release settings make no binary
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    _commit(repo)
    assert _changed(repo, base)[0] == ["m1"]
    (repo / "models" / "m2" / "g.onnx").write_bytes(b"retrained")  # a file a model reads
    _commit(repo)
    assert _changed(repo, base)[0] == ["m1", "m2"]
    (repo / "README.md").write_text("docs only")
    after = _commit(repo)
    assert _changed(repo, after)[0] == []
    m["sdk"]["onnxruntime_qnn"] = "2.8.0"  # what every model is made from
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    _commit(repo)
    models, why = _changed(repo, after)
    assert models == ["m0", "m1", "m2"] and "sdk or tool pin" in why
    # a base nobody can read, or none (a new branch): every model, and why
    assert _changed(repo, "f" * 40)[0] == ["m0", "m1", "m2"]
    assert "new branch" in _changed(repo, "0" * 40)[1]


def test_qnn_releases_own_source_rebuilds_every_model_and_the_output_is_sharded(tmp_path):
    repo = _repo(tmp_path)
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "ci_tools").mkdir()
    (repo / "ci_tools" / "prepare.py").write_text("# the prepare code\n")
    _commit(repo)
    models, why = _changed(repo, base)
    assert models == ["m0", "m1", "m2"] and "ci_tools/prepare.py" in why
    out = tmp_path / "out"
    r = run_cli("changed", "--matrix", str(repo / "matrix" / "models.yaml"), "--base", base,
                "--github-output", str(out))
    assert r.returncode == 0, r.stderr
    lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert json.loads(lines["models1"]) == ["m0", "m1", "m2"] and lines["count"] == "3"
    from ci_tools.workflows.changes import Changes, github_output

    text = github_output(Changes([f"x{i:03d}" for i in range(300)], ""), 2, 256)
    assert [len(json.loads(line.split("=", 1)[1])) for line in text.splitlines()[:2]] == [256, 44]


def test_a_model_of_an_included_file_is_built_when_it_changes(tmp_path):
    repo = _repo(tmp_path, n=1)
    (repo / "models" / "v").mkdir()
    (repo / "models" / "v" / "g.onnx").write_bytes(b"voice")
    voice = {"name": "voice", "description": "d", "license": "MIT",
             "source": {"kind": "path", "path": "models/v/g.onnx", "sha256": "0" * 64},
             "graphs": [{"name": "g", "file": "g.onnx"}], "chips": ["SM8750"]}
    (repo / "matrix" / "tts.yaml").write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": [voice]}))
    m = yaml.safe_load((repo / "matrix" / "models.yaml").read_text())
    m["include"] = ["tts.yaml"]
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    base = _commit(repo)
    voice["chips"] = ["SM8650"]
    (repo / "matrix" / "tts.yaml").write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": [voice]}))
    _commit(repo)
    assert _changed(repo, base)[0] == ["voice"]


def test_the_base_is_the_last_successful_run_when_github_says_one(tmp_path):
    """A pending run GitHub cancelled (a newer push of the concurrency group queued) must not lose its models: the
    push is compared with the commit of main.yaml's last successful run, not only with its own `before`."""
    import os

    from tests.fakes.fake_github import FakeGitHub

    repo = _repo(tmp_path)
    built = _git(repo, "rev-parse", "HEAD")  # the last push main.yaml built
    m = yaml.safe_load((repo / "matrix" / "models.yaml").read_text())
    m["models"][0]["chips"] = ["SM8650"]  # a push whose run was cancelled while pending
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    cancelled = _commit(repo)
    (repo / "README.md").write_text("docs")  # the newer push: its `before` is the cancelled one
    _commit(repo)
    matrix = str(repo / "matrix" / "models.yaml")
    with FakeGitHub() as gh:
        gh.state.runs = [{"workflow": "main.yaml", "status": "success", "head_branch": "main", "head_sha": built}]
        env = {**os.environ, "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": gh.state.token}
        r = run_cli("changed", "--matrix", matrix, "--base", cancelled, "--since-success", "acme/models", env=env)
    assert r.returncode == 0 and r.stdout.split() == ["m0"], r.stdout + r.stderr
    r = run_cli("changed", "--matrix", matrix, "--base", cancelled)  # its own `before` alone would miss it
    assert r.returncode == 0 and r.stdout.split() == [], r.stdout
