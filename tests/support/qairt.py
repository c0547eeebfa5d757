"""What tests/test_qairt.py and tests/unit/test_qairt.py share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper


def _run_stub_around_identity(stub: Path, feeds: dict) -> list[np.ndarray]:
    """Run a stub with its EPContext node replaced by what a binary that copies its input would do."""
    import onnxruntime as ort

    m = onnx.load(str(stub))
    nodes = list(m.graph.node)
    i = next(k for k, n in enumerate(nodes) if n.op_type == "EPContext")
    ctx = nodes[i]
    copies = [helper.make_node("Identity", [ctx.input[0]], [o], name=f"copy_{o}") for o in ctx.output]
    del m.graph.node[:]
    m.graph.node.extend(nodes[:i] + copies + nodes[i + 1:])
    del m.opset_import[:]
    m.opset_import.extend([helper.make_opsetid("", 21)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
