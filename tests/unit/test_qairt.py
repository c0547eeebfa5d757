"""The qairt route, driven against a fake QAIRT SDK tree that behaves as the real tools do (each rule

The unit tier of tests/test_qairt.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ci_tools.compile.backends.qairt import (
    QNN_DTYPES,
    StubSpec,
    TensorIO,
    camel_keys,
    qnn_name,
    tensor_io,
    write_stub,
)
from ci_tools.errors import CompileError
from tests.support.qairt import _run_stub_around_identity


@pytest.mark.parametrize("name,qnn", [("a--b", "a_b"), ("_x", "__x"), ("1x", "_1x"), ("input.1", "input_1"),
                                      ("/conv/Conv_output_0", "__conv_Conv_output_0"), ("probs:0", "probs_0"),
                                      ("model-10-seconds", "model_10_seconds")])
def test_names_are_sanitised_as_the_converter_does(name, qnn):
    assert qnn_name(name) == qnn


def test_keys_with_spaces_are_read_as_camel_case():  # audit #16 (qairt-dev's AISW-123397 workaround)
    got = camel_keys({"info": {"soc model": 69, "context metadata": {"info": {"dsp arch": 79}}, "graphs": [
        {"info": {"graph name": "g"}}]}})
    assert got == {"info": {"socModel": 69, "contextMetadata": {"info": {"dspArch": 79}},
                            "graphs": [{"info": {"graphName": "g"}}]}}


@pytest.mark.parametrize("dtype", ["QNN_DATATYPE_UFIXED_POINT_16", "QNN_DATATYPE_UFIXED_POINT_8",
                                   "QNN_DATATYPE_FLOAT_16", "QNN_DATATYPE_FLOAT_32"])
def test_the_stub_converts_layout_and_dtype_at_its_boundary(tmp_path, dtype):
    """Transpose + Q (or Cast) in front, DQ (or Cast) + Transpose behind: what goes in comes out."""
    quant = "FIXED" in dtype
    scale, offset = (2.0 / (2 ** (16 if "16" in dtype else 8) - 1), -(2 ** (15 if "16" in dtype else 7))) \
        if quant else (None, None)
    kw = {"dtype": dtype, "dims": (1, 5, 6, 3), "onnx_shape": (1, 3, 5, 6), "perm": (0, 2, 3, 1),
          "scale": scale, "offset": offset}
    io_in, io_out = TensorIO(onnx="x", qnn="x", **kw), TensorIO(onnx="y.0", qnn="y_0", **kw)
    names = write_stub(tmp_path / "s.onnx", [io_in], [io_out],
                       StubSpec(graph_name="g", binary_name="g.bin", sdk="v2", props={}))
    assert names == {"x": "x_dq" if kw["perm"] else "x", "y.0": "y.0"}  # a wrapped input renamed outside
    x = np.random.default_rng(0).uniform(-0.9, 0.9, (1, 3, 5, 6)).astype(np.float32)
    (y,) = _run_stub_around_identity(tmp_path / "s.onnx", {names["x"]: x})
    assert y.shape == x.shape and y.dtype == np.float32
    tol = scale if quant else (1e-3 if "16" in dtype else 0)
    assert np.max(np.abs(y - x)) <= tol + 1e-7


def test_every_qnn_data_type_is_mapped_and_an_unknown_one_refused(tmp_path):
    from ci_tools.prepare.graph import TensorInfo

    assert {"QNN_DATATYPE_INT_8", "QNN_DATATYPE_INT_16", "QNN_DATATYPE_INT_32", "QNN_DATATYPE_INT_64",
            "QNN_DATATYPE_UINT_8", "QNN_DATATYPE_UINT_16", "QNN_DATATYPE_UINT_32", "QNN_DATATYPE_FLOAT_16",
            "QNN_DATATYPE_FLOAT_32", "QNN_DATATYPE_UFIXED_POINT_8", "QNN_DATATYPE_UFIXED_POINT_16",
            "QNN_DATATYPE_SFIXED_POINT_8", "QNN_DATATYPE_SFIXED_POINT_16", "QNN_DATATYPE_BOOL_8"} <= set(QNN_DTYPES)

    class P:
        def __init__(self):
            self.inputs = [TensorInfo(name="x", dtype="float32", shape=[1, 4])]
            self.outputs = [TensorInfo(name="y", dtype="float32", shape=[1, 4])]

    def info(dtype):
        t = {"info": {"name": "x", "dataType": dtype, "dimensions": [1, 4]}}
        return {"graphs": [{"info": {"graphInputs": [t], "graphOutputs": [{"info": {**t["info"], "name": "y"}}]}}]}

    ins, _ = tensor_io(info("QNN_DATATYPE_INT_16"), P(), tmp_path / "none.json", "t")
    assert ins[0].np_dtype == np.int16 and not ins[0].quantized
    with pytest.raises(CompileError, match="QNN_DATATYPE_STRING"):
        tensor_io(info("QNN_DATATYPE_STRING"), P(), tmp_path / "none.json", "t")
