"""Every command that reaches a network, against a closed port: one line naming what it tried to reach, a
documented exit code, never "internal error" (issue #34, item 11: huggingface_hub 2.x raises httpx2's
ConnectError, which `sdk pin`, `sdk check-updates` and a Hub source let through as exit 70)."""

from __future__ import annotations

import socket

import pytest

from ci_tools.cli.app import main
from tests.conftest import path_model, write_matrix
from tests.support.release_fixture import make_release


@pytest.fixture
def closed(monkeypatch, tmp_path):
    """A port nothing listens on, as every endpoint; no waiting between retries."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{s.getsockname()[1]}"
    s.close()
    for k, v in {"HF_ENDPOINT": url, "QNN_RELEASE_PYPI_URL": url, "GITHUB_API_URL": url, "GITHUB_TOKEN": "t0k3n",
                 "PIP_INDEX_URL": f"{url}/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
                 "QNN_RELEASE_CACHE": str(tmp_path / "cache"), "QNN_RELEASE_RETRY_BASE": "0.001",
                 "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}.items():
        monkeypatch.setenv(k, v)
    import huggingface_hub.utils._http as hub_http

    monkeypatch.setattr(hub_http.time, "sleep", lambda s: None)  # the Hub client's own five retries
    monkeypatch.setattr("ci_tools.cli.app._stop_on_sigterm", lambda: None)
    return url


def _hub_matrix(tmp_path):
    model = {"name": "hubbed", "description": "a model on the Hub", "license": "MIT",
             "source": {"kind": "hf", "repo": "acme/model", "revision": "a" * 40, "files": {"m.onnx": "b" * 64}},
             "graphs": [{"name": "main", "file": "m.onnx"}], "chips": ["SM8750"]}
    return write_matrix(tmp_path / "repo", [model])


def _pip_matrix(tmp_path):
    from tests.support import models

    (tmp_path / "repo" / "models").mkdir(parents=True)
    m = path_model(tmp_path / "repo", "x", models.mlp(tmp_path / "repo" / "models" / "mlp.onnx"), chips=["SM8750"])
    m["source"] = {"kind": "pip", "package": "no-such-model-wheel==1.0.0", "files": {"m.onnx": "c" * 64}}
    m["graphs"] = [{"name": "main", "file": "m.onnx"}]
    return write_matrix(tmp_path / "repo", [m])


COMMANDS = {
    "sdk check-updates": lambda tmp: ["sdk", "check-updates"],
    "sdk pin": lambda tmp: ["sdk", "pin"],
    "sdk fetch": lambda tmp: ["sdk", "fetch", "--dest", str(tmp / "qairt")],
    "build, a Hub source": lambda tmp: ["build", "--matrix", str(_hub_matrix(tmp)), "--out", str(tmp / "dist")],
    "build, a pip source": lambda tmp: ["build", "--matrix", str(_pip_matrix(tmp)), "--out", str(tmp / "dist")],
    "fetch": lambda tmp: ["fetch", "--release", "acme/models@v1.0.0", "--model", "vad", "--soc", "SM8750",
                          "--dest", str(tmp / "models")],
    "publish": lambda tmp: ["publish", str(make_release(tmp / "rel")), "--repo", "acme/models", "--tag", "v1.0.0"],
    "previous-manifest": lambda tmp: ["previous-manifest", "--repo", "acme/models", "--tag", "v1.1.0", "--out",
                                      str(tmp / "prev.json")],
    "pages": lambda tmp: ["pages", "--repo", "acme/models", "--out", str(tmp / "site")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_closed_port_is_one_line_with_its_exit_code(command, closed, tmp_path, capsys):
    argv = COMMANDS[command](tmp_path)
    code = main(argv)
    out = capsys.readouterr()
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert code not in (0, 70), (code, out.err)
    assert "internal error" not in out.err and "Traceback" not in out.err, out.err
    assert "t0k3n" not in out.err + out.out
    if command.startswith("build"):  # a build records each target's error and ends with the summary's exit code
        import json

        (target,) = json.loads((tmp_path / "dist" / "build-report.json").read_text())["targets"]
        assert code == 8 and target["exit_code"] == 4, target
        assert "unreachable" in target["error"] and "internal error" not in target["error"], target
    else:
        assert len(lines) == 1 and lines[0].startswith("qnn-release: error:"), out.err
