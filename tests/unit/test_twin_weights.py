"""A recipe twin's graphs with their weights beside them (#41): each graph's weights file takes the graph's name in
the twin (the prepared graphs all call theirs graph.onnx.data), and the graph still loads them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ci_tools.builder.twin import _with_weights


def _graph_with_external_weights(folder, scale: float):
    w = numpy_helper.from_array(np.full((4, 4), scale, np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    folder.mkdir()
    path = folder / "graph.onnx"
    onnx.save(helper.make_model(graph), str(path), save_as_external_data=True, location="graph.onnx.data",
              size_threshold=0)
    return path


def test_two_graphs_weights_get_their_own_names_and_still_load(tmp_path):
    twin = tmp_path / "twin"
    twin.mkdir()
    for name, scale in (("encoder.onnx", 2.0), ("reference/decoder.onnx", 3.0)):
        files = _with_weights(name, _graph_with_external_weights(tmp_path / name.replace("/", "_"), scale))
        assert [n for n, _ in files] == [name, f"{name}.data"]
        for n, data in files:
            (twin / n).parent.mkdir(parents=True, exist_ok=True)
            (twin / n).write_bytes(data if isinstance(data, bytes) else data.read_bytes())
        m = onnx.load(str(twin / name))  # its weights, from the file named after it
        assert float(numpy_helper.to_array(m.graph.initializer[0]).mean()) == scale
    plain = tmp_path / "plain.onnx"
    plain.write_bytes(b"x")
    assert _with_weights("encoder.onnx", plain) == [("encoder.onnx", plain)]  # weights inside: as it is
