"""Preparation cases: export commands, external data, constants, shape mismatches (real onnx/onnxsim/ORT).

The unit tier of tests/test_prepare.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import pytest

from ci_tools.errors import PrepareError
from ci_tools.prepare import graph as prepare_mod
from tests.conftest import path_model, write_matrix
from tests.support import models
from tests.support.prepare import _prepare


def test_large_graph_goes_to_external_data(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_mod, "EXTERNAL_DATA_ABOVE", 10_000)
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False, hidden=256)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"])])
    (p,) = _prepare(matrix, tmp_path / "cache")
    assert (p.path.parent / "graph.onnx.data").stat().st_size > 30_000
    assert p.path.stat().st_size < 10_000
    assert any("external data" in n for n in p.notes)
    assert p.parity["cosine"] > 0.9999


def test_constants_fold_an_input_and_shape_rank_is_checked(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=True)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"],
                                                graphs=[{"name": "g", "file": "m.onnx", "inputs": {"x": [1, 32, 1]}}])])
    with pytest.raises(PrepareError, match=r"m/g: inputs.x: shape \[1, 32, 1\] has rank 3"):
        _prepare(matrix, tmp_path / "c1")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"],
                                                graphs=[{"name": "g", "file": "m.onnx", "inputs": {"x": [1, 31]}}])])
    with pytest.raises(PrepareError, match=r"fixes this dimension to 32"):
        _prepare(matrix, tmp_path / "c2")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"],
                                                graphs=[{"name": "g", "file": "m.onnx", "inputs": {"nope": [1]}}])])
    with pytest.raises(PrepareError, match=r"the graph has no input 'nope'.*inputs: x"):
        _prepare(matrix, tmp_path / "c3")


def test_prepare_is_done_once(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"])])
    (a,) = _prepare(matrix, tmp_path / "c")
    stamp = a.path.stat().st_mtime_ns
    (b,) = _prepare(matrix, tmp_path / "c")
    assert b.sha256 == a.sha256 and b.path.stat().st_mtime_ns == stamp
