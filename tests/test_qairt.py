"""The qairt route, driven against a fake QAIRT SDK tree whose tools check the documented flags."""

from __future__ import annotations

import json
import os
import sys

import onnx
import pytest

from tests import models
from tests.conftest import path_model, run_cli, write_matrix
from tests.fake_qairt import make_fake_sdk


@pytest.fixture
def sdk(tmp_path):
    return make_fake_sdk(tmp_path / "sdk")


def _env(tmp_path, sdk):
    return {**os.environ, "QNN_SDK_ROOT": str(sdk), "QNN_PYTHON": sys.executable,
            "QNN_RELEASE_CACHE": str(tmp_path / "cache")}


def _build(tmp_path, sdk, matrix, *extra):
    out = tmp_path / "dist"
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(out), *extra,
                env=_env(tmp_path, sdk))
    rep = json.loads((out / "build-report.json").read_text()) if (out / "build-report.json").exists() else None
    return r, rep, out


def test_qairt_converts_once_and_compiles_per_chip(tmp_path, sdk):
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=True)
    matrix = write_matrix(tmp_path, [path_model(
        tmp_path, "m", f, graphs=[{"name": "enc", "file": "m.onnx", "inputs": {"x": [1, 32]}}],
        precisions=["fp16", "w8a16"], chips=["SM8750", "SM8550", "QCS9100"], options={"vtcm_mb": 4})])
    r, rep, out = _build(tmp_path, sdk, matrix, "-j", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(rep["targets"]) == 6 and rep["sdk_version"] == "2.40.0.251030"
    for t in rep["targets"]:
        folder = out / t["id"]
        assert t["status"] == "ok" and t["verified"] is True and t["parity"]["cosine"] > 0.99
        assert t["binaries"] == ["enc.bin"] and t["context_onnx"] == "enc_ctx.onnx"
        cfg = json.loads((folder / "config" / "htp_config.json").read_text())
        soc_model = {"SM8750": 69, "SM8550": 43, "QCS9100": 77}[t["soc"]]
        assert cfg["devices"][0]["soc_id"] == soc_model and cfg["graphs"][0]["vtcm_mb"] == 4
        assert cfg["graphs"][0]["graph_names"] == ["enc"] and cfg["graphs"][0]["O"] == 3
        stub = onnx.load(str(folder / "enc_ctx.onnx"))
        (node,) = stub.graph.node
        attrs = {a.name: (a.s.decode() if a.s else a.i) for a in node.attribute}
        assert node.op_type == "EPContext" and node.domain == "com.microsoft" and node.name == "enc"
        assert attrs["ep_cache_context"] == "enc.bin" and attrs["embed_mode"] == 0
        assert attrs["ep_sdk_version"] == "v2.40.0.251030"
        props = {p.key: p.value for p in stub.metadata_props}
        assert props["qnn_release.soc_model"] == str(soc_model)
        assert (folder / "logs" / "converter.log").read_text().startswith("$ ")
        assert "--float_bitwidth 16" in (folder / "logs" / "converter.log").read_text() or t["precision"] != "fp16"
    # conversion and model libraries ran once per graph and precision, not per chip
    converted = sorted(p.name for p in (tmp_path / "cache" / "work" / "prepared").rglob("qairt-*") if p.is_dir())
    assert len(converted) == 2
    lib_log = next((tmp_path / "cache").rglob("model-lib-generator.log")).read_text()
    assert "16 KB" not in lib_log  # LDFLAGS carried the 16 KB page flag, so the tool did not warn
    w8 = next(t for t in rep["targets"] if t["precision"] == "w8a16")
    assert w8["calibration_sha256"] and "--input_list" in (out / w8["id"] / "logs" / "converter.log").read_text()
    # all targets cached: the converter does not run again (as in the release job, fed from the store)
    import shutil

    for p in (tmp_path / "cache" / "work" / "prepared").rglob("qairt-*"):
        shutil.rmtree(p)
    r, rep, _ = _build(tmp_path, sdk, matrix)
    assert r.returncode == 0 and {t["status"] for t in rep["targets"]} == {"cached"}
    assert not list((tmp_path / "cache" / "work" / "prepared").rglob("qairt-*"))


def test_qairt_rejected_op_fails_with_the_node_named(tmp_path, sdk):
    (tmp_path / "models").mkdir()
    bad = models.mlp(tmp_path / "models" / "bad.onnx", dynamic_batch=False, op="Erf")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "bad", bad, chips=["SM8650"])])
    r, rep, out = _build(tmp_path, sdk, matrix)
    assert r.returncode == 8
    (t,) = rep["targets"]
    assert "Erf (act_erf)" in t["error"] and t["exit_code"] == 6 and "full log" in t["error"]
    assert not (out / t["id"]).exists()


def test_qairt_without_sdk_is_a_clear_error(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8650"])])
    env = {k: v for k, v in os.environ.items() if k != "QNN_SDK_ROOT"}
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(tmp_path / "d"), env=env)
    assert r.returncode == 11 and "QNN_SDK_ROOT" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(tmp_path / "d"),
                env={**env, "QNN_SDK_ROOT": str(tmp_path)})
    assert r.returncode == 11 and "qnn-context-binary-generator" in r.stderr
