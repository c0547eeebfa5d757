"""A cached target is only ever what its key says (issue #34, items 2 and 3): a renamed model, or another model
with the same graph, is its own target, and a changed export script exports again. Real compiles (QNN EP)."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import REPO, path_model, run_cli, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")

GRAPH = [{"name": "main", "file": "mlp.onnx", "inputs": {"x": [1, 32]}}]


def _build(matrix, out, cache, *more):
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), *more,
                env={**os.environ, "QNN_RELEASE_CACHE": str(cache)})
    return r, json.loads((out / "build-report.json").read_text())


def test_a_renamed_model_and_a_second_model_of_the_same_graph_are_their_own_targets(tmp_path):
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    onnx_file = models.mlp(repo / "models" / "mlp.onnx")
    cache, out = tmp_path / "cache", tmp_path / "dist"
    matrix = write_matrix(repo, [path_model(repo, "mlp-a", onnx_file, graphs=GRAPH, chips=["SM8750"])])
    r, rep = _build(matrix, out, cache)
    assert r.returncode == 0, r.stdout + r.stderr

    # renamed, and a second model with the same graph: the store holds mlp-a's target, neither is served it
    matrix = write_matrix(repo, [path_model(repo, "mlp-b", onnx_file, graphs=GRAPH, chips=["SM8750"]),
                                 path_model(repo, "mlp-c", onnx_file, graphs=GRAPH, chips=["SM8750"])])
    r, rep = _build(matrix, out, cache)
    assert r.returncode == 0, r.stdout + r.stderr
    by_id = {t["id"]: t for t in rep["targets"]}
    assert set(by_id) == {"mlp-b.main.sm8750.fp16", "mlp-c.main.sm8750.fp16"}
    for target_id, t in by_id.items():
        on_disk = json.loads((out / target_id / "target.json").read_text())
        assert (t["model"], t["status"]) == (target_id.split(".")[0], "ok")
        assert (on_disk["id"], on_disk["model"]) == (target_id, t["model"])
    assert by_id["mlp-b.main.sm8750.fp16"]["key"] != by_id["mlp-c.main.sm8750.fp16"]["key"]
    # and the release of the renamed matrix packages (it failed "unknown model" on the old identity)
    r = run_cli("package", "--out", str(out), "--matrix", str(matrix))
    assert r.returncode == 0, r.stdout + r.stderr

    # the same matrix again: now they are cached, each under its own name
    r, rep = _build(matrix, out, cache)
    assert {(t["id"], t["status"]) for t in rep["targets"]} == {("mlp-b.main.sm8750.fp16", "cached"),
                                                                ("mlp-c.main.sm8750.fp16", "cached")}


def test_a_changed_export_script_exports_again(tmp_path):
    import numpy as np

    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    (repo / "scripts").mkdir()
    np.savez(repo / "models" / "ckpt.npz", w=np.random.default_rng(0).standard_normal((16, 4)))
    script = repo / "scripts" / "export.py"
    source = (REPO / "tests" / "support" / "export_mlp.py").read_text()
    script.write_text(source)
    model = path_model(repo, "exp", repo / "models" / "ckpt.npz", graphs=[{"name": "encoder", "file": "encoder.onnx"}],
                       chips=["SM8750"], export={"command": ["python", "scripts/export.py", "{src}/ckpt.npz", "{out}"],
                                                 "outputs": ["encoder.onnx"]})
    matrix = write_matrix(repo, [model])
    cache, out = tmp_path / "cache", tmp_path / "dist"
    r, first = _build(matrix, out, cache)
    assert r.returncode == 0, r.stdout + r.stderr
    r, again = _build(matrix, out, cache)
    assert [t["status"] for t in again["targets"]] == ["cached"]

    # the script now exports another graph (Sigmoid for Tanh), the matrix unchanged: no "1 cached, verified"
    script.write_text(source.replace('"Tanh"', '"Sigmoid"'))
    r, changed = _build(matrix, out, cache)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [t["status"] for t in changed["targets"]] == ["ok"]
    assert changed["prepared"][0]["sha256"] != first["prepared"][0]["sha256"]
    assert changed["targets"][0]["placement"]["ops"] == {"MatMul": 1, "Sigmoid": 1}


def test_a_failed_verification_keeps_its_binaries_and_a_new_threshold_judges_them_without_a_compile(tmp_path):
    """Issue #34 item 10: a long compile thrown away by a threshold. The failed target's binaries stay (never
    packaged: out/failed/<id>/), and the compile is kept by its own key: relaxing the threshold judges it again."""
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    onnx_file = models.mlp(repo / "models" / "mlp.onnx")
    cache, out = tmp_path / "cache", tmp_path / "dist"

    def matrix(min_cosine):
        # a bar nothing passes: the tolerance relative to the peak (#40) off too, as cosine 1.0 asks for exactness
        options = {"verify": {"fp16": {"min_cosine": min_cosine, "max_rel": 0}}} if min_cosine else {}
        return write_matrix(repo, [path_model(repo, "mlp", onnx_file, graphs=GRAPH, chips=["SM8750"],
                                              options=options)])

    r, rep = _build(matrix(1.0), out, cache)  # fp16 never gives a cosine of exactly 1 here
    (t,) = rep["targets"]
    assert r.returncode == 8 and t["status"] == "failed" and t["exit_code"] == 7, t
    assert not (out / t["id"]).exists() and any((out / "failed" / t["id"]).rglob("*.bin"))

    r, rep = _build(matrix(None), out, cache)
    (t,) = rep["targets"]
    assert r.returncode == 0 and t["status"] == "ok" and t["verified"] is True, t
    assert t["compile_reused"] is True  # the same binaries, judged again: no compile
    r, rep = _build(matrix(None), out, cache, "--force")  # --force compiles again, whatever is kept
    assert rep["targets"][0]["compile_reused"] is False and rep["targets"][0]["status"] == "ok"

    # a real change to what is compiled (another optimization level) compiles
    r, rep = _build(write_matrix(repo, [path_model(repo, "mlp", onnx_file, graphs=GRAPH, chips=["SM8750"],
                                                   options={"optimization_level": 2})]),
                    out, cache)
    assert rep["targets"][0]["compile_reused"] is False
