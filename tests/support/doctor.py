"""What tests/test_doctor.py and tests/unit/test_doctor.py share."""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

from ci_tools.matrix.schema import Thresholds

FP16 = Thresholds(min_cosine=0.999, min_snr_db=20.0, max_abs=1e-3)


def _flow(nodes, inputs, inits=()):
    from ci_tools.compile.inspection import _dims, control_flow, suggest_graph

    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    records = [{"name": v.name, "dtype": "int64" if v.type.tensor_type.elem_type == TensorProto.INT64 else "float32",
                "dims": _dims(v)} for v in m.graph.input]
    return {c["node"]: c for c in control_flow(m, suggest_graph(Path("m.onnx"), records))}


def _branches(tag):
    return {"then_branch": helper.make_graph([helper.make_node("Identity", ["x"], [f"{tag}t"])], "t", [],
                                             [helper.make_tensor_value_info(f"{tag}t", TensorProto.FLOAT, None)]),
            "else_branch": helper.make_graph([helper.make_node("Neg", ["x"], [f"{tag}e"])], "e", [],
                                             [helper.make_tensor_value_info(f"{tag}e", TensorProto.FLOAT, None)])}
