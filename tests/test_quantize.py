"""Quantization for the ort route: what prepare keeps for it and what per-channel weights buy (real onnxsim/ORT)."""

from __future__ import annotations

import pytest

from tests.conftest import path_model, write_matrix
from tests.support import models


def test_a_failed_quantization_fails_every_chip_of_the_graph_but_runs_once(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime_qnn")
    from ci_tools.builder.orchestrate import BuildSettings, build
    from ci_tools.compile.backends import ort as ort_route
    from ci_tools.errors import CompileError
    from ci_tools.matrix.schema import load_matrix

    calls = []

    def failing(path, precision, samples, per_channel=True):
        calls.append(precision)
        raise CompileError(f"old/main: {precision} quantization failed: simulated")

    monkeypatch.setattr(ort_route, "quantize_graph", failing)
    (tmp_path / "models").mkdir()
    f = models.attention(tmp_path / "models" / "att.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "att", f, chips=["SM8750", "SM8650", "SM8550"],
                                                precisions=["w8a16"])])
    report = build(load_matrix(matrix), BuildSettings(out=tmp_path / "dist", cache=tmp_path / "cache"))
    assert calls == ["w8a16"]
    assert [t.status for t in report.records] == ["failed"] * 3
    assert all("w8a16 quantization failed: simulated" in t.error for t in report.records)


def test_a_channels_last_input_is_not_refused_for_the_q_onnx_runtime_adds(tmp_path):
    """Issue #34 item 1: the w8a16 trial refused `QuantizeLinear x_q`, the input quantization ONNX Runtime
    moves ahead of the NHWC -> NCHW Transpose (not a node of the user's graph); the binary runs and agrees."""
    pytest.importorskip("onnxruntime_qnn")
    import json
    import os

    from tests.conftest import run_cli

    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    onnx_file = models.channels_last_cnn(repo / "models" / "nhwc.onnx")
    matrix = write_matrix(repo, [path_model(repo, "nhwc", onnx_file, chips=["SM8750"], precisions=["w8a16"],
                                            graphs=[{"name": "main", "file": "nhwc.onnx"}])])
    r = run_cli("build", "--matrix", str(matrix), "--out", str(tmp_path / "dist"),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    (t,) = json.loads((tmp_path / "dist" / "build-report.json").read_text())["targets"]
    assert t["status"] == "ok" and t["verified"] is True and t["parity"]["cosine"] > 0.999, t
