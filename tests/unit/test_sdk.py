"""`sdk fetch` / `sdk env` against a local Hugging Face-compatible server (HF_ENDPOINT).

The unit tier of tests/test_sdk.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import pytest
import yaml

from tests.support.sdk import BLOCK, FLOW, REPO_ID, VERSION


def test_env_lines_add_no_empty_entry_and_no_duplicates(tmp_path):
    from ci_tools.sdk.install import env_lines

    root = tmp_path / "qairt" / VERSION
    bin_dir = f"{root}/bin/x86_64-linux-clang"
    lines = dict(line.split("=", 1) for line in env_lines(root, {"PATH": f"{bin_dir}:/usr/bin"}))
    assert lines["PATH"] == f"{bin_dir}:/usr/bin"  # a second `sdk env` does not grow PATH
    assert lines["LD_LIBRARY_PATH"] == f"{root}/lib/x86_64-linux-clang"  # no trailing ':' (the cwd)
    assert lines["PYTHONPATH"] == f"{root}/lib/python" and "ANDROID_NDK_ROOT" not in lines


@pytest.mark.parametrize("text", [FLOW, BLOCK, BLOCK.replace("      revision:\n", ""),
                                  FLOW.replace(".zip}", ".zip, revision: null, sha256: '%s'}" % ("c" * 64))])
def test_set_scalars_adds_or_updates_keys_in_any_layout(tmp_path, text):
    from ci_tools.util.yaml_edit import set_scalars

    rev, sha = "1" * 40, "0123456789" * 6 + "abcd"
    out = set_scalars(tmp_path / "m.yaml", text, ("sdk", "qairt", 0), {"revision": rev, "sha256": sha})
    data = yaml.safe_load(out)
    assert data["sdk"]["qairt"][0] == {"version": VERSION, "hf_repo": REPO_ID, "file": f"v{VERSION}.zip",
                                       "revision": rev, "sha256": sha}
    kept = [line for line in text.splitlines() if "#" in line]
    assert all(any(c.split("#", 1)[1] in o for o in out.splitlines()) for c in kept)  # comments stay
    assert list(data) == ["version", "sdk"] and list(data["sdk"]) == ["qairt", "onnxruntime_qnn"]
    again = set_scalars(tmp_path / "m.yaml", out, ("sdk", "qairt", 0), {"revision": rev, "sha256": sha})
    assert again == out
