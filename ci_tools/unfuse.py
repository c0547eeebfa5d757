"""``fixes: [unfuse-contrib]``: ONNX Runtime's fused contrib ops (``com.microsoft``) back to standard ONNX.

ONNX Runtime's transformer optimizer fuses BERT/GPT subgraphs into contrib ops that only ONNX Runtime's
CPU/CUDA kernels know; HTP runs the standard ops they were made of. Each rewrite is the op's documented
formula (onnxruntime ``docs/ContribOperators.md``), and prepare checks the result against the original
graph on CPU like every rewrite:

- ``FastGelu(X, bias?)``: with Z = X + bias, ``0.5 * Z * (1 + Tanh(0.7978845608 * (Z + 0.044715 * Z^3)))``;
- ``QuickGelu(X; alpha=1.702)``: ``X * Sigmoid(alpha * X)``;
- ``Gelu(X)`` and ``BiasGelu(A, B)`` (= Gelu(A + B)): ``0.5 * X * (1 + Erf(X / sqrt(2)))``; the QNN EP
  leaves Erf on CPU, so the doctor then names it (export the tanh form instead);
- ``SkipLayerNormalization(input, skip, gamma, beta?, bias?; epsilon)``: S = input + skip (+ bias), output 0
  is LayerNorm(S) over the last axis * gamma + beta, output 3 (when read) is S;
- ``SkipSimplifiedLayerNormalization(input, skip, gamma, bias?; epsilon)``: the RMS form,
  S / Sqrt(ReduceMean(S^2) + epsilon) * gamma.
The mean and inverse-std outputs (1 and 2) of the layer norms are training outputs: a graph that reads them
is refused here, by name.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import PrepareError

MS = "com.microsoft"
UNFUSED = ("FastGelu", "QuickGelu", "Gelu", "BiasGelu", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization")


class _Writer:
    """New nodes and constants, named after the node they replace."""

    def __init__(self, m, base: str, opset: int):
        self.m, self.base, self.opset, self.nodes, self.k = m, base, opset, [], 0

    def const(self, value: float) -> str:
        from onnx import numpy_helper

        self.k += 1
        name = f"{self.base}_c{self.k}"
        self.m.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=np.float32), name))
        return name

    def op(self, op: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        from onnx import helper

        self.k += 1
        out = out or f"{self.base}_t{self.k}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{self.base}_{op.lower()}{self.k}", **attrs))
        return out

    def mean_last(self, x: str) -> str:
        if self.opset >= 18:  # axes became an input in opset 18
            from onnx import numpy_helper

            axes = f"{self.base}_axes"
            if not any(i.name == axes for i in self.m.graph.initializer):
                self.m.graph.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), axes))
            return self.op("ReduceMean", [x, axes], keepdims=1)
        return self.op("ReduceMean", [x], axes=[-1], keepdims=1)


def unfuse(m, what: str) -> dict[str, int]:
    """Rewrite every contrib op of UNFUSED in the main graph; the counts per op type."""
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 17)
    read = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
    nodes, counts = [], {}
    for n in m.graph.node:
        if n.domain != MS or n.op_type not in UNFUSED:
            nodes.append(n)
            continue
        w = _Writer(m, n.name or n.output[0], opset)
        attrs = {a.name: a for a in n.attribute}
        ins = list(n.input) + [""] * 5
        if n.op_type == "FastGelu":
            z = w.op("Add", [ins[0], ins[1]]) if ins[1] else ins[0]
            cube = w.op("Mul", [w.op("Mul", [z, z]), z])
            inner = w.op("Mul", [w.const(math.sqrt(2 / math.pi)),
                                 w.op("Add", [z, w.op("Mul", [cube, w.const(0.044715)])])])
            half = w.op("Mul", [z, w.const(0.5)])
            w.op("Mul", [half, w.op("Add", [w.op("Tanh", [inner]), w.const(1.0)])], n.output[0])
        elif n.op_type == "QuickGelu":
            alpha = attrs["alpha"].f if "alpha" in attrs else 1.702
            w.op("Mul", [ins[0], w.op("Sigmoid", [w.op("Mul", [ins[0], w.const(alpha)])])], n.output[0])
        elif n.op_type in ("Gelu", "BiasGelu"):
            x = w.op("Add", [ins[0], ins[1]]) if n.op_type == "BiasGelu" else ins[0]
            erf = w.op("Erf", [w.op("Mul", [x, w.const(1 / math.sqrt(2))])])
            w.op("Mul", [w.op("Mul", [x, w.const(0.5)]), w.op("Add", [erf, w.const(1.0)])], n.output[0])
        else:
            _skip_norm(n, w, ins, attrs, read, what)
        nodes.extend(w.nodes)
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    if counts:
        del m.graph.node[:]
        m.graph.node.extend(nodes)
        if not any(n.domain == MS for n in m.graph.node):
            keep = [o for o in m.opset_import if o.domain != MS]
            del m.opset_import[:]
            m.opset_import.extend(keep)
    return counts


def _skip_norm(n, w: _Writer, ins: list[str], attrs: dict, read: set[str], what: str) -> None:
    simplified = n.op_type == "SkipSimplifiedLayerNormalization"
    outs = list(n.output) + [""] * 4
    used = [k for k in (1, 2) if outs[k] and outs[k] in read]
    if used:
        raise PrepareError(f"{what}: {n.op_type} '{n.name}' has its mean/inverse-std output read: not un-fused",
                           hint="those are training outputs: export the model for inference")
    eps = attrs["epsilon"].f if "epsilon" in attrs else 1e-12
    bias = ins[3] if simplified else ins[4]
    s = w.op("Add", [ins[0], ins[1]])
    if bias:
        s = w.op("Add", [s, bias])
    if not simplified:
        d = w.op("Sub", [s, w.mean_last(s)])
    else:
        d = s
    var = w.mean_last(w.op("Mul", [d, d]))
    normed = w.op("Div", [d, w.op("Sqrt", [w.op("Add", [var, w.const(eps)])])])
    beta = "" if simplified else ins[3]
    scaled = w.op("Mul", [normed, ins[2]], None if beta else outs[0])
    if beta:
        w.op("Add", [scaled, beta], outs[0])
    sum_out = outs[3]
    if sum_out and sum_out in read:
        w.op("Identity", [s], sum_out)
