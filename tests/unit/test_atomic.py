"""A half-finished build never looks finished: failures and Ctrl-C leave no target folder or temp file.

The unit tier of tests/test_atomic.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations


def test_finished_files_and_folders_get_the_umask_modes_not_tempfiles(tmp_path):
    """tempfile makes 0700 folders and 0600 files; an upload step or a web server running as another user must
    read what a build finished, as it reads any other file."""
    import os
    import stat
    import tempfile
    from pathlib import Path

    from ci_tools.util.files import replace_dir, write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        tmp = Path(tempfile.mkdtemp(prefix=".t.", dir=tmp_path))  # 0700, as a target's folder starts
        write_json(tmp / "target.json", {})
        replace_dir(tmp, tmp_path / "done")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "done").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "done" / "target.json").stat().st_mode) == 0o644
