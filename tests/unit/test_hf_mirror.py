"""The Hugging Face mirror: every asset in ONE commit under <tag>/ (huggingface_hub's create_commit),

The unit tier of tests/test_hf_mirror.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from pathlib import Path

from huggingface_hub import CommitOperationAdd

from ci_tools.release.hf_mirror import mirror
from tests.support.hf_mirror import RecordingApi
from tests.support.release_fixture import make_release


def test_mirror_commits_every_asset_once(tmp_path):
    folder = make_release(tmp_path / "rel", "v3.0.0")
    api = RecordingApi()
    text = mirror(folder, "acme/qnn-models", "v3.0.0", api=api)
    (call,) = api.calls
    ops = call["operations"]
    assert all(isinstance(o, CommitOperationAdd) for o in ops)
    names = sorted(o.path_in_repo for o in ops)
    assert names == sorted(f"v3.0.0/{p.name}" for p in folder.iterdir() if p.is_file())
    assert call["repo_id"] == "acme/qnn-models" and "abc123" in text
    assert Path(ops[0].path_or_fileobj).is_file()
    assert mirror(folder, "acme/qnn-models", "v3.0.0", dry_run=True).startswith("would commit")
