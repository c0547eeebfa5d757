"""What tests/test_quantize.py and tests/unit/test_quantize.py share."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper

from tests.conftest import path_model, write_matrix
from tests.support import models
from tests.support.prepare import _prepare


def _ops(m: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in m.graph.node)


def _prepared_attention(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.attention(tmp_path / "models" / "att.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "att", f, chips=["SM8750"], precisions=["w8a16"])])
    (p,) = _prepare(matrix, tmp_path / "cache", name="att")
    return f, p


def _weight_scales(qdq: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {i.name: i for i in qdq.graph.initializer}
    out = {}
    for n in qdq.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and n.input[0].startswith("w_"):
            out[n.input[0].removesuffix("_quantized")] = numpy_helper.to_array(inits[n.input[1]])
    return out


def _old_opset_conv(path):
    """A Conv at opset 11 (RapidOCR's classifier is opset 11): DequantizeLinear has no `axis` there."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(4)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 2.0 ** rng.integers(-3, 3, (8, 1, 1, 1)))
                                .astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "old",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], [w, b])
    return models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), path)
