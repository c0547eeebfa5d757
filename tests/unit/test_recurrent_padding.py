"""Issue #34 item 7: a recurrent graph whose time axis the matrix fixes is verified on the padded graph, not on
what an app gets from padding a shorter input: prepare says so, and the warning travels to the record, the
archive's metadata, `inspect` and the release page."""

from __future__ import annotations

from ci_tools.matrix.schema import Graph
from ci_tools.prepare.recurrent import PADDING_WARNING, padding_warning
from tests.support import models


def test_a_fixed_time_axis_of_a_bidirectional_lstm_is_warned_of(tmp_path):
    import onnx

    m = onnx.load(str(models.bilstm_tagger(tmp_path / "tagger.onnx")))
    note = padding_warning(m, Graph(name="main", file="tagger.onnx", inputs={"x": [32, 1, 8]}))
    assert note.startswith(PADDING_WARNING) and "x[0] = 32" in note and "bidirectional: bilstm" in note
    # the batch fixed to 1 is not padding; a graph already static there has nothing fixed by the matrix
    assert padding_warning(m, Graph(name="main", file="tagger.onnx", inputs={})) is None
    # with sequence_lens the layer knows each input's real length
    m.graph.node[0].input.append("lens")  # input 4: sequence_lens
    assert padding_warning(m, Graph(name="main", file="tagger.onnx", inputs={"x": [32, 1, 8]})) is None


def test_the_release_page_lists_the_warning_once_per_model_and_graph():
    from types import SimpleNamespace as NS

    from ci_tools.release.page import _warnings

    graph = NS(name="main", prepare_notes=["int64 inputs now int32", f"{PADDING_WARNING} (x[0] = 32): ..."])
    metas = [NS(model=NS(name="tagger"), graphs=[graph]) for _ in range(3)]  # three chips, one warning
    assert _warnings(metas) == ["tagger/main: recurrent layers over a fixed length (x[0] = 32): ..."]


def _conv_graph(dims: list, mask: bool = False):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones([4, dims[1]] + [3] * (len(dims) - 2), np.float32), "w")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    if mask:
        inputs.append(helper.make_tensor_value_info("x_mask", TensorProto.FLOAT, [1, dims[-1]]))
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="c1")], "g", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(g)


def test_a_cnn_over_one_padded_length_is_warned_of_and_a_resized_image_is_not():
    from ci_tools.prepare.recurrent import CONV_PADDING_WARNING, conv_padding_warning

    line = Graph(name="main", file="m.onnx", inputs={"x": [1, 3, 48, 320]})
    note = conv_padding_warning(_conv_graph([1, 3, 48, "W"]), line)  # a text-line recognizer: width padded
    assert note.startswith(CONV_PADDING_WARNING) and "x[3] = 320" in note and "c1" in note
    assert conv_padding_warning(_conv_graph([1, 3, 48, "W"], mask=True), line) is None  # told where padding is
    image = Graph(name="main", file="m.onnx", inputs={"x": [1, 3, 640, 640]})
    assert conv_padding_warning(_conv_graph([1, 3, "H", "W"]), image) is None  # resized, not padded
    audio = Graph(name="main", file="m.onnx", inputs={"x": [1, 80, 3000]})
    assert "x[2] = 3000" in conv_padding_warning(_conv_graph([1, 80, "T"]), audio)


def test_a_batch_fixed_above_one_is_no_padded_length():
    from ci_tools.prepare.recurrent import conv_padding_warning

    assert conv_padding_warning(_conv_graph(["N", 3, 32, 32]), Graph(name="main", file="m.onnx",
                                                                     inputs={"x": [4, 3, 32, 32]})) is None
