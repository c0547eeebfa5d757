"""The Hugging Face mirror: every asset in ONE commit under <tag>/ (huggingface_hub's create_commit),
over HTTP against tests/fakes/fake_hf.py (HF_ENDPOINT), next to the GitHub publish."""

import os

from tests.conftest import run_cli
from tests.fakes.fake_github import FakeGitHub
from tests.fakes.fake_hf import FakeHub
from tests.support.release_fixture import make_release


def test_publish_mirrors_to_a_hub_in_one_commit_over_http(tmp_path):
    folder = make_release(tmp_path / "rel", "v1.0.0")
    with FakeGitHub() as gh, FakeHub() as hub:
        env = {**os.environ, "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": gh.state.token, "HF_ENDPOINT": hub.url,
               "HF_TOKEN": hub.state.token, "HF_HUB_DISABLE_TELEMETRY": "1"}
        r = run_cli("--verbose", "publish", str(folder), "--repo", "acme/models", "--tag", "v1.0.0",
                    "--hf-repo", "acme/qnn-models", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert hub.state.token not in r.stdout + r.stderr and gh.state.token not in r.stdout + r.stderr
        (commit,) = hub.state.commits
        files = hub.state.repos["acme/qnn-models"]["files"]
        local = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        assert commit["files"] == sorted(f"v1.0.0/{n}" for n in local)
        assert all(files[f"v1.0.0/{n}"] == data for n, data in local.items())
        r = run_cli("publish", str(folder), "--repo", "acme/models", "--tag", "v1.0.0", "--hf-repo", "acme/qnn-models",
                    env={**env, "HF_TOKEN": "hf_wrong"})
        assert r.returncode == 10 and "Hugging Face mirror" in r.stderr and "hf_wrong" not in r.stderr
