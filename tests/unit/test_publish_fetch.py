"""publish and fetch against a local GitHub-compatible server, with faults injected.

The unit tier of tests/test_publish_fetch.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

from ci_tools.errors import PackageError

REPO, TAG = "acme/models", "v1.0.0"


def test_an_error_message_spanning_lines_is_printed_as_one(monkeypatch, capsys, tmp_path):
    import ci_tools.release.fetch
    from ci_tools.cli import app as cli
    from ci_tools.cli.app import main

    monkeypatch.setattr(cli, "_stop_on_sigterm", lambda: None)  # leave pytest's own SIGTERM handling alone

    def refuse(*a, **k):
        raise PackageError("x.tar.bz2: refused: first\n  second\n\nthird", hint="a hint")

    monkeypatch.setattr(ci_tools.release.fetch, "fetch_model", refuse)
    code = main(["fetch", "--release", f"{REPO}@{TAG}", "--model", "vad", "--soc", "SM8750", "--dest", str(tmp_path)])
    # (a fake server thread of an earlier test may still print to stderr: look at our lines only)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("qnn-release")]
    assert code == 9 and err == ["qnn-release: error: x.tar.bz2: refused: first second third (hint: a hint)"]
