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
    marker = tmp_path / "hanging"
    # deterministic: one chip's compile never ends (the others are real builds), so the build is still running
    # when the signal comes, on any machine and under any load
    env = {**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache"), "TEST_BACKEND_MODE": "hang",
           "TEST_BACKEND_SOCS": "SM8650", "TEST_BACKEND_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "sitecustomize_backend"), str(REPO)])}
    proc = subprocess.Popen([sys.executable, "-m", "ci_tools", "build", "--matrix", str(matrix), "--out", str(out),
                             "-j", "2", "--backend", "interrupting"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not marker.exists() and proc.poll() is None:
        time.sleep(0.05)  # a worker is inside the hanging compile, writing its target
    if not marker.exists():
        proc.kill()
        pytest.fail(f"the hanging compile never started: {proc.communicate()[1][-2000:]}")
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
