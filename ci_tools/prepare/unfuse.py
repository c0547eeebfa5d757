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
- ``EmbedLayerNormalization(ids, segment_ids?, word, position, segment?, gamma, beta, mask?, position_ids?;
  epsilon)``: LayerNorm(word[ids] + position[position_ids or 0..S-1] + segment[segment_ids]) * gamma + beta;
  its ``mask_index`` output is each row's count of mask ones (int32);
- ``Attention(input, weights, bias?, mask_index?; num_heads, scale, mask_filter_value)``: Q, K, V = the
  thirds of input @ weights + bias, per head softmax(Q K^T * scale + mask) V, heads joined again; the mask
  is ``mask_filter_value`` (-10000) where a key is masked: ``mask_index`` as a raw [B, S] 0/1 mask or as
  [B] lengths (right padding). ``past``, ``unidirectional``, ``qkv_hidden_sizes``, rotary and the other
  mask forms are refused here, by name.
The mean and inverse-std outputs (1 and 2) of the layer norms are training outputs: a graph that reads them
is refused here, by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import PrepareError

if TYPE_CHECKING:
    from onnx import NodeProto

MS = "com.microsoft"
UNFUSED = ("FastGelu", "QuickGelu", "Gelu", "BiasGelu", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
           "Attention", "EmbedLayerNormalization")


class _Writer:
    """New nodes and constants, named after the node they replace."""

    def __init__(self, m, base: str, opset: int):
        self.m, self.base, self.opset, self.k = m, base, opset, 0
        self.nodes: list[NodeProto] = []

    def const(self, value: float) -> str:
        from onnx import numpy_helper

        self.k += 1
        name = f"{self.base}_c{self.k}"
        self.m.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=np.float32), name))
        return name

    def const_int(self, value: int) -> str:
        from onnx import numpy_helper

        self.k += 1
        name = f"{self.base}_i{self.k}"
        self.m.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype=np.int64), name))
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
    nodes: list[NodeProto] = []
    counts: dict[str, int] = {}
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
        elif n.op_type in ("EmbedLayerNormalization", "Attention") and opset < 13:
            raise PrepareError(f"{what}: {n.op_type} '{n.name}': un-fusing it needs opset 13 or later (the graph "
                               f"imports opset {opset})", hint="re-export the model at opset 13 or later, or "
                               "without ONNX Runtime's transformer optimizer")
        elif n.op_type == "EmbedLayerNormalization":
            _embed_norm(n, w, ins, attrs, read, what)
        elif n.op_type == "Attention":
            _attention(n, w, ins, attrs, what)
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
    _layer_norm(w, s, _Norm(gamma=ins[2], beta="" if simplified else ins[3], eps=eps, centred=not simplified), outs[0])
    sum_out = outs[3]
    if sum_out and sum_out in read:
        w.op("Identity", [s], sum_out)


@dataclass(frozen=True, kw_only=True)
class _Norm:
    """A layer norm's own values: ``gamma``, ``beta`` ("" when none), ``eps``, and whether it is ``centred``
    (LayerNorm; else the RMS form)."""

    gamma: str
    beta: str
    eps: float
    centred: bool = True


def _layer_norm(w: _Writer, s: str, norm: _Norm, out: str) -> None:
    """LayerNorm over the last axis (``norm.centred``; else the RMS form) * gamma (+ beta when given), into ``out``."""
    gamma, beta, eps, centred = norm.gamma, norm.beta, norm.eps, norm.centred
    d = w.op("Sub", [s, w.mean_last(s)]) if centred else s
    var = w.mean_last(w.op("Mul", [d, d]))
    normed = w.op("Div", [d, w.op("Sqrt", [w.op("Add", [var, w.const(eps)])])])
    scaled = w.op("Mul", [normed, gamma], None if beta else out)
    if beta:
        w.op("Add", [scaled, beta], out)


def _int(w: _Writer, values: list[int], name: str) -> str:
    from onnx import numpy_helper

    full = f"{w.base}_{name}"
    w.m.graph.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), full))
    return full


def _embed_norm(n, w: _Writer, ins: list[str], attrs: dict, read: set[str], what: str) -> None:
    ids, segs, word, pos, seg, gamma, beta = ins[:7]
    mask, pos_ids = (list(n.input) + ["", "", ""])[7:9]
    outs = list(n.output) + ["", ""]
    if outs[2] and outs[2] in read:
        raise PrepareError(f"{what}: EmbedLayerNormalization '{n.name}' has its embedding_sum output read: "
                           "not un-fused", hint="export the model without ONNX Runtime's transformer optimizer")
    eps = attrs["epsilon"].f if "epsilon" in attrs else 1e-12
    total = w.op("Gather", [word, ids])
    if not pos_ids:  # positions 0..S-1, S from the ids' shape
        length = w.op("Gather", [w.op("Shape", [ids]), w.const_int(1)], axis=0)
        pos_ids = w.op("Unsqueeze", [w.op("Range", [w.const_int(0), length, w.const_int(1)]), _int(w, [0], "ax0")])
    total = w.op("Add", [total, w.op("Gather", [pos, pos_ids])])
    if seg and segs:
        total = w.op("Add", [total, w.op("Gather", [seg, segs])])
    _layer_norm(w, total, _Norm(gamma=gamma, beta=beta, eps=eps), outs[0])
    if outs[1] and outs[1] in read:
        if not mask:
            raise PrepareError(f"{what}: EmbedLayerNormalization '{n.name}' has no mask but its mask_index is read",
                               hint="export the model without ONNX Runtime's transformer optimizer")
        summed = w.op("ReduceSum", [w.op("Cast", [mask], to=7), _int(w, [1], "ax1")], keepdims=0)
        w.op("Cast", [summed], outs[1], to=6)


def _attention(n, w: _Writer, ins: list[str], attrs: dict, what: str) -> None:
    x, weights, bias, mask = ins[:4]
    extra = [k for k in ("unidirectional", "qkv_hidden_sizes", "do_rotary", "past_present_share_buffer")
             if k in attrs and (attrs[k].i if attrs[k].type == 2 else True)]
    if extra or any(i for i in ins[4:]) or (len(n.output) > 1 and n.output[1]):
        uses = ", ".join(extra) or "past/present or an attention bias"
        raise PrepareError(f"{what}: Attention '{n.name}' uses {uses}: not un-fused here",
                           hint="export the model without ONNX Runtime's transformer optimizer")
    from onnx import numpy_helper

    heads = attrs["num_heads"].i
    hidden3 = next((numpy_helper.to_array(i).shape[-1] for i in w.m.graph.initializer if i.name == weights), None)
    if hidden3 is None or hidden3 % 3 or (hidden3 // 3) % heads:
        raise PrepareError(f"{what}: Attention '{n.name}': its weights are not a constant [H, 3H] split in {heads} "
                           "heads", hint="export the model without ONNX Runtime's transformer optimizer")
    hidden = hidden3 // 3
    size = hidden // heads
    scale = attrs["scale"].f if "scale" in attrs and attrs["scale"].f else 1 / math.sqrt(size)
    qkv = w.op("MatMul", [x, weights])
    if bias:
        qkv = w.op("Add", [qkv, bias])
    split = _int(w, [hidden, hidden, hidden], "split")
    parts = [f"{w.base}_{p}" for p in "qkv"]
    from onnx import helper

    w.nodes.append(helper.make_node("Split", [qkv, split], parts, axis=2, name=f"{w.base}_split"))
    shape = _int(w, [0, 0, heads, size], "heads")
    q, k, v = (w.op("Transpose", [w.op("Reshape", [p, shape])], perm=[0, 2, 1, 3]) for p in parts)
    scores = w.op("Mul", [w.op("MatMul", [q, w.op("Transpose", [k], perm=[0, 1, 3, 2])]), w.const(scale)])
    if mask:
        scores = w.op("Add", [scores, _mask_bias(n, w, mask, x, attrs, what)])
    ctx = w.op("MatMul", [w.op("Softmax", [scores], axis=-1), v])
    w.op("Reshape", [w.op("Transpose", [ctx], perm=[0, 2, 1, 3]), _int(w, [0, 0, hidden], "joined")], n.output[0])


def _mask_bias(n, w: _Writer, mask: str, x: str, attrs: dict, what: str) -> str:
    """[B, 1, 1, S]: 0 where a key is kept, mask_filter_value where it is masked."""
    fill = attrs["mask_filter_value"].f if "mask_filter_value" in attrs else -10000.0
    import onnx

    try:  # the mask's rank tells a raw [B, S] mask from [B] lengths
        typed = onnx.shape_inference.infer_shapes(w.m).graph
    except Exception:
        typed = w.m.graph
    rank = next((len(v.type.tensor_type.shape.dim) for v in list(typed.input) + list(typed.value_info)
                 if v.name == mask and v.type.tensor_type.HasField("shape")), None)
    if rank is None and mask in {o for n in w.m.graph.node if n.op_type == "EmbedLayerNormalization"
                                 for o in n.output[1:2]}:
        rank = 1  # EmbedLayerNormalization's mask_index: a length per row
    if rank == 2:  # a raw 0/1 mask
        keep = w.op("Cast", [mask], to=1)
    elif rank == 1:  # lengths: keys 0..len-1 are kept (right padding)
        length = w.op("Gather", [w.op("Shape", [x]), w.const_int(1)], axis=0)
        positions = w.op("Range", [w.const_int(0), length, w.const_int(1)])
        lengths = w.op("Unsqueeze", [w.op("Cast", [mask], to=7), _int(w, [1], "ax1b")])
        keep = w.op("Cast", [w.op("Less", [positions, lengths])], to=1)
    else:
        raise PrepareError(f"{what}: Attention '{n.name}': a mask_index of {rank or 'unknown'} dimensions is not "
                           "un-fused here",
                           hint="export the model without ONNX Runtime's transformer optimizer")
    bias = w.op("Mul", [w.op("Sub", [w.const(1.0), keep]), w.const(fill)])
    return w.op("Unsqueeze", [bias, _int(w, [1, 2], "ax12")])
