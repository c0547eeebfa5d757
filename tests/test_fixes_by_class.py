"""Declared fixes closed by class (#40 item 5), on a graph of our own with the four patterns the issue met: a
dynamically quantized Conv (ConvInteger), a bare Erf, an int8 table read through a Transpose before its
DequantizeLinear, a float64 tail (Cast to DOUBLE -> Softmax)."""

from __future__ import annotations

import json
import os

from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models


def _build(tmp_path, fixes, name):
    repo = tmp_path / "repo"
    f = models.paddle_like_export(repo / "models" / "pl.onnx") if not (repo / "models" / "pl.onnx").exists() \
        else repo / "models" / "pl.onnx"
    matrix = write_matrix(repo, [path_model(repo, "pl", f, chips=["SM8750"],
                                            graphs=[{"name": "main", "file": "pl.onnx", "fixes": fixes}])])
    out = tmp_path / name
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    return r, t


def test_each_pattern_is_named_and_each_declared_fix_builds_it(tmp_path):
    (tmp_path / "repo" / "models").mkdir(parents=True)
    r, t = _build(tmp_path, ["dequantize"], "partly")
    assert r.returncode == 8 and "Traceback" not in r.stderr, r.stdout + r.stderr
    # the bare Erf is named with its fix; dequantize left nothing (onnxruntime-qnn 2.7 takes the float64 tail:
    # its doctor naming is tested on a rejection in tests/unit/test_fixes.py)
    assert "a bare Erf" in t["error"] and "fixes: [erf]" in t["error"], t["error"]
    assert "ConvInteger" not in t["error"] and "DequantizeLinear" not in t["error"]
    r, t = _build(tmp_path, ["dequantize", "erf", "float64"], "whole")
    assert r.returncode == 0, r.stdout + r.stderr
    assert t["status"] == "ok" and t["verified"]
    prep = json.loads((tmp_path / "whole" / "build-report.json").read_text())["prepared"][0]
    notes = " ".join(prep["notes"])
    assert "1 dynamically quantized MatMul(s) and Conv(s)" in notes and "1 Erf(s) now Abs/Exp" in notes
    assert "1 int8 embedding(s) or tables read through layout ops" in notes and "fix float64:" in notes
