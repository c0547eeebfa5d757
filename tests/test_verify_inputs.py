"""Verification inputs and tolerances: real sample inputs (calibration.path) and absolute tolerances."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")


def _build(tmp_path, model):
    matrix = write_matrix(tmp_path, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    rep = json.loads((out / "build-report.json").read_text())
    return r, rep["targets"][0]


def test_near_zero_outputs_fail_with_a_useful_hint_even_within_a_tolerance(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.tiny_outputs(tmp_path / "models" / "t.onnx")
    strict = {"verify": {"fp16": {"max_abs": 1e-12}}}
    r, t = _build(tmp_path, path_model(tmp_path, "t", f, chips=["SM8750"], options=strict))
    assert r.returncode == 8 and t["exit_code"] == 7
    assert "near zero" in t["error"] and "options.verify.fp16.max_abs" in t["error"]
    assert "SNR" in t["error"] and "max abs error" in t["error"]
    # the default tolerance (1e-3) is no pass: the outputs are ~1e-7, so an all-zero binary would pass as well
    r, t = _build(tmp_path, path_model(tmp_path, "t", f, chips=["SM8750"]))
    assert r.returncode == 8 and "an all-zero output would pass too" in t["error"]
    assert "`samples:` in the matrix" in t["error"]


def test_real_inputs_from_calibration_path_verify_fp16(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    samples = tmp_path / "samples"
    samples.mkdir()
    rng = np.random.default_rng(5)
    for i in range(3):
        np.savez(samples / f"s{i}.npz", x=rng.standard_normal((1, 32)).astype(np.float64))  # cast to float32
    r, t = _build(tmp_path, path_model(tmp_path, "m", f, chips=["SM8650"], calibration={"path": "samples"}))
    assert r.returncode == 0, r.stderr
    assert t["verify_samples"] == 3
    np.savez(samples / "s9.npz", x=np.zeros((1, 31), dtype=np.float32))
    r, t = _build(tmp_path, path_model(tmp_path, "m", f, chips=["SM8650"], calibration={"path": "samples"}))
    assert r.returncode == 8 and "s9.npz: input x has shape [1, 31], the graph takes [1, 32]" in t["error"]
