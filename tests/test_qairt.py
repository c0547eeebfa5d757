"""The qairt route, driven against a fake QAIRT SDK tree that behaves as the real tools do (each rule
of tests/fakes/fake_qairt/tools.py cites its source); one test or more per finding of the qairt audit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ci_tools.compile.backends import qairt
from tests.conftest import path_model, run_cli, write_matrix
from tests.fakes.fake_qairt import make_fake_sdk
from tests.support import models


@pytest.fixture
def sdk(tmp_path):
    return make_fake_sdk(tmp_path / "sdk")


def _env(tmp_path, sdk):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    return {**env, "QNN_SDK_ROOT": str(sdk), "QNN_PYTHON": sys.executable, "QNN_RELEASE_CACHE": str(tmp_path / "cache")}


def _build(tmp_path, sdk, matrix, *extra):
    out = tmp_path / "dist"
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(out), *extra,
                env=_env(tmp_path, sdk))
    rep = json.loads((out / "build-report.json").read_text()) if (out / "build-report.json").exists() else None
    return r, rep, out


def conv_model(path: Path, with_weights: bool = True) -> Path:
    """input.1 [1,3,8,8] NCHW -> Conv -> Relu -> 'feat/map' [1,4,8,8], and -> pool -> Gemm -> Softmax ->
    'probs:0' [1,2]: a 4-D output whose layout the converter may change, and a tiny 2-class output."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), "fc"),
             numpy_helper.from_array(np.array([1, 4], dtype=np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["input.1", "w"], ["c"], pads=[1, 1, 1, 1], name="conv/0"),
             helper.make_node("Relu", ["c"], ["feat/map"], name="relu"),
             helper.make_node("GlobalAveragePool", ["feat/map"], ["g"], name="pool"),
             helper.make_node("Reshape", ["g", "flat"], ["gf"], name="flatten"),
             helper.make_node("MatMul", ["gf", "fc"], ["logits"], name="fc"),
             helper.make_node("Softmax", ["logits"], ["probs:0"], axis=-1, name="softmax")]
    x = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, 8, 8])
    graph = helper.make_graph(nodes, "conv", [x],
                              [helper.make_tensor_value_info("feat/map", TensorProto.FLOAT, [1, 4, 8, 8]),
                               helper.make_tensor_value_info("probs:0", TensorProto.FLOAT, [1, 2])], inits)
    return models.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def no_weights_model(path: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    graph = helper.make_graph(nodes, "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    return models.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


# -- names (audit #6 and its correction) ---------------------------------------------------------------


# -- the whole route, fp16 and w8a16 --------------------------------------------------------------------


def test_qairt_fp16_and_w8a16_with_layout_names_and_quantized_io(tmp_path, sdk):
    (tmp_path / "models").mkdir()
    f = conv_model(tmp_path / "models" / "c.onnx")
    matrix = write_matrix(tmp_path, [path_model(
        tmp_path, "cnn", f, graphs=[{"name": "1st.enc-v2", "file": "c.onnx"}], precisions=["fp16", "w8a16"],
        chips=["SM8750", "QCS9100"], options={"vtcm_mb": 4})])
    r, rep, out = _build(tmp_path, sdk, matrix, "-j", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(rep["targets"]) == 4 and rep["sdk_version"] == "2.40.0.251030"
    for t in rep["targets"]:
        folder = out / t["id"]
        assert t["status"] == "ok" and t["verified"] is True, t
        for name, p in t["per_output"].items():  # each output on its own, the 2-class one included
            assert p["cosine"] > 0.99 and p["snr_db"] > 15, (t["id"], name, p)
        cfg = json.loads((folder / "config" / "htp_config.json").read_text())
        soc_model = {"SM8750": 69, "QCS9100": 77}[t["soc"]]
        device = cfg["devices"][0]
        # audit #9: the chip goes in soc_model (soc_id is deprecated and means something else)
        assert device["soc_model"] == soc_model and "soc_id" not in device
        assert device["dsp_arch"] == {"SM8750": "v79", "QCS9100": "v73"}[t["soc"]]
        # audit #6: graph_names as the converter names the graph, so the graph options apply
        assert cfg["graphs"][0]["graph_names"] == ["_1st_enc_v2"]
        info = json.loads((folder / "logs" / "1st.enc-v2.context.json").read_text())["info"]
        assert info["graphs"][0]["info"]["graphName"] == "_1st_enc_v2"
        assert info["graphs"][0]["info"]["graphBlobInfo"]["info"]["vtcmSize"] == 4
        # audit #7: the arch is read from contextMetadata.info.dspArch and checked
        stub = onnx.load(str(folder / "1st.enc-v2_ctx.onnx"))
        props = {p.key: p.value for p in stub.metadata_props}
        assert props["qnn_release.htp_arch"] == {"SM8750": "79", "QCS9100": "73"}[t["soc"]]
        assert props["qnn_release.soc_model"] == str(soc_model)
        onnx.checker.check_model(stub)
        ins = {i.name: i.type.tensor_type.elem_type for i in stub.graph.input}
        outs = {o.name: o.type.tensor_type.elem_type for o in stub.graph.output}
        assert set(ins.values()) == set(outs.values()) == {TensorProto.FLOAT}  # callers pass and get float
        (ctx,) = [n for n in stub.graph.node if n.op_type == "EPContext"]
        assert list(ctx.input) == ["input_1"] and list(ctx.output) == ["feat_map", "probs_0"]
        conv_log = (folder / "logs" / "converter.log").read_text()
        assert "--preserve_io_datatype" not in conv_log
        if t["precision"] == "fp16":
            # audit #3: fp16 weights and math, float32 graph I/O kept by --preserve_io
            assert "--float_bitwidth 16 --preserve_io" in conv_log and "--use_per" not in conv_log
            assert t["weight_scales"] is None
            assert info["graphs"][0]["info"]["graphInputs"][0]["info"]["dataType"] == "QNN_DATATYPE_FLOAT_32"
            assert set(ins) == {"input_1"} and set(outs) == {"feat_map", "probs_0"}
        else:
            # audit #4: quantized I/O in the binary, Q/DQ in the stub with zero point = -offset
            gi = info["graphs"][0]["info"]["graphInputs"][0]["info"]
            assert gi["dataType"] == "QNN_DATATYPE_UFIXED_POINT_16"
            ops = [n.op_type for n in stub.graph.node]
            assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 2
            assert set(ins) == {"input.1"} and set(outs) == {"feat/map", "probs:0"}  # the ONNX names outside
            zp = next(i for i in stub.graph.initializer if i.name == "input_1_zp")
            # calibration.per_channel (default): a weight scale per output channel (Conv) and row (MatMul/FC)
            assert "--use_per_channel_quantization --use_per_row_quantization" in conv_log
            assert t["weight_scales"] == "per-channel"
            assert int(numpy_helper.to_array(zp)) == -gi["quantizeParams"]["scaleOffset"]["offset"]
        # no Android model library, so no NDK needed (audit #2): the host target only
        assert "-t x86_64-linux-clang" in (folder / "logs" / "model-lib-generator.log").read_text()
    # conversion and model libraries ran once per graph and precision, not per chip
    converted = sorted(p.name for p in (tmp_path / "cache" / "work" / "prepared").rglob("qairt-*") if p.is_dir())
    assert len(converted) == 2 and rep["work"]["converter_runs_per_graph"] == 1.0
    # a second build: every target cached, the converter does not run again
    for p in (tmp_path / "cache" / "work" / "prepared").rglob("qairt-*"):
        shutil.rmtree(p)
    r, rep, _ = _build(tmp_path, sdk, matrix)
    assert r.returncode == 0 and {t["status"] for t in rep["targets"]} == {"cached"}
    assert not list((tmp_path / "cache" / "work" / "prepared").rglob("qairt-*"))


def test_per_tensor_weights_when_the_matrix_says_so(tmp_path, sdk):
    (tmp_path / "models").mkdir()
    f = conv_model(tmp_path / "models" / "c.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "cnn", f, precisions=["w8a16"], chips=["SM8750"],
                                                calibration={"per_channel": False})])
    r, rep, out = _build(tmp_path, sdk, matrix)
    assert r.returncode == 0, r.stdout + r.stderr
    (t,) = rep["targets"]
    assert t["status"] == "ok" and t["weight_scales"] == "per-tensor"
    conv_log = (out / t["id"] / "logs" / "converter.log").read_text()
    assert "--act_bitwidth 16" in conv_log and "--use_per" not in conv_log
    (converted,) = [p for p in (tmp_path / "cache" / "work" / "prepared").rglob("qairt-*") if p.is_dir()]
    assert "-w8a16-" in converted.name and "-pc" not in converted.name
    assert not (converted / "calibration").exists()  # the raw calibration files do not stay in the cache


def test_a_binary_in_channel_last_layout_is_fed_and_read_back_in_its_layout(tmp_path, sdk, monkeypatch):
    """audit #5: when the converter makes the I/O channel-last, inputs go in NHWC and outputs come back
    from NHWC (parity compares like with like); the stub presents NCHW to callers."""
    from ci_tools.builder.orchestrate import BuildSettings, build
    from ci_tools.matrix.schema import load_matrix

    (tmp_path / "models").mkdir()
    f = conv_model(tmp_path / "models" / "c.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "cnn", f, graphs=[{"name": "enc", "file": "c.onnx"}],
                                                chips=["SM8650"])])
    for k, v in _env(tmp_path, sdk).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(qairt, "KEEP_ONNX_LAYOUT", False)
    report = build(load_matrix(matrix),
                   BuildSettings(out=tmp_path / "dist", backend="qairt", jobs=1, cache=tmp_path / "cache"))
    (t,) = report.records
    assert t.status == "ok", t.error
    folder = tmp_path / "dist" / t.id
    info = json.loads((folder / "logs" / "enc.context.json").read_text())["info"]["graphs"][0]["info"]
    assert info["graphInputs"][0]["info"]["dimensions"] == [1, 8, 8, 3]  # NHWC in the binary
    assert info["graphOutputs"][0]["info"]["dimensions"] == [1, 8, 8, 4]
    assert info["graphInputs"][0]["info"]["dataType"] == "QNN_DATATYPE_FLOAT_32"
    assert t.per_output["feat/map"]["cosine"] > 0.999 and t.per_output["probs:0"]["snr_db"] > 30
    stub = onnx.load(str(folder / "enc_ctx.onnx"))
    assert [d.dim_value for d in stub.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 8, 8]
    assert [n.op_type for n in stub.graph.node].count("Transpose") == 2


def test_a_graph_without_weights_converts_without_a_bin_file(tmp_path, sdk):  # audit #17
    (tmp_path / "models").mkdir()
    f = no_weights_model(tmp_path / "models" / "p.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "plain", f, chips=["SM8550"])])
    r, rep, out = _build(tmp_path, sdk, matrix)
    assert r.returncode == 0, r.stdout + r.stderr
    logs = out / rep["targets"][0]["id"] / "logs"
    assert "Saving Model BIN skipped" in (logs / "converter.log").read_text()
    assert " -b " not in (logs / "model-lib-generator.log").read_text()


def test_the_converter_needs_the_sdk_python_path_and_the_route_sets_it(tmp_path, sdk):  # audit #1
    f = models.mlp(tmp_path / "m.onnx", dynamic_batch=False)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, str(sdk / "bin/x86_64-linux-clang/qnn-onnx-converter"), "--input_network",
                        str(f), "--output_path", str(tmp_path / "m.cpp")], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "lib/python/ is in your PYTHONPATH" in r.stderr
    env["PYTHONPATH"] = str(sdk / "lib" / "python")
    r = subprocess.run([sys.executable, str(sdk / "bin/x86_64-linux-clang/qnn-onnx-converter"), "--input_network",
                        str(f), "--output_path", str(tmp_path / "m.cpp")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert qairt.sdk_environment(sdk, {"PYTHONPATH": "/x", "PATH": "/usr/bin"})["PYTHONPATH"] == \
        f"{sdk}/lib/python{os.pathsep}/x"


def test_a_device_config_the_tools_ignore_is_caught(tmp_path, sdk, monkeypatch):  # audit #7, #9
    """Written with sherpa-onnx's soc_id key, the chip is not applied: the binary's read-back says so."""
    from ci_tools.builder.orchestrate import BuildSettings, build
    from ci_tools.matrix.schema import load_matrix

    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"])])
    for k, v in _env(tmp_path, sdk).items():
        monkeypatch.setenv(k, v)
    real = qairt.QairtBackend.htp_config

    def soc_id_config(self, job, folder):
        ext = real(self, job, folder)
        cfg = json.loads((folder / "htp_config.json").read_text())
        cfg["devices"][0]["soc_id"] = cfg["devices"][0].pop("soc_model")
        (folder / "htp_config.json").write_text(json.dumps(cfg))
        return ext

    monkeypatch.setattr(qairt.QairtBackend, "htp_config", soc_id_config)
    report = build(load_matrix(matrix),
                   BuildSettings(out=tmp_path / "dist", backend="qairt", jobs=1, cache=tmp_path / "cache"))
    (t,) = report.records
    assert t.status == "failed" and "soc_model 0" in t.error and "asked for 69 / 79" in t.error


def test_qairt_rejected_op_fails_with_the_node_named_and_keeps_the_logs(tmp_path, sdk):
    (tmp_path / "models").mkdir()
    bad = models.mlp(tmp_path / "models" / "bad.onnx", dynamic_batch=False, op="Erf")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "bad", bad, chips=["SM8650"])])
    r, rep, out = _build(tmp_path, sdk, matrix)
    assert r.returncode == 8
    (t,) = rep["targets"]
    assert "Erf (act_erf)" in t["error"] and t["exit_code"] == 6 and "full log" in t["error"]
    assert not (out / t["id"]).exists()
    # the failed target's work folder is kept, and the "full log" it names exists
    log = t["error"].split("full log: ")[1].rstrip(")")
    assert Path(log).is_file() and "Erf" in Path(log).read_text() and str(out / "failed") in log


def test_package_of_a_qairt_build_names_assets_by_the_pinned_version_and_checks_the_sdk_zip(tmp_path, sdk):
    """audit #8 (stamped buildId) and issue 9 (the gate compares the SDK's sha256, not only its version)."""
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"],
                                                generated_inputs_ok="a random-weight MLP has no data of its own")])
    (sdk / ".qnn-release-sdk.json").write_text(json.dumps({"sha256": "1" * 64, "version": sdk.name}))
    r, rep, out = _build(tmp_path, sdk, matrix)
    assert r.returncode == 0, r.stderr
    assert rep["targets"][0]["sdk_sha256"] == "1" * 64
    r = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--qnn-sdk", str(sdk), "--require-verified",
                env=_env(tmp_path, sdk))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    names = {a["name"] for a in manifest["assets"]}
    assert names == {"m-sm8750-fp16-qnn2.40.0.251030.tar.bz2", "qnn-libs-2.40.0.251030.tar.bz2",
                     "qnn-include-2.40.0.251030.tar.bz2", "m-float-onnx.tar.bz2"}  # and the model's twin (#41)
    import tarfile

    with tarfile.open(out / "release" / "m-sm8750-fp16-qnn2.40.0.251030.tar.bz2") as tar:
        meta = json.load(tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("metadata.json"))))
    assert meta["graphs"][0]["stub_io"] == {"x": "x", "y": "y"}  # the names callers use with the stub
    # the same version string from another zip: refused
    other = make_fake_sdk(tmp_path / "other")
    (other / ".qnn-release-sdk.json").write_text(json.dumps({"sha256": "2" * 64, "version": other.name}))
    r = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--qnn-sdk", str(other),
                env=_env(tmp_path, sdk))
    assert r.returncode == 9 and "same version string, other content" in r.stderr


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


def test_a_stream_past_the_carried_steps_runs_in_one_net_run_fed_cpus_state(tmp_path, sdk):  # #34 item 11
    """qnn-net-run cannot carry a state from one run to the next inside a process: a 24-step stream carries
    its own state through the first 16 steps (a process each) and runs the other 8 in one process fed the state
    CPU carried; every step is judged, the drift after step 16, and the record says so."""
    from tests.test_real_samples import _path_samples

    (tmp_path / "models").mkdir()
    models.feature_rnn(tmp_path / "models" / "rnn.onnx")
    (tmp_path / "feats").mkdir()
    feat = np.random.default_rng(5).standard_normal((24, 1, 8)).astype(np.float32)
    np.savez(tmp_path / "feats" / "utt0.npz", feat=feat)
    model = path_model(tmp_path, "kws", tmp_path / "models" / "rnn.onnx", chips=["SM8750"], precisions=["fp16"])
    model["samples"] = {**_path_samples(tmp_path, ["feats/utt0.npz"]), "description": "log-mel frames",
                        "stream": {"carry": {"state_out": "state"}, "max_drift": {"state_out": 0.05}}}
    runs = tmp_path / "net-runs.log"
    env = {**_env(tmp_path, sdk), "FAKE_QAIRT_RUN_LOG": str(runs)}
    out = tmp_path / "dist"
    r = run_cli("build", "--backend", "qairt", "--matrix", str(write_matrix(tmp_path, [model])), "--out", str(out),
                env=env)
    assert r.returncode == 0, r.stderr
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    assert t["verified"] and t["verify_samples"] == 24
    assert "first 16 steps" in t["verify_inputs"], t["verify_inputs"]
    assert t["per_output"]["state_out"]["state_drift_after_steps"] == 16
    assert runs.read_text().split() == ["1"] * 16 + ["8"]  # inputs per qnn-net-run process


@pytest.mark.emulator
def test_a_qairt_parity_failure_is_bisected_on_the_embedded_route(tmp_path, sdk):  # #34 item 3
    """A wrong answer on the qairt route is hunted on onnxruntime-qnn's HTP emulator (the same kernels): a graph
    with a real HTP fault gets its node named; a graph HTP computes right is said to be the converter's doing."""
    pytest.importorskip("onnxruntime_qnn")
    (tmp_path / "models").mkdir()
    dec = models.upsampling_decoder(tmp_path / "models" / "dec.onnx")
    mlp = models.mlp(tmp_path / "models" / "mlp.onnx", dynamic_batch=False)
    chips = {"chips": ["SM8750"], "precisions": ["fp16"]}
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "dec", dec, **chips),
                                     path_model(tmp_path, "mlp", mlp, **chips)])
    out = tmp_path / "dist"
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(out),
                env={**_env(tmp_path, sdk), "FAKE_QAIRT_WRONG": "1"})
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    t = {t["model"]: t for t in json.loads((out / "build-report.json").read_text())["targets"]}
    assert t["dec"]["exit_code"] == 7 and "bisected on the embedded route" in t["dec"]["error"], t["dec"]["error"]
    assert "first divergent node: up (ConvTranspose" in t["dec"]["error"]
    assert "fixes: [convtranspose-output-padding]" in t["dec"]["error"]
    assert "what the qairt converter made of the graph" in t["mlp"]["error"], t["mlp"]["error"]
    assert (out / "failed" / t["mlp"]["id"] / "bisect" / "sample.npz").is_file()
