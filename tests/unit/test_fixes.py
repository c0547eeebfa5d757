"""Declared graph fixes that rewrite a layer HTP rejects or computes wrongly: each gives the same tensor as the
layer it replaces on CPU (real ONNX Runtime), over the cases its docstring claims, and leaves the rest alone."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ci_tools.prepare.convtranspose import output_padding_as_pads, wrong_on_htp
from ci_tools.prepare.einsum import einsum_as_matmul


def _run(m, feeds):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _einsum(eq: str, a_shape, b_shape, b_const: bool):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))]
    inits = [numpy_helper.from_array(b, "b")] if b_const else []
    if not b_const:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape)))
    g = helper.make_graph([helper.make_node("Einsum", ["a", "b"], ["y"], equation=eq)], "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    feeds = {"a": a} if b_const else {"a": a, "b": b}
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), feeds


@pytest.mark.parametrize(("eq", "a", "b", "const"), [
    ("btgi,gio->btgo", (2, 5, 3, 4), (3, 4, 6), True),  # a grouped linear layer
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5), False),
    ("bhqd,bhkd->bhqk", (1, 2, 3, 8), (1, 2, 5, 8), False),  # attention scores
    ("nd,hd->nh", (7, 4), (3, 4), True),  # a linear layer with the weight as stored
    ("ij,jk->ki", (3, 4), (4, 2), True),  # output transposed
    ("bij,jk->bik", (2, 3, 4), (4, 6), True),
])
def test_a_matmul_shaped_einsum_becomes_transpose_reshape_matmul(eq, a, b, const):
    m, feeds = _einsum(eq, a, b, const)
    want = _run(m, feeds)
    assert einsum_as_matmul(m) == (1, 0)
    ops = Counter(n.op_type for n in m.graph.node)
    assert "Einsum" not in ops and ops["MatMul"] == 1, ops
    np.testing.assert_allclose(_run(m, feeds), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq", ["ij,ij->i", "ii,ij->j", "...ij,...jk->...ik"])
def test_an_einsum_that_is_no_matrix_product_is_left_as_it_was(eq):
    shapes = {"ij,ij->i": ((3, 4), (3, 4)), "ii,ij->j": ((3, 3), (3, 4)), "...ij,...jk->...ik": ((2, 3, 4), (2, 4, 5))}
    m, _ = _einsum(eq, *shapes[eq], True)
    if eq == "ij,ij->i":  # an elementwise product summed over j: j in both inputs, i in both and out: batch
        assert einsum_as_matmul(m)[0] == 1
        return
    assert einsum_as_matmul(m) == (0, 1)
    assert [n.op_type for n in m.graph.node] == ["Einsum"]


def _convtranspose(group: int, pads, out_pad, bias: bool, channels: int = 4, k=(1, 3), strides=(1, 2)):
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((channels, channels // group, *k)).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "bias"))
        ins.append("bias")
    node = helper.make_node("ConvTranspose", ins, ["y"], name="up", group=group, kernel_shape=list(k),
                            strides=list(strides), pads=list(pads), output_padding=list(out_pad))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 1, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("pads", "out_pad", "bias"), [
    ((0, 1, 0, 1), (0, 1), False),  # the decoder's layer: output_padding within the end pad
    ((0, 1, 0, 1), (0, 1), True),
    ((0, 0, 0, 0), (0, 1), True),  # past the full result: bias only there
    ((0, 0, 0, 0), (0, 1), False),
])
def test_output_padding_becomes_end_padding_with_the_same_tensor(pads, out_pad, bias):
    m = _convtranspose(group=4, pads=pads, out_pad=out_pad, bias=bias)
    assert wrong_on_htp(m) == ["up"]
    x = {"x": np.random.default_rng(2).standard_normal((1, 4, 1, 9)).astype(np.float32)}
    want = _run(m, x)
    assert output_padding_as_pads(m) == 1
    assert wrong_on_htp(m) == []
    assert all(not any(a.ints) for n in m.graph.node for a in n.attribute if a.name == "output_padding")
    got = _run(m, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_only_a_depthwise_convtranspose_with_output_padding_is_called_wrong():
    assert wrong_on_htp(_convtranspose(group=1, pads=(0, 1, 0, 1), out_pad=(0, 1), bias=False)) == []
    assert wrong_on_htp(_convtranspose(group=4, pads=(0, 1, 0, 1), out_pad=(0, 0), bias=False)) == []


def test_prepare_applies_the_declared_fixes_and_warns_of_a_layer_htp_computes_wrongly(tmp_path):
    """A decoder's depthwise ConvTranspose with output_padding: without its fix prepare warns (the record and the
    page carry prepare's warnings) and names the fix; declared, the layer is rewritten and the warning goes. A
    grouped linear Einsum over a dynamic time axis is rewritten once the matrix fixes the length."""
    from tests.conftest import path_model, write_matrix
    from tests.support.models import save
    from tests.support.prepare import _prepare

    (tmp_path / "models").mkdir()
    m = _convtranspose(group=4, pads=(0, 1, 0, 1), out_pad=(0, 1), bias=True)
    rng = np.random.default_rng(4)
    m.graph.initializer.append(numpy_helper.from_array(rng.standard_normal((4, 5, 3)).astype(np.float32), "wg"))
    m.graph.node.extend([helper.make_node("Reshape", ["y", "shape"], ["yg"]),
                         helper.make_node("Einsum", ["yg", "wg"], ["z"], equation="btgi,gio->btgo")])
    m.graph.initializer.append(numpy_helper.from_array(np.array([1, -1, 4, 5], np.int64), "shape"))
    m.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "T"
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, "U", 4, 3]))
    src = save(m, tmp_path / "models" / "dec.onnx")
    notes = {}
    for fixes in ([], ["convtranspose-output-padding", "einsum"]):
        model = path_model(tmp_path, "dec", src, graphs=[{"name": "main", "file": "dec.onnx", "fixes": fixes,
                                                          "inputs": {"x": [1, 4, 1, 10]}}], chips=["SM8750"])
        (prep,) = _prepare(write_matrix(tmp_path, [model]), tmp_path / f"cache{len(fixes)}", name="dec")
        notes[len(fixes)] = prep.notes
        ops = Counter(n.op_type for n in onnx_load(prep.path).graph.node)
        assert ("Einsum" in ops) == (not fixes), ops
    warned = [n for n in notes[0] if "computes a depthwise ConvTranspose with output_padding wrongly" in n]
    assert warned and warned[0].startswith("warning:") and "fixes: [convtranspose-output-padding]" in warned[0]
    assert not any("wrongly" in n for n in notes[2]), notes[2]
    assert any(n.startswith("fix convtranspose-output-padding: 1 ConvTranspose") for n in notes[2])
    assert any(n.startswith("fix einsum: 1 Einsum(s) now") for n in notes[2])


def onnx_load(path):
    import onnx

    return onnx.load(str(path))


def test_erf_written_with_htp_ops_keeps_its_error_bound():
    import math

    from ci_tools.prepare.erf import ERROR_BOUND, erf_as_ops, erf_reference

    x = np.linspace(-6, 6, 24001)
    exact = np.array([math.erf(v) for v in x])
    assert np.max(np.abs(erf_reference(x) - exact)) <= ERROR_BOUND  # the handbook's bound, in float64
    g = helper.make_graph([helper.make_node("Erf", ["x"], ["y"], name="bare")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, x.size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, x.size])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert erf_as_ops(m) == 1 and "Erf" not in {n.op_type for n in m.graph.node}
    got = _run(m, {"x": x[None].astype(np.float32)})[0]
    assert np.max(np.abs(got - exact)) < 1e-6  # the graph in float32 (float32's rounding on top of the bound)


def test_float64_becomes_float32_with_the_same_answer():
    from ci_tools.prepare.float64 import float64_as_float32

    nodes = [helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Mul", ["d", "k"], ["dk"]),
             helper.make_node("Softmax", ["dk"], ["p"], axis=-1), helper.make_node("Exp", ["p"], ["e"]),
             helper.make_node("Cast", ["e"], ["y"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 30])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 30])],
                          [numpy_helper.from_array(np.array(3.0), "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((2, 30)).astype(np.float32)
    want = _run(m, {"x": x})
    assert float64_as_float32(m) == 2  # the Cast and the double constant
    assert not any(t.data_type == TensorProto.DOUBLE for t in m.graph.initializer)
    np.testing.assert_allclose(_run(m, {"x": x}), want, rtol=1e-6)


def test_a_per_axis_table_read_through_a_transpose_folds_and_a_per_tensor_gather_chain_is_float():
    from ci_tools.prepare.dequantize import dequantize, dequantize_through_layout

    rng = np.random.default_rng(3)
    table = rng.integers(-127, 128, (20, 6)).astype(np.int8)
    scales = rng.uniform(0.01, 0.1, 6).astype(np.float32)
    inits = [numpy_helper.from_array(table, "T_q"), numpy_helper.from_array(scales, "s"),
             numpy_helper.from_array(np.zeros(6, np.int8), "z"), numpy_helper.from_array(np.array(0.05, np.float32),
                                                                                         "s1"),
             numpy_helper.from_array(np.array(3, np.int8), "z1"), numpy_helper.from_array(np.array([1, -1]), "shape")]
    nodes = [helper.make_node("Transpose", ["T_q"], ["Tt_q"], perm=[1, 0]),  # per axis: constants only
             helper.make_node("DequantizeLinear", ["Tt_q", "s", "z"], ["Tt"], axis=0),
             helper.make_node("MatMul", ["x", "Tt"], ["y"]),
             helper.make_node("Gather", ["T_q", "ids"], ["rows_q"]),  # per tensor: through a run-time Gather
             helper.make_node("Reshape", ["rows_q", "shape"], ["flat_q"]),
             helper.make_node("DequantizeLinear", ["flat_q", "s1", "z1"], ["flat"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6]),
                                       helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 20]),
                           helper.make_tensor_value_info("flat", TensorProto.FLOAT, [1, 18])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 6)).astype(np.float32), "ids": np.array([4, 0, 19])}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    assert dequantize_through_layout(m) == 2
    dequantize(m)
    assert "DequantizeLinear" not in {n.op_type for n in m.graph.node}
    assert not any(t.data_type == TensorProto.INT8 for t in m.graph.initializer if t.name != "z1")
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_the_doctor_names_float64_and_what_a_declared_fix_left(tmp_path):
    import onnx

    from ci_tools.compile.doctor import Diagnosis, diagnose

    nodes = [helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Exp", ["d"], ["e"], name="tail_exp"),
             helper.make_node("Cast", ["e"], ["y"], to=TensorProto.FLOAT)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "t.onnx"))
    (cause,) = diagnose(tmp_path / "t.onnx", [("Exp", "tail_exp")]).causes()
    assert "computes in float64" in cause["reason"] and "fixes: [float64]" in cause["fix"]
    (left,) = Diagnosis(rejected=[("QLinearConv", "c")], declared=("dequantize",)).causes()
    assert left["fix"].startswith("`fixes: [dequantize]` is declared and left it: ") and "QLinear op" in left["fix"]
    (plain,) = Diagnosis(rejected=[("QLinearConv", "c")]).causes()
    assert "declare `fixes: [dequantize]`" in plain["fix"]


def test_the_exact_gelu_erf_is_left_to_the_eps_fusion():
    from ci_tools.prepare.erf import erf_as_ops

    inits = [numpy_helper.from_array(np.array(2 ** 0.5, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["xs"]), helper.make_node("Erf", ["xs"], ["e"], name="gelu_erf"),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["x", "e1"], ["xe"]),
             helper.make_node("Mul", ["xe", "half"], ["g"]),
             helper.make_node("Erf", ["g"], ["y"], name="bare")]  # a bare one after it
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert erf_as_ops(m) == 1
    assert [n.name for n in m.graph.node if n.op_type == "Erf"] == ["gelu_erf"]
