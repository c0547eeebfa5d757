"""What a context binary itself takes and gives, read from its EPContext stub.

A device service (AI Hub) runs the raw ``.bin``: its inputs are the EPContext node's inputs (the names the
binary's graph has, its dtype and layout: a quantized qairt binary takes uint8/uint16 and gives them back),
not the ONNX graph's. The stub holds exactly the conversion an app needs: the nodes in front of the EPContext
node (QuantizeLinear, Transpose, Cast) make the binary's inputs from the ONNX inputs, the nodes behind it make
the ONNX outputs from the binary's. So both parts run here, on ONNX Runtime's CPU, around the device run;
a stub without such nodes (the ort route's, fp16 qairt's) passes values through as they are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import QnnReleaseError


class BinaryIO:
    def __init__(self, ctx: Path):
        import onnx

        m = onnx.load(str(ctx), load_external_data=False)
        nodes = [n for n in m.graph.node if n.op_type == "EPContext"]
        if len(nodes) != 1:
            raise QnnReleaseError(f"{ctx}: expected one EPContext node, found {len(nodes)}")
        node = nodes[0]
        self.inputs = [i for i in node.input if i]  # the binary's tensor names, in its order
        self.outputs = list(node.output)
        self.graph_inputs = [i.name for i in m.graph.input]
        self.graph_outputs = [o.name for o in m.graph.output]
        types = {v.name: v for v in [*m.graph.input, *m.graph.output, *m.graph.value_info]}
        self._pre = _session(_part(m, node, self.graph_inputs, [n for n in self.inputs if n not in self.graph_inputs],
                                   types, ctx))
        self._post = _session(_part(m, node, self.outputs, [n for n in self.graph_outputs if n not in self.outputs],
                                    types, ctx))
        self.dtypes = {n: _np_type(types[n]) for n in [*self.inputs, *self.outputs] if n in types}

    def to_binary(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The binary's inputs for one ONNX feed."""
        made = _run(self._pre, feed)
        return {n: np.asarray(feed[n] if n in feed else made[n]) for n in self.inputs}

    def from_binary(self, got: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The ONNX outputs for one set of the binary's outputs (cast to the binary's own dtype first: a service
        may hand back an integer tensor widened)."""
        given = {n: np.asarray(v).astype(self.dtypes[n]) if n in self.dtypes and np.asarray(v).dtype.kind == "iu"
                 and self.dtypes[n].kind == "iu" else np.asarray(v) for n, v in got.items()}
        for n in self.outputs:
            if n in self.dtypes and self.dtypes[n].kind == "iu" and n in given and given[n].dtype.kind == "f":
                raise QnnReleaseError(f"the device gave '{n}' as {given[n].dtype}, the binary's output is "
                                      f"{self.dtypes[n]}: cannot tell whether it is dequantized")
        made = _run(self._post, {n: given[n] for n in self.outputs if n in given})
        return {n: given[n] if n in given else made[n] for n in self.graph_outputs}


def _np_type(value_info) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type))


def _part(m, ctx_node, inputs: list[str], outputs: list[str], types: dict, where: Path):
    """The stub's nodes that compute ``outputs`` from ``inputs`` (without the EPContext node), as a model."""
    if not outputs:
        return None
    from onnx import helper

    producer = {o: n for n in m.graph.node if n is not ctx_node for o in n.output}
    needed, keep, stack = set(), [], list(outputs)
    while stack:
        name = stack.pop()
        if name in needed or name in inputs or name not in producer:
            continue
        needed.add(name)
        node = producer[name]
        if node not in keep:
            keep.append(node)
        stack += [i for i in node.input if i]
    missing = [n for n in [*inputs, *outputs] if n not in types]
    if missing:
        raise QnnReleaseError(f"{where}: no type for {', '.join(missing)} in the stub (value_info)")
    order = [n for n in m.graph.node if n in keep]
    used = {i for n in order for i in n.input}
    graph = helper.make_graph(order, "part", [types[n] for n in inputs], [types[n] for n in outputs],
                              initializer=[t for t in m.graph.initializer if t.name in used])
    return helper.make_model(graph, opset_imports=[o for o in m.opset_import if o.domain in ("", "ai.onnx")],
                             ir_version=m.ir_version)


def _session(model):
    if model is None:
        return None
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3  # an unused graph input of the part is expected
    return ort.InferenceSession(model.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])


def _run(sess, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if sess is None:
        return {}
    names = [i.name for i in sess.get_inputs()]
    outs = sess.run(None, {n: feed[n] for n in names})
    return dict(zip([o.name for o in sess.get_outputs()], outs))
