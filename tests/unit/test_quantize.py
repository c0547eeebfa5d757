"""Quantization for the ort route: what prepare keeps for it and what per-channel weights buy (real onnxsim/ORT).

The unit tier of tests/test_quantize.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import onnxsim
import pytest
from onnx import numpy_helper

from ci_tools.prepare.quantize import quantize_graph
from tests.conftest import path_model, write_matrix
from tests.support import models
from tests.support.prepare import _prepare
from tests.support.quantize import _old_opset_conv, _ops, _prepared_attention, _weight_scales


def test_prepare_keeps_the_q_k_v_projections_apart(tmp_path):
    src, p = _prepared_attention(tmp_path)
    # onnxsim's default passes would join the three projections into one MatMul and a Split: one weight
    # tensor, whose single scale a quantizer would share between Q (8x smaller) and K/V
    fused, _ = onnxsim.simplify(onnx.load(src))
    assert _ops(fused)["Split"] == 1
    ops = _ops(onnx.load(p.path))
    assert "Split" not in ops and ops["MatMul"] + ops["Gemm"] == 5, ops


def test_per_channel_weights_have_a_scale_per_output_channel_and_err_less(tmp_path):
    _, p = _prepared_attention(tmp_path)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 8, 32)).astype(np.float32)} for _ in range(8)]
    pc = quantize_graph(p.path, "w8a16", samples, per_channel=True)
    pt = quantize_graph(p.path, "w8a16", samples, per_channel=False)
    assert pc != pt and pc.is_file() and pt.is_file()
    assert quantize_graph(p.path, "w8a16", samples, per_channel=True) == pc  # cached by name
    pc_scales, pt_scales = _weight_scales(onnx.load(pc)), _weight_scales(onnx.load(pt))
    assert len(pc_scales) == len(pt_scales) == 3
    # Q and V (MatMul + Add, a Gemm once prepared) get a scale per output channel; K (no bias: a MatMul,
    # which QNN quantizes per tensor) keeps one, as with per_channel false
    assert {k: s.size for k, s in pc_scales.items()} == {"w_q": 32, "w_k": 1, "w_v": 32}
    assert {s.size for s in pt_scales.values()} == {1}

    def error(path):
        ref = ort.InferenceSession(str(p.path), providers=["CPUExecutionProvider"])
        q = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {"x": rng.standard_normal((1, 8, 32)).astype(np.float32)}
        a, b = ref.run(None, feed)[0], q.run(None, feed)[0]
        return float(np.abs(a - b).max() / np.abs(a).max())

    assert error(pc) < error(pt) / 2


def test_per_channel_is_part_of_a_quantized_targets_key(tmp_path):
    from types import SimpleNamespace

    from ci_tools.builder.keys import target_key
    from ci_tools.matrix.plan import plan
    from ci_tools.matrix.schema import load_matrix

    (tmp_path / "models").mkdir()
    f = models.attention(tmp_path / "models" / "att.onnx")
    keys = {}
    for pc in (True, False):
        matrix = write_matrix(tmp_path, [path_model(tmp_path, "att", f, chips=["SM8750"], precisions=["fp16", "w8a16"],
                                                    calibration={"per_channel": pc})])
        for t in plan(load_matrix(matrix)):
            calib = "c" if t.precision != "fp16" else None
            keys[(pc, t.precision)] = target_key(t, SimpleNamespace(sha256="p"), "ort", "2.51", calib)
    assert keys[(True, "w8a16")] != keys[(False, "w8a16")]
    assert keys[(True, "fp16")] == keys[(False, "fp16")]  # nothing to quantize: the fp16 binary is reused


def test_per_channel_int8_of_an_opset_11_graph_is_a_valid_graph(tmp_path):
    (tmp_path / "models").mkdir()
    f = _old_opset_conv(tmp_path / "models" / "old.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "old", f, chips=["SM8750"], precisions=["int8"])])
    (p,) = _prepare(matrix, tmp_path / "cache", name="old")
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    ref = ort.InferenceSession(str(p.path), providers=["CPUExecutionProvider"]).run(None, samples[0])[0]
    for precision in ("int8", "w8a16"):  # w8a16 below opset 21: com.microsoft Q/DQ, which take `axis` as they are
        q = quantize_graph(p.path, precision, samples, per_channel=True)
        m = onnx.load(q)
        onnx.checker.check_model(m)
        opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        assert opset >= 13 if precision == "int8" else opset in (11, 21), (precision, opset)
        assert _weight_scales(m)["w"].size == 8  # a scale per output channel
        y = ort.InferenceSession(str(q), providers=["CPUExecutionProvider"]).run(None, samples[0])[0]
        cos = float(np.dot(y.ravel(), ref.ravel()) / np.linalg.norm(y) / np.linalg.norm(ref))
        assert cos > 0.99, (precision, cos)
    assert not list(p.path.parent.glob(".*.onnx"))  # the converted copy is gone


def test_a_quantized_graph_moves_into_the_cache_with_its_external_data(tmp_path):
    from ci_tools.prepare.quantize import _move_with_data

    f = models.attention(tmp_path / "a.onnx")
    m = onnx.load(f)
    weights = {i.name: numpy_helper.to_array(i).tobytes() for i in m.graph.initializer}
    (tmp_path / "tmp").mkdir()
    onnx.save(m, str(tmp_path / "tmp" / "q.onnx"), save_as_external_data=True, location="q.onnx.data",
              size_threshold=0)
    _move_with_data(tmp_path / "tmp" / "q.onnx", tmp_path / "w8a16-q3-abc.qdq.onnx")
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "a.onnx", "w8a16-q3-abc.qdq.onnx", "w8a16-q3-abc.qdq.onnx.data"]
    moved = onnx.load(str(tmp_path / "w8a16-q3-abc.qdq.onnx"))
    assert {i.name: numpy_helper.to_array(i).tobytes() for i in moved.graph.initializer} == weights


def test_an_invalid_quantized_graph_is_refused_and_not_cached(tmp_path, monkeypatch):
    from ci_tools.errors import CompileError
    from ci_tools.prepare import quantize as quantize_mod

    (tmp_path / "models").mkdir()
    f = _old_opset_conv(tmp_path / "models" / "old.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "old", f, chips=["SM8750"], precisions=["int8"])])
    (p,) = _prepare(matrix, tmp_path / "cache", name="old")
    monkeypatch.setattr(quantize_mod, "_per_channel_opset", lambda path, out, what: path)  # as before the opset fix
    samples = [{"x": np.ones((1, 3, 16, 16), np.float32)}]
    with pytest.raises(CompileError, match=r"int8 quantization wrote an invalid graph: .*axis"):
        quantize_graph(p.path, "int8", samples, per_channel=True)
    assert not list(p.path.parent.glob("*.qdq.onnx"))


def test_a_quantized_graph_broken_on_cpu_fails_naming_the_node_and_is_never_cached(tmp_path):
    """An attention mask of -inf: the quantizer's graph no longer depends on its input. It fails before any
    chip, with the node and the constant named, and nothing is written to the cache."""
    import numpy as np

    from ci_tools.errors import CompileError
    from ci_tools.prepare.quantize import quantize_graph
    from tests.support import models

    folder = tmp_path / "m" / "g" / "key"
    folder.mkdir(parents=True)
    f = models.masked_softmax(folder / "graph.onnx")
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(4)]
    with pytest.raises(CompileError) as e:
        quantize_graph(f, "w8a16", samples)
    msg = str(e.value)
    assert "m/g: the w8a16 graph is broken on CPU before any chip: output 'y'" in msg
    assert "node 'softmax'" in msg and "'hm' holds ±inf" in msg and "-1e4" in msg
    assert not list(folder.glob("*.qdq.onnx"))


def test_constants_become_initializers_and_shape_inputs_are_never_quantized(tmp_path):
    """A Resize's scales from a Constant node (Paddle2ONNX writes hundreds) were quantized as an activation with
    a scale of 1.5e-9, and HTP refused the graph (7004): prepare makes them initializers, and the nodes that
    only compute sizes (a Reshape's shape computed in float) stay out of the quantizer's reach."""
    from ci_tools.compile.ep_log import qnn_error_hint
    from ci_tools.prepare.quantize import shape_nodes

    (tmp_path / "models").mkdir()
    f = models.resize_by_constant(tmp_path / "models" / "rz.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"], precisions=["w8a16"])])
    (prep,) = _prepare(matrix, tmp_path / "cache")
    g = onnx.load(str(prep.path)).graph
    assert not [n for n in g.node if n.op_type == "Constant"] and any("Constant node(s) now initializers" in x
                                                                       for x in prep.notes)
    assert {"to_float", "same_shape"} <= set(shape_nodes(prep.path)) or not {"to_float", "same_shape"} & {
        n.name for n in g.node}  # (onnxsim may fold the size arithmetic away entirely)
    rng = np.random.default_rng(0)
    q = quantize_graph(prep.path, "w8a16", [{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
                                            for _ in range(4)])
    qg = onnx.load(str(q)).graph
    resize = next(n for n in qg.node if n.op_type == "Resize")
    made = {o: n for n in qg.node for o in n.output}
    for k in range(1, len(resize.input)):  # roi / scales / sizes straight from initializers, never from a DQ
        assert resize.input[k] == "" or made.get(resize.input[k]) is None, resize.input
    assert "7004" in qnn_error_hint("Failed to create tensor for node: up_DequantizeLinear error code: 7004")


def test_a_qdq_source_becomes_its_float_equivalent_with_fixes_dequantize(tmp_path):
    """A graph quantized for ONNX Runtime's CPU (QDQ, int8 weights and activations): `fixes: [dequantize]` folds
    each weight's DequantizeLinear into the float it stands for and drops the activation Q/DQ pairs; the float
    graph agrees with the QDQ one on CPU up to its rounding, and has no Q/DQ left."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "float.onnx", dynamic_batch=False)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.uniform(-1, 1, (1, 32)).astype(np.float32)} for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    qdq = tmp_path / "models" / "qdq.onnx"
    quantize_static(str(f), str(qdq), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    before = Counter(n.op_type for n in onnx.load(str(qdq)).graph.node)
    assert before["DequantizeLinear"] and before["QuantizeLinear"]
    model = path_model(tmp_path, "q", qdq, graphs=[{"name": "main", "file": "qdq.onnx", "fixes": ["dequantize"]}],
                       chips=["SM8750"], options={"prepare_min_cosine": 0.99})
    (prep,) = _prepare(write_matrix(tmp_path, [model]), tmp_path / "cache", name="q")
    after = Counter(n.op_type for n in onnx.load(str(prep.path)).graph.node)
    assert not after["DequantizeLinear"] and not after["QuantizeLinear"], after
    assert prep.parity["cosine"] > 0.99
    assert any(n.startswith("fix dequantize: 3 quantized weight(s)") for n in prep.notes), prep.notes
    ref = ort.InferenceSession(str(f), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(str(prep.path), providers=["CPUExecutionProvider"])
    a, b = ref.run(None, feeds[0])[0], got.run(None, feeds[0])[0]
    assert np.allclose(a, b, atol=0.05 * np.abs(a).max())  # the float graph it was quantized from, to int8 rounding


def test_a_dynamically_quantized_source_becomes_float_again_with_fixes_dequantize(tmp_path):
    """ONNX Runtime's quantize_dynamic (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the scales):
    `fixes: [dequantize]` writes each as a float MatMul with the dequantized weights; no integer op is left."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "float.onnx", dynamic_batch=False)
    dyn = tmp_path / "models" / "dyn.onnx"
    quantize_dynamic(str(f), str(dyn), weight_type=QuantType.QInt8)
    assert Counter(n.op_type for n in onnx.load(str(dyn)).graph.node)["MatMulInteger"] == 2
    model = path_model(tmp_path, "d", dyn, graphs=[{"name": "main", "file": "dyn.onnx", "fixes": ["dequantize"]}],
                       chips=["SM8750"], options={"prepare_min_cosine": 0.99})
    (prep,) = _prepare(write_matrix(tmp_path, [model]), tmp_path / "cache", name="d")
    ops = Counter(n.op_type for n in onnx.load(str(prep.path)).graph.node)
    assert not {"DynamicQuantizeLinear", "MatMulInteger"} & set(ops) and ops["MatMul"] + ops["Gemm"] == 2, ops
    assert any("2 dynamically quantized MatMul(s) and Conv(s), 0 DynamicQuantizeLSTM(s)" in n
               for n in prep.notes), prep.notes
    x = {"x": np.random.default_rng(2).uniform(-1, 1, (1, 32)).astype(np.float32)}
    a = ort.InferenceSession(str(f), providers=["CPUExecutionProvider"]).run(None, x)[0]
    b = ort.InferenceSession(str(prep.path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.allclose(a, b, atol=0.05 * np.abs(a).max())


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_dynamically_quantized_lstm_and_embedding_become_float_again_with_fixes_dequantize(tmp_path, per_channel):
    """quantize_dynamic on a text tagger makes its embedding an int8 Gather -> DequantizeLinear and its LSTM a
    com.microsoft DynamicQuantizeLSTM (int8 weights, transposed): `fixes: [dequantize]` writes the float Gather
    and the standard LSTM back (no integer op left), and the graph answers as the float one on CPU."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from ci_tools.compile.doctor import source_kind

    (tmp_path / "models").mkdir()
    f = models.embedding_tagger(tmp_path / "float.onnx")
    dyn = tmp_path / "models" / "dyn.onnx"
    quantize_dynamic(str(f), str(dyn), op_types_to_quantize=["Gather", "LSTM", "MatMul"],
                     weight_type=QuantType.QInt8, per_channel=per_channel)
    before = Counter(n.op_type for n in onnx.load(str(dyn)).graph.node)
    assert before["DynamicQuantizeLSTM"] == 1 and before["MatMulInteger"] == 1, before
    (kind,) = source_kind(onnx.load(str(dyn)))
    assert kind["kind"] == "dynamically quantized" and kind["ops"]["DynamicQuantizeLSTM"] == 1
    assert kind["ops"]["Gather of an int8 table"] == 1 and "DynamicQuantizeLSTM as an LSTM" in kind["means"]
    model = path_model(tmp_path, "t", dyn, graphs=[{"name": "main", "file": "dyn.onnx", "fixes": ["dequantize"],
                                                    "inputs": {"ids": {"shape": [7, 1], "range": [0, 49]}}}],
                       chips=["SM8750"], options={"prepare_min_cosine": 0.99})
    (prep,) = _prepare(write_matrix(tmp_path, [model]), tmp_path / "cache", name="t")
    graph = onnx.load(str(prep.path)).graph
    ops = Counter(n.op_type for n in graph.node)
    assert not {"DynamicQuantizeLSTM", "DynamicQuantizeLinear", "MatMulInteger", "DequantizeLinear"} & set(ops), ops
    assert ops["LSTM"] == 1 and all(i.data_type == onnx.TensorProto.FLOAT for i in graph.initializer
                                    if len(i.dims) > 1), "an integer weight is left"
    assert any("1 DynamicQuantizeLSTM(s) and 1 int8 embedding(s) or tables read through layout ops float again" in n
               for n in prep.notes), prep.notes
    ids = {"ids": np.random.default_rng(3).integers(0, 50, (7, 1)).astype(np.int64)}
    a = ort.InferenceSession(str(f), providers=["CPUExecutionProvider"]).run(None, ids)[0]
    feeds = {"ids": ids["ids"].astype(prep.inputs[0].dtype)}  # prepare makes int64 inputs int32 for HTP
    b = ort.InferenceSession(str(prep.path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cos = float(np.dot(a.ravel(), b.ravel()) / np.linalg.norm(a) / np.linalg.norm(b))
    assert cos > 0.99 and (a.argmax(-1) == b.argmax(-1)).mean() >= 0.8, cos


def test_dequantize_keeps_what_a_subgraph_reads_from_outside():
    """A weight or a node output read only inside an If branch is still read: neither is pruned."""
    from onnx import TensorProto, helper

    from ci_tools.prepare.dequantize import dequantize

    w = numpy_helper.from_array(np.full((2,), 3, np.int8), "wq")
    s = numpy_helper.from_array(np.array(0.5, np.float32), "ws")
    z = numpy_helper.from_array(np.array(0, np.int8), "wz")
    seen = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "only_in_branch")
    branch = helper.make_graph([helper.make_node("Add", ["w", "only_in_branch"], ["b"])], "then", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["w"], ["c"])], "else", [],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other)]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                                            [w, s, z, seen]), opset_imports=[helper.make_opsetid("", 17)])
    assert dequantize(m) == (1, 0)
    names = {i.name for i in m.graph.initializer}
    assert {"w", "only_in_branch"} <= names and "wq" not in names
    out = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"cond": np.array(True)})[0]
    assert out.tolist() == [2.5, 3.5]


def test_a_dynamically_quantized_fused_bert_is_called_quantized_not_only_fused(tmp_path):
    """quantize_dynamic on a BERT the transformer optimizer fused gives QAttention and QEmbedLayerNormalization:
    what the build and inspect say names the quantization (and that no rewrite takes those ops), not only the
    fusion."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from ci_tools.compile.doctor import CAUSES, Diagnosis, source_kind

    f = models.fused_bert(tmp_path / "bert.onnx")
    q = tmp_path / "bert_q.onnx"
    quantize_dynamic(str(f), str(q), weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    kinds = {k["kind"]: k for k in source_kind(onnx.load(str(q)))}
    dyn = kinds["dynamically quantized"]
    assert dyn["ops"]["QAttention"] == 1 and dyn["ops"]["QEmbedLayerNormalization"] == 1
    assert "QAttention, QEmbedLayerNormalization) have no rewrite" in dyn["means"]
    assert "QAttention" not in kinds["fused by ONNX Runtime's transformer optimizer"]["ops"]
    d = Diagnosis(rejected=[("QAttention", "attn"), ("MatMulInteger", "mm")])
    assert all("dynamically quantized" in c["reason"] for c in d.causes()), d.causes()
    assert "dynamically quantized" in CAUSES["DynamicQuantizeLSTM"][0]
