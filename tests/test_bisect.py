"""Saying where the NPU is wrong: a parity failure names the first node whose output leaves CPU's, with the
numbers before and after, the known quirk and the declared fix (real compiles on the HTP emulator)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")


def _env(cache):
    return {**os.environ, "QNN_RELEASE_CACHE": str(cache)}


def test_a_parity_failure_names_the_first_divergent_node_and_its_fix(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.upsampling_decoder(tmp_path / "models" / "dec.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "dec", f, chips=["SM8750"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    assert t["status"] == "failed" and t["exit_code"] == 7, t
    # the relu before it agrees, the ConvTranspose is the first to leave CPU, and its fix is named
    assert "first divergent node: up (ConvTranspose" in t["error"], t["error"]
    assert "in 'hr' cosine 1.0" in t["error"] and "fixes: [convtranspose-output-padding]" in t["error"]
    assert "repeat the hunt: `qnn-release bisect" in t["error"] and "overflows above 65504" not in t["error"]
    b = t["bisect"]
    assert b["first"]["tensor"] == "u" and b["first"]["cosine"] < 0.9 and b["first"]["adjacent"]
    assert b["last_agreeing"]["tensor"] == "hr" and b["compiles"] == 1
    # the failed target keeps the sample and the command that repeats the hunt
    folder = out / "failed" / t["id"]
    sample = folder / "bisect" / "sample.npz"
    assert sample.is_file() and (folder / "bisect" / "bisect.json").is_file()
    with np.load(sample) as z:
        assert set(z.files) == {"x"}
    import shlex

    again = shlex.split(t["bisect_again"])  # the command the error gives, as a user pastes it
    assert again[:2] == ["qnn-release", "bisect"] and again[again.index("--sample") + 1] == str(sample)
    graph = again[2]
    r = run_cli(*again[1:])
    assert r.returncode == 7, r.stderr
    assert "first divergent node: up (ConvTranspose" in r.stdout and "DIFFERS" in r.stdout
    # two intermediates per compile: the conv and the output conv first, then the stretch between them
    r = run_cli("bisect", graph, "--soc", "SM8750", "--sample", str(sample), "--budget", "2")
    assert r.returncode == 7 and "2 probe compile(s), 4 of 4 intermediates" in r.stdout, r.stdout
    assert "first divergent node: up (ConvTranspose" in r.stdout

    # declared, the fix makes the same graph verify
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "dec", f, chips=["SM8750"], graphs=[
        {"name": "main", "file": "dec.onnx", "fixes": ["convtranspose-output-padding"]}])])
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    assert t["status"] == "ok" and t["verified"] and t["parity"]["cosine"] > 0.999


def test_bisect_on_a_graph_htp_computes_right_says_so(tmp_path):
    f = models.mlp(tmp_path / "mlp.onnx", dynamic_batch=False)
    r = run_cli("bisect", str(f), "--soc", "SM8750")
    assert r.returncode == 0, r.stderr
    assert "agrees with CPU" in r.stdout and "generated inputs" in r.stdout
    r = run_cli("bisect", str(tmp_path / "missing.onnx"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr
    for arrays, wanted in (({"y": np.zeros((1, 32), np.float32)}, "no array for input(s) x"),
                           ({"x": np.zeros((1, 5), np.float32)}, "input 'x' has shape [1, 5]")):
        np.savez(tmp_path / "bad.npz", **arrays)
        r = run_cli("bisect", str(f), "--sample", str(tmp_path / "bad.npz"))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and wanted in r.stderr, r.stderr


def _stateful_decoder(path):
    """feat [1, 8, 1, 10] and state [1, 8, 1, 20] -> the decoder's wrong ConvTranspose on the features, mixed with
    the state -> state_out (carried) and prob: a streaming model whose wrong layer sits in its recurrence."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n) for n, s in
             [("w_in", (8, 8, 1, 1)), ("w_up", (8, 1, 1, 3))]]
    inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
    nodes = [helper.make_node("Conv", ["feat", "w_in"], ["h"], name="conv_in"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("ConvTranspose", ["hr", "w_up"], ["u"], name="up", group=8, kernel_shape=[1, 3],
                              strides=[1, 2], pads=[0, 1, 0, 1], output_padding=[0, 1]),
             helper.make_node("Add", ["u", "state"], ["mix"], name="mix"),
             helper.make_node("Mul", ["mix", "half"], ["mixh"], name="halve"),
             helper.make_node("Tanh", ["mixh"], ["state_out"], name="tanh"),
             helper.make_node("ReduceMean", ["state_out"], ["m"], name="mean", keepdims=0),
             helper.make_node("Sigmoid", ["m"], ["prob"], name="prob")]
    g = helper.make_graph(nodes, "stream", [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 8, 1, 10]),
                                            helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, 8, 1, 20])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, []),
                           helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [1, 8, 1, 20])], inits)
    return models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_stream_that_fails_is_bisected_on_its_worst_step_with_the_state_cpu_carried(tmp_path):
    import numpy as np

    from tests.test_real_samples import _path_samples

    (tmp_path / "models").mkdir()
    f = _stateful_decoder(tmp_path / "models" / "s.onnx")
    (tmp_path / "feats").mkdir()
    np.savez(tmp_path / "feats" / "utt.npz",
             feat=np.random.default_rng(1).standard_normal((6, 1, 8, 1, 10)).astype(np.float32))
    model = path_model(tmp_path, "s", f, chips=["SM8750"])
    model["samples"] = {**_path_samples(tmp_path, ["feats/utt.npz"]), "stream": {"carry": {"state_out": "state"}}}
    matrix = write_matrix(tmp_path, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    assert t["status"] == "failed" and "first divergent node: up (ConvTranspose" in t["error"], t["error"]
    assert t["bisect"]["sample"].startswith("utt.npz step ") and t["bisect"]["first"]["tensor"] == "u"
