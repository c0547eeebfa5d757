"""New models, first try: the HTP doctor, inspect, data-sized outputs, parity like with like, graph fixes,

The unit tier of tests/test_doctor.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ci_tools.compile.verify import Judging, Runs, check
from ci_tools.errors import VerifyError
from ci_tools.matrix.schema import Thresholds
from tests.conftest import path_model, write_matrix
from tests.support import models
from tests.support.doctor import FP16, _branches, _flow


def test_a_small_output_that_disagrees_is_not_hidden_by_a_large_one_that_agrees():
    state = np.random.default_rng(0).standard_normal((2, 1, 128)).astype(np.float32) * 5
    ref = [[state, np.array([[0.154]], np.float32)]]
    got = [[state.copy(), np.array([[0.087]], np.float32)]]
    with pytest.raises(Exception) as e:
        check("t", ["state", "prob"], Runs(ref, got, emulator_seconds=1.0), FP16)
    assert "output 'prob'" in str(e.value) and "relative error" in str(e.value) and "0.154" in str(e.value)
    details = e.value.details
    assert details["worst_output"] == "prob" and details["per_output"]["state"]["failures"] == []
    assert details["per_output"]["prob"]["relative_error"] == pytest.approx(0.435, abs=1e-3)


def test_each_threshold_at_its_boundary_per_precision():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1000)
    from ci_tools.compile.verify import Runs, thresholds_for
    from ci_tools.matrix.schema import Options

    defaults = [thresholds_for(Options(), p) for p in ("fp16", "w8a16", "int8")]  # what builds use
    for th in (*defaults, Thresholds(min_snr_db=30.0), Thresholds(min_cosine=0.9, min_snr_db=25.0)):  # SNR binding
        # noise scaled so that the SNR (and with it the cosine) sits just above / just below the thresholds
        # the SNR at which the binding threshold (cosine or SNR) is met exactly: cos = 1/sqrt(1 + 10^(-snr/10))
        snr = max(th.min_snr_db or -99, 10 * np.log10(1 / (1 / th.min_cosine ** 2 - 1)) if th.min_cosine else -99)
        for margin, ok in ((0.3, True), (-0.3, False)):
            noise = rng.standard_normal(1000)
            noise *= np.linalg.norm(x) / np.linalg.norm(noise) / 10 ** ((snr + margin) / 20)
            got = (x + noise).astype(np.float32)
            if ok:
                check("t", ["y"], Runs([[x]], [[got]], emulator_seconds=1.0), th)
            else:
                with pytest.raises(Exception, match="differs from CPU"):
                    check("t", ["y"], Runs([[x]], [[got]], emulator_seconds=1.0), th)


def test_nans_never_pass_on_the_absolute_tolerance():
    ref = np.zeros(64, np.float32)
    got = ref.copy()
    got[3] = np.nan
    with pytest.raises(Exception, match="1 NaN/Inf values"):
        check("t", ["y"], Runs([[ref]], [[got]], emulator_seconds=1.0), FP16)
    got[3] = 0.0  # all zero on both: a reference that is one constant proves nothing (an all-zero binary passes it)
    with pytest.raises(VerifyError, match="is not judged: CPU answers the constant 0 at all 64 positions"):
        check("t", ["y"], Runs([[ref]], [[got]], emulator_seconds=1.0), FP16)
    # declared so: judged
    check("t", ["y"], Runs([[ref]], [[got]], emulator_seconds=1.0), FP16, how=Judging(constant_outputs=("y",)))


@pytest.mark.parametrize("precision,words", [("fp16", "65504"), ("w8a16", "calibrate"), ("int8", "calibrate")])
def test_failure_hints_fit_the_precision(precision, words):
    x = np.linspace(1, 2, 100)
    with pytest.raises(Exception) as e:
        check("t", ["y"], Runs([[x]], [[x[::-1].copy()]], emulator_seconds=1.0), FP16,
              how=Judging(precision=precision, inputs_note="generated: ..."))
    assert words in e.value.hint and "generated inputs only" in e.value.hint
    assert ("calibrat" in e.value.hint) == (precision != "fp16")


def test_input_ranges_shape_the_generated_inputs(repo, tmp_path):
    from ci_tools.prepare.graph import TensorInfo, generate_inputs, generated_inputs_note

    feeds = generate_inputs([TensorInfo("pcm", [1, 400], "float32"), TensorInfo("ids", [1, 4], "int32")], 3, 0,
                            ranges={"pcm": [-32768, 32767]})
    assert all(np.abs(f["pcm"]).max() > 1000 for f in feeds) and all(f["ids"].max() < 16 for f in feeds)
    assert "pcm in [-32768, 32767)" in generated_inputs_note({"pcm": [-32768, 32767]})


def test_the_prepare_parity_check_and_its_per_model_threshold(repo, tmp_path, monkeypatch):
    """prepare compares the prepared graph with the original on CPU (both at BASIC level); a preparation
    that changed the maths fails, unless the model's prepare_min_cosine allows the difference."""
    from ci_tools.errors import PrepareError
    from ci_tools.matrix.schema import load_matrix
    from ci_tools.prepare import graph as prep_mod

    f = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    real = prep_mod._simplify

    def nudged(m, *a, **k):  # a "simplification" that changes a weight a little
        m = real(m, *a, **k)
        w = next(i for i in m.graph.initializer if i.name == "w2")
        arr = numpy_helper.to_array(w).copy()
        arr[:, 0] *= -1
        w.CopyFrom(numpy_helper.from_array(arr, "w2"))
        return m

    monkeypatch.setattr(prep_mod, "_simplify", nudged)
    for threshold, ok in ((0.9999, False), (0.0, True)):
        matrix = write_matrix(repo, [path_model(repo, "m", f, chips=["SM8750"],
                                                options={"prepare_min_cosine": threshold})])
        model = load_matrix(matrix).matrix.model("m")
        if ok:
            p = prep_mod.prepare(model, model.graphs[0], repo / "models", tmp_path / f"w{threshold}", "t")
            assert p.parity["cosine"] < 0.9999
        else:
            with pytest.raises(PrepareError, match=r"differs from the original on CPU .*prepare_min_cosine"):
                prep_mod.prepare(model, model.graphs[0], repo / "models", tmp_path / f"w{threshold}", "t")


def test_inspect_tells_shape_data_and_flag_decided_ifs_apart():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])
    k = [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(4, np.int64), "four")]
    # by a shape: fixed once prepare sets static shapes
    c = _flow([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["n"]),
               helper.make_node("Greater", ["n", "four"], ["cond"]),
               helper.make_node("If", ["cond"], ["y"], name="by_shape", **_branches("a"))], [x], k)["by_shape"]
    assert c["condition_from"] == [] and "decided by a shape" in c["fix"]
    # by the data, through another If whose branch reads x from the outer graph; the nested If is listed too
    inner = helper.make_node("If", ["c0"], ["r"], name="nested", **_branches("b"))
    then_g = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["rs"], keepdims=0),
                                helper.make_node("Greater", ["rs", "zero"], ["c0"]), inner,
                                helper.make_node("Greater", ["r", "zero"], ["tc"])], "t", [],
                               [helper.make_tensor_value_info("tc", TensorProto.BOOL, None)])
    else_g = helper.make_graph([helper.make_node("Identity", ["f"], ["ec"])], "e", [],
                               [helper.make_tensor_value_info("ec", TensorProto.BOOL, None)])
    flows = _flow([helper.make_node("If", ["flag"], ["cond"], name="outer", then_branch=then_g, else_branch=else_g),
                   helper.make_node("If", ["cond"], ["y"], name="by_data", **_branches("c"))],
                  [x, helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                  [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                   numpy_helper.from_array(np.array(False), "f")])
    assert flows["by_data"]["condition_from"] == ["flag", "x"] and "decided by the data" in flows["by_data"]["fix"]
    assert flows["nested"]["condition_from"] == ["x"] and set(flows) == {"outer", "nested", "by_data"}
    assert "graphs[].constants: {flag: " in flows["outer"]["fix"]
    # a flag with a symbolic dim (suggested [1]) is a constant; an input without a shape is not
    for v, small in ((helper.make_tensor_value_info("mode", TensorProto.INT64, ["batch"]), True),
                     (helper.make_tensor_value_info("mode", TensorProto.INT64, None), False)):
        c = _flow([helper.make_node("Cast", ["mode"], ["mb"], to=TensorProto.BOOL),
                   helper.make_node("If", ["mb"], ["y"], name="by_mode", **_branches("d"))], [x, v])["by_mode"]
        assert ("replace inputs.mode with graphs[].constants: {mode: " in c["fix"]) is small, c


def test_a_file_of_an_installed_wheel_is_suggested_as_a_pip_source_with_its_member_path():
    from importlib import metadata

    import onnx

    from ci_tools.compile.inspection import suggest_source

    source, member = suggest_source(Path(onnx.__file__))
    assert source["kind"] == "pip" and source["package"] == f"onnx=={metadata.version('onnx')}"
    assert member == "onnx/__init__.py" and list(source["files"]) == [member]


def test_quantized_sources_are_named_for_what_they_are():
    import onnx
    from onnx import TensorProto, helper

    from ci_tools.compile.doctor import source_kind

    def graph(*ops):
        nodes = [helper.make_node(op, ["x"], [f"y{k}"], **({"domain": d} if d else {})) for k, (op, d) in
                 enumerate(ops)]
        return helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, [1])], []))

    assert [k["kind"] for k in source_kind(graph(("DynamicQuantizeLinear", None), ("MatMulInteger", None)))] == [
        "dynamically quantized"]
    assert [k["kind"] for k in source_kind(graph(("QuantizeLinear", None), ("DequantizeLinear", None)))] == [
        "statically quantized (QDQ)"]
    assert source_kind(graph(("Relu", None))) == [] and isinstance(onnx.ModelProto(), onnx.ModelProto)


def test_unfused_layer_norms_agree_with_onnx_runtime_on_cpu(tmp_path):
    """SkipLayerNormalization with a bias and without beta, and its RMS form, against ONNX Runtime's kernels."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from ci_tools.prepare.unfuse import unfuse

    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "bias")]
    ms = {"domain": "com.microsoft", "epsilon": 1e-5}
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "", "bias"], ["a"], **ms),
             helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"], ["b"], **ms)]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 16]) for n in ("x", "skip", "a", "b")]
    m = helper.make_model(helper.make_graph(nodes, "ln", io[:2], io[2:], inits),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    feed = {n: (rng.standard_normal((1, 4, 16)) * 3).astype(np.float32) for n in ("x", "skip")}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    assert unfuse(m, "ln") == {"SkipLayerNormalization": 1, "SkipSimplifiedLayerNormalization": 1}
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    assert all(np.allclose(a, b, atol=1e-4) for a, b in zip(want, got))
