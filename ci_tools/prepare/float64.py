"""``fixes: [float64]``: a float64 part of a graph computed in float32.

HTP has no float64: an export that casts to DOUBLE for a numerically careful tail (``Cast(to=DOUBLE) -> Softmax
-> Exp``, a log-sum in double) leaves every node after the Cast on CPU, and the doctor sees only "Exp: HTP has no
kernel". In float32 these ops lose what float32 loses (7 significant digits, where fp16 builds keep 3), so the
rewrite is exact for an fp16 or quantized build's purposes; prepare's parity check against the original on CPU
measures it. Written so: every Cast to DOUBLE casts to FLOAT, every double initializer and Constant is float32,
and a double graph input or output is declared float32 (the app then feeds and reads float32).
"""

from __future__ import annotations

DOUBLE, FLOAT = 11, 1  # onnx.TensorProto.DOUBLE, FLOAT


def float64_as_float32(m) -> int:
    """The graph's float64 values as float32 (see the module); the values changed (casts, constants, inputs,
    outputs)."""
    import numpy as np
    from onnx import numpy_helper

    done = 0
    for n in m.graph.node:
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i == DOUBLE:
                    a.i = FLOAT
                    done += 1
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == DOUBLE:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
                    done += 1
        for a in n.attribute:  # CastLike targets, ConstantOfShape's value
            if a.name == "value" and n.op_type == "ConstantOfShape" and a.t.data_type == DOUBLE:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
                done += 1
    for k, t in enumerate(m.graph.initializer):
        if t.data_type == DOUBLE:
            m.graph.initializer[k].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32),
                                                                    t.name))
            done += 1
    for v in [*m.graph.input, *m.graph.output]:
        if v.type.tensor_type.elem_type == DOUBLE:
            v.type.tensor_type.elem_type = FLOAT
            done += 1
    kept = [v for v in m.graph.value_info if v.type.tensor_type.elem_type != DOUBLE]  # shapes are inferred again
    del m.graph.value_info[:]
    m.graph.value_info.extend(kept)
    return done
