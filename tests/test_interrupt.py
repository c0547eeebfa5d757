"""Interrupting a real parallel build (Ctrl-C to the process group, or SIGTERM as CI cancels):
no temporary folder is left, every folder with a target.json is whole, the report says interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests import models
from tests.conftest import REPO, path_model, write_matrix

pytest.importorskip("onnxruntime_qnn")


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_build_leaves_nothing_half_finished(tmp_path, how):
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False, hidden=512)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["phones", "iot", "auto"],
                                                precisions=["w8a16"])])
    out = tmp_path / "dist"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "ci_tools", "build", "--matrix", str(matrix), "--out", str(out),
                             "-j", "2"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(out.glob(".m.main.*")):
        time.sleep(0.05)  # wait until a worker is writing a target
    assert any(out.glob(".m.main.*")), "no worker started"
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.is_dir()] == []
    report = json.loads((out / "build-report.json").read_text())
    assert report["status"] == "interrupted"
    for folder in out.iterdir():
        if folder.is_dir():
            record = json.loads((folder / "target.json").read_text())
            assert all((folder / f["name"]).is_file() for f in record["files"])
