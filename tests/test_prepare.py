"""Preparation cases: export commands, external data, constants, shape mismatches (real onnx/onnxsim/ORT)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from ci_tools.matrix.schema import load_matrix
from ci_tools.prepare.graph import prepare
from ci_tools.sources.store import SourceStore
from tests.conftest import REPO, path_model, run_cli, write_matrix
from tests.support import models

EXPORT_MLP = REPO / "tests" / "support" / "export_mlp.py"


def test_export_command_produces_the_graph(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    np.savez(repo / "models" / "ckpt.npz", w=np.random.default_rng(0).standard_normal((16, 4)))
    model = path_model(repo, "exp", repo / "models" / "ckpt.npz",
                       graphs=[{"name": "encoder", "file": "encoder.onnx"}], chips=["SM8650"],
                       export={"command": ["python", str(EXPORT_MLP), "{src}/ckpt.npz", "{out}"],
                               "outputs": ["encoder.onnx"]})
    matrix = write_matrix(repo, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "c")})
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((out / "build-report.json").read_text())
    assert rep["targets"][0]["status"] == "ok" and rep["prepared"][0]["outputs"][0]["shape"] == [1, 4]


def test_failing_export_is_reported(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    (repo / "models" / "ckpt.npz").write_bytes(b"not a checkpoint")
    model = path_model(repo, "exp", repo / "models" / "ckpt.npz", chips=["SM8650"],
                       graphs=[{"name": "encoder", "file": "encoder.onnx"}],
                       export={"command": ["python", str(EXPORT_MLP), "{src}/ckpt.npz", "{out}"],
                               "outputs": ["encoder.onnx"]})
    matrix = write_matrix(repo, [model])
    r = run_cli("build", "--matrix", str(matrix), "--out", str(tmp_path / "dist"),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "c")})
    assert r.returncode == 8, r.stderr
    t = json.loads((tmp_path / "dist" / "build-report.json").read_text())["targets"][0]
    assert "export command failed" in t["error"] and t["exit_code"] == 4


@pytest.mark.network
def test_demo_vad_prepares_against_the_published_graph(cache_dir):
    """The published silero-vad graph, fetched from its pinned wheel and checked against its sha256."""
    loaded = load_matrix()
    model = loaded.matrix.model("silero-vad")
    store = SourceStore(cache_dir, loaded.root)
    src = store.materialize(model, cache_dir / "src" / "silero-vad")
    p = prepare(model, model.graphs[0], src, cache_dir / "prepared", "demo")
    assert [(i.name, i.shape) for i in p.inputs] == [("input", [1, 576]), ("state", [2, 1, 128])]
    assert p.parity["cosine"] > 0.9999 and p.parity["nan_count"] == 0
    simplified = [n for n in p.notes if n.startswith("onnxsim: ")]
    assert simplified, p.notes
    before, after = map(int, re.findall(r"(\d+) -> (\d+) nodes", simplified[0])[0])
    nodes = __import__("onnx").load(str(p.path)).graph.node
    assert after <= before and len(nodes) <= after and not [n for n in nodes if n.op_type == "Constant"]


def test_a_padded_bidirectional_lstm_is_warned_of_in_inspect_and_the_record(tmp_path):
    """Issue #34 item 7, end to end: the build's record and `inspect` say what the warning says."""
    pytest.importorskip("onnxruntime_qnn")
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    onnx_file = models.bilstm_tagger(repo / "models" / "tagger.onnx")
    matrix = write_matrix(repo, [path_model(repo, "tagger", onnx_file, chips=["SM8750"],
                                            graphs=[{"name": "main", "file": "tagger.onnx",
                                                     "inputs": {"x": [32, 1, 8]}}])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "c")})
    rep = json.loads((out / "build-report.json").read_text())
    (t,) = rep["targets"]
    assert any(w.startswith("warning: recurrent layers over a fixed length") for w in t.get("warnings") or []), \
        r.stdout + r.stderr
    r = run_cli("inspect", str(onnx_file), "--soc", "SM8750", "--input", "x=32,1,8")
    assert "recurrent layers over a fixed length (x[0] = 32)" in r.stdout, r.stdout + r.stderr
