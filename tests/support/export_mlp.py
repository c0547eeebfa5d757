"""An `export` command for tests: builds the ONNX graph from a checkpoint (.npz of weights).

Usage: python tests/support/export_mlp.py <checkpoint.npz> <out dir>
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ckpt, out = np.load(sys.argv[1]), Path(sys.argv[2])
w = numpy_helper.from_array(ckpt["w"].astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
                           helper.make_node("Tanh", ["h"], ["y"], name="act")], "exported",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ckpt["w"].shape[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, ckpt["w"].shape[1]])], [w])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(out / "encoder.onnx"))
