"""`qnn-release build` with the real ONNX Runtime QNN EP: real context binaries, verified on the emulator."""

from __future__ import annotations

import json
import os

import pytest

from ci_tools.compile import qnn_ep
from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")


def _report(out):
    return json.loads((out / "build-report.json").read_text())


def _env(cache):
    return {**os.environ, "QNN_RELEASE_CACHE": str(cache)}


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "models").mkdir()
    return tmp_path


def test_build_compiles_verifies_and_caches(repo, tmp_path):
    onnx_file = models.mlp(repo / "models" / "mlp.onnx")
    matrix = write_matrix(repo, [path_model(repo, "mlp", onnx_file,
                                            graphs=[{"name": "main", "file": "mlp.onnx", "inputs": {"x": [1, 32]}}],
                                            precisions=["fp16", "w8a16"], chips=["SM8750", "SM8550", "QCS9100"])])
    out, cache = tmp_path / "dist", tmp_path / "cache"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), "-j", "2", env=_env(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = _report(out)
    assert rep["status"] == "ok" and len(rep["targets"]) == 6
    for t in rep["targets"]:
        assert t["status"] == "ok" and t["verified"] is True
        assert t["parity"]["cosine"] > 0.99 and t["parity"]["nan_count"] == 0
        assert t["weight_scales"] == {"fp16": None, "w8a16": "per-channel"}[t["precision"]]
        folder = out / t["id"]
        info = qnn_ep.read_compat(folder / t["context_onnx"])
        expected = {"SM8750": (79, 69), "SM8550": (73, 43), "QCS9100": (73, 77)}[t["soc"]]
        assert (info.htp_arch, info.soc_model) == expected
        assert (folder / t["binaries"][0]).stat().st_size == t["size"] > 1000
    assert rep["prepared"][0]["inputs"] == [{"name": "x", "shape": [1, 32], "dtype": "float32"}]
    assert "summary" not in r.stderr and "mlp.main.sm8750.w8a16" in r.stdout

    # nothing changed: no compile work, the binaries are untouched
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*.bin")}
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(cache))
    assert r.returncode == 0, r.stderr
    assert {t["status"] for t in _report(out)["targets"]} == {"cached"}
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.bin")} == mtimes

    # --force rebuilds, here for one chip only
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), "--soc", "SM8550", "--force", env=_env(cache))
    assert {t["status"] for t in _report(out)["targets"]} == {"ok"}


def test_rejected_op_fails_with_node_named_and_others_continue(repo, tmp_path):
    good = models.mlp(repo / "models" / "good.onnx", dynamic_batch=False)
    bad = models.mlp(repo / "models" / "bad.onnx", dynamic_batch=False, op="Erf")
    matrix = write_matrix(repo, [path_model(repo, "good", good, chips=["SM8650"]),
                                 path_model(repo, "bad", bad, chips=["SM8650", "SM8550"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), "-j", "1", env=_env(tmp_path / "c"))
    assert r.returncode == 8, r.stderr
    rep = {t["id"]: t for t in _report(out)["targets"]}
    assert rep["good.main.sm8650.fp16"]["status"] == "ok"
    # one trial compile names the cause and the fix; no chip is compiled for the graph
    for soc in ("sm8650", "sm8550"):
        bad_t = rep[f"bad.main.{soc}.fp16"]
        assert bad_t["status"] == "failed" and "Erf x1 (act_erf)" in bad_t["error"] and bad_t["exit_code"] == 6
        assert "tanh approximation" in bad_t["error"] and "no chip was compiled" in bad_t["error"]
        assert bad_t["diagnosis"]["ops"] == {"Erf": 1} and bad_t["diagnosis"]["trial_soc"] == "SM8650"
        assert not (out / f"bad.main.{soc}.fp16").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".") and p.is_dir()], "temporary folders left behind"
    assert "Traceback" not in r.stderr


def test_fp16_for_v68_refused_before_any_work(repo, tmp_path):
    onnx_file = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(repo, [path_model(repo, "m", onnx_file, chips=["SM8350"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 2 and "fp16 for SM8350" in r.stderr
    assert not out.exists() and not (tmp_path / "c").exists()


def test_int64_inputs_become_int32_and_compile(repo, tmp_path):
    onnx_file = models.embedding(repo / "models" / "emb.onnx")
    matrix = write_matrix(repo, [path_model(repo, "emb", onnx_file,
                                            graphs=[{"name": "main", "file": "emb.onnx", "inputs": {"ids": [1, 12]}}],
                                            chips=["SM8750"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = _report(out)
    assert rep["prepared"][0]["inputs"] == [{"name": "ids", "shape": [1, 12], "dtype": "int32"}]
    assert any("int32" in n for n in rep["prepared"][0]["notes"])
    import onnx

    ctx = onnx.load(str(out / "emb.main.sm8750.fp16" / "main_ctx.onnx"))
    assert ctx.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT32


def test_dynamic_dimension_refused_naming_the_input(repo, tmp_path):
    onnx_file = models.mlp(repo / "models" / "dyn.onnx", dynamic_batch=True)
    matrix = write_matrix(repo, [path_model(repo, "dyn", onnx_file, chips=["SM8750"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 8
    err = _report(out)["targets"][0]["error"]
    assert "input 'x' still has a dynamic shape" in err and "graphs[].inputs" in err


def test_source_checksum_mismatch_fails_that_model(repo, tmp_path):
    onnx_file = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    model = path_model(repo, "m", onnx_file, chips=["SM8750"])
    model["source"]["sha256"] = "1" * 64  # a pin that is not the file (all zeros would be "not pinned yet")
    matrix = write_matrix(repo, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 8
    t = _report(out)["targets"][0]
    assert t["exit_code"] == 4 and "does not match the pin" in t["error"]
