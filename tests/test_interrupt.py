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

from ci_tools.builder.kept import KEPT
from ci_tools.builder.twin import TWINS
from tests.conftest import REPO, path_model, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_build_leaves_nothing_half_finished(tmp_path, how):
    _interrupted(tmp_path, how, "hang", jobs=2)


@pytest.mark.parametrize(("how", "jobs"), [("sigterm", 1), ("ctrl-c", 2)])
def test_native_compile_is_stopped_and_shows_it_is_alive(tmp_path, how, jobs):
    """A compile that never returns to Python and ignores SIGINT/SIGTERM (what a long native QNN compile did: 50 s
    deaf to a CI cancel) is stopped at once: heartbeats said it was alive, then the helper process is gone."""
    marker, err = _interrupted(tmp_path, how, "native-hang", jobs=jobs, wait_for="still running after")
    assert "compiling m" in err
    helper = int(marker.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(helper):
        time.sleep(0.05)
    assert not _alive(helper), "the helper process outlived the build"


def test_a_worker_deaf_to_sigterm_is_killed_and_its_work_folder_removed(tmp_path):
    """A worker stuck in native code that ignores SIGTERM (an emulator run) is killed after the grace period; its
    finally blocks never ran, and the build still leaves no hidden work folder (which held half a binary): the
    build removes the half-written folders of an interrupted run."""
    marker, _ = _interrupted(tmp_path, "sigterm", "worker-hang", jobs=2)
    worker = int(marker.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(worker):
        time.sleep(0.05)
    assert not _alive(worker), "the worker outlived the build"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _interrupted(tmp_path, how, mode, jobs, wait_for=None):
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False, hidden=512)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["phones", "iot", "auto"],
                                                precisions=["w8a16"])])
    out = tmp_path / "dist"
    marker = tmp_path / "hanging"
    # deterministic: one chip's compile never ends (the others are real builds), so the build is still running
    # when the signal comes, on any machine and under any load
    env = {**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache"), "TEST_BACKEND_MODE": mode,
           "TEST_BACKEND_SOCS": "SM8650", "TEST_BACKEND_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "sitecustomize_backend"), str(REPO)])}
    proc = subprocess.Popen([sys.executable, "-m", "ci_tools", "build", "--matrix", str(matrix), "--out", str(out),
                             "-j", str(jobs), "--backend", "interrupting"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not marker.exists() and proc.poll() is None:
        time.sleep(0.05)  # a worker is inside the hanging compile, writing its target
    if not marker.exists():
        proc.kill()
        pytest.fail(f"the hanging compile never started: {proc.communicate()[1][-2000:]}")
    lines: list[str] = []
    if wait_for is not None:  # read stderr until the line comes (the build goes on meanwhile)
        while not any(wait_for in x for x in lines):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    err = "".join(lines) + err
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.is_dir()] == []
    report = json.loads((out / "build-report.json").read_text())
    assert report["status"] == "interrupted"
    for folder in out.iterdir():
        if folder.is_dir() and folder.name not in (KEPT, TWINS):  # what the build keeps for package, written last
            record = json.loads((folder / "target.json").read_text())
            assert all((folder / f["name"]).is_file() for f in record["files"])
    return marker, err
