"""A half-finished build never looks finished: failures and Ctrl-C leave no target folder or temp file."""

from __future__ import annotations

import json

import pytest

from ci_tools.builder.orchestrate import BuildSettings, TargetFilter, build
from ci_tools.compile import backends
from ci_tools.matrix.schema import load_matrix
from tests.conftest import path_model, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")


@pytest.fixture
def matrix(tmp_path, monkeypatch):
    monkeypatch.setitem(backends.BACKENDS, "interrupting", "tests.support.interrupting_backend:InterruptingBackend")
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    return load_matrix(write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8550", "SM8650", "SM8750"])]))


def _leftovers(out):
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".") and p.is_dir())


def test_a_failing_target_leaves_nothing_and_others_finish(matrix, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_BACKEND_SOCS", "SM8650")
    out = tmp_path / "dist"
    report = build(matrix, BuildSettings(out=out, backend="interrupting", cache=tmp_path / "c"))
    status = {r.id: r.status for r in report.records}
    assert status == {"m.main.sm8550.fp16": "ok", "m.main.sm8650.fp16": "failed", "m.main.sm8750.fp16": "ok"}
    assert not (out / "m.main.sm8650.fp16").exists() and _leftovers(out) == []


def test_ctrl_c_leaves_no_finished_looking_target(matrix, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_BACKEND_SOCS", "SM8650")
    monkeypatch.setenv("TEST_BACKEND_MODE", "interrupt")
    out = tmp_path / "dist"
    with pytest.raises(KeyboardInterrupt):
        build(matrix, BuildSettings(out=out, backend="interrupting", cache=tmp_path / "c"))
    assert (out / "m.main.sm8550.fp16" / "target.json").exists()  # finished before the interrupt
    assert not (out / "m.main.sm8650.fp16").exists()
    assert not (out / "m.main.sm8750.fp16").exists()
    assert _leftovers(out) == []
    rep = json.loads((out / "build-report.json").read_text())
    assert rep["status"] == "interrupted"
    assert {t["id"]: t["status"] for t in rep["targets"]}["m.main.sm8650.fp16"] == "failed"

    # the next build picks up where it stopped: the finished target is cached
    monkeypatch.setenv("TEST_BACKEND_SOCS", "")
    report = build(matrix, BuildSettings(out=out, backend="interrupting", cache=tmp_path / "c"))
    assert {r.id: r.status for r in report.records}["m.main.sm8550.fp16"] == "cached"
    assert not report.failed


def test_one_build_per_output_folder(matrix, tmp_path):
    import fcntl

    from ci_tools.errors import QnnReleaseError

    out = tmp_path / "dist"
    out.mkdir()
    (out / ".m.main.sm8550.fp16.abcd1234").mkdir()  # left by a killed build
    with open(out / ".qnn-release.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(QnnReleaseError, match="another qnn-release build is writing here"):
            build(matrix, BuildSettings(out=out, backend="ort", cache=tmp_path / "c"))
    report = build(matrix, BuildSettings(out=out, backend="ort", cache=tmp_path / "c"), TargetFilter(soc="SM8550"))
    assert not report.failed and _leftovers(out) == []
