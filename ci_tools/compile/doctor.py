"""Why HTP rejects a graph, and what to change: the causes and fixes as data, used by ``inspect``
and by ``build`` (once per graph, before any chip is compiled).

The QNN EP names the nodes it cannot take ("Unsupported nodes in QNN EP: { name: .., type: .. }");
a compile with CPU fallback allowed names the rest (every non-EPContext node stayed on CPU).
Nodes are counted per op type, and each type gets the reason HTP rejects it and the fix.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .ep_log import unsupported_from_log

# bump when a change here would judge a graph differently: trial verdicts cached on disk are keyed by it
# (2: the EP's own I/O quantization, moved ahead of a layout Transpose, is never a rejection; 3: float64 named)
DOCTOR_VERSION = 3
# op type -> (why HTP rejects it, what to do). Groups share one explanation.
_DYNAMIC_QUANT = ("the graph is dynamically quantized ONNX (int8 weights, activations quantized at run time), "
                  "which HTP does not run",
                  "start from the float model (export it without dynamic quantization), or declare "
                  "`fixes: [dequantize]` on the graph; then use fp16, or w8a16/int8, which qnn-release quantizes "
                  "statically")
_CONTROL_FLOW = ("control flow decided by the data: HTP runs one static graph, with no If/Loop/Scan",
                 "fold the branch with graphs[].constants when the condition is fixed, or split the graph there")
_DATA_SIZED = ("its output size depends on the input values; HTP needs every shape fixed before it runs",
               "move it out of the graph (post-processing on CPU), or pad to a fixed size in the export")
CAUSES: dict[str, tuple[str, str]] = {
    "DynamicQuantizeLinear": _DYNAMIC_QUANT, "MatMulInteger": _DYNAMIC_QUANT, "ConvInteger": _DYNAMIC_QUANT,
    "DynamicQuantizeLSTM": _DYNAMIC_QUANT,
    "QLinearMatMul": _DYNAMIC_QUANT, "QLinearConv": _DYNAMIC_QUANT,
    "If": _CONTROL_FLOW, "Loop": _CONTROL_FLOW, "Scan": _CONTROL_FLOW,
    "NonZero": _DATA_SIZED, "Unique": _DATA_SIZED, "NonMaxSuppression": _DATA_SIZED, "Compress": _DATA_SIZED,
    "Erf": ("a bare Erf, outside the exact-GELU pattern x * 0.5 * (1 + Erf(x / sqrt(2))) the QNN EP fuses into its "
            "Gelu (PyTorch's GELU runs on HTP; a Paddle export that folds the 0.5 into the next Conv does not): HTP "
            "has no Erf kernel",
            "declare `fixes: [erf]` on the graph (prepare writes it with Abs, Exp and a polynomial, max error "
            "1.5e-7), or export GELU with the tanh approximation (or whole, as one Gelu op)"),
    "Clip": ("HTP's Clip needs constant min and max", "write Max(x, min) / Min(x, max) instead, or declare "
             "graphs[].fixes: [clip-to-max-min] to let prepare rewrite it"),
    "RandomNormal": ("random ops have no HTP kernel", "feed the noise as an input"),
    "RandomUniform": ("random ops have no HTP kernel", "feed the noise as an input"),
    "RandomNormalLike": ("random ops have no HTP kernel", "feed the noise as an input"),
    "RandomUniformLike": ("random ops have no HTP kernel", "feed the noise as an input"),
    "STFT": ("no HTP kernel for STFT", "compute features on CPU and feed them, or write the DFT as a MatMul"),
    "Einsum": ("the QNN EP has no Einsum kernel",
               "declare `fixes: [einsum]` on the graph: prepare writes a two-operand Einsum that is a (batched) "
               "matrix product (a grouped linear layer, an attention score) as Transpose/Reshape/MatMul"),
}
_CONTRIB = ("an ONNX Runtime contrib op (com.microsoft) made by its transformer optimizer: HTP runs the standard "
            "ops it was fused from",
            "declare `fixes: [unfuse-contrib]` on the graph (prepare writes the standard ops back, checked on CPU), "
            "or export without ONNX Runtime's optimizer")
_CONTRIB_ONLY = ("an ONNX Runtime contrib op (com.microsoft) made by its transformer optimizer, with no "
                 "un-fuse rewrite here",
                 "export the model without ONNX Runtime's transformer optimizer (the plain ONNX export)")
_QUANTIZED_FUSED = ("an ONNX Runtime contrib op that is fused (transformer optimizer) and dynamically quantized "
                    "(quantize_dynamic) at once: int8 weights inside an op only ONNX Runtime runs, with no rewrite "
                    "here",
                    "start from the float model (before quantize_dynamic and the optimizer), or declare "
                    "`fixes: [unfuse-contrib]` on the float export; qnn-release quantizes it itself (w8a16/int8)")
QUANTIZED_FUSED_OPS = ("QAttention", "QEmbedLayerNormalization", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
                       "QGemm", "QOrderedAttention", "QOrderedMatMul")
CAUSES.update({op: _QUANTIZED_FUSED for op in QUANTIZED_FUSED_OPS})
CAUSES.update({op: _CONTRIB for op in ("FastGelu", "QuickGelu", "BiasGelu", "SkipLayerNormalization",
                                       "SkipSimplifiedLayerNormalization", "Attention", "EmbedLayerNormalization")})
CAUSES.update({op: _CONTRIB_ONLY for op in ("MultiHeadAttention", "FusedMatMul", "BiasSoftmax", "BiasAdd",
                                            "GroupQueryAttention")})
# what a declared fix leaves, where a node it is meant for is still rejected
LEFT_BY_FIX = {
    "dequantize": "the rewrite takes constant weights and scales (DequantizeLinear of a constant, through layout ops; "
                  "MatMulInteger, ConvInteger and DynamicQuantizeLSTM of quantize_dynamic); this node's weights or "
                  "scales are computed at run time, or it is a QLinear op with no float rewrite here",
    "erf": "it rewrites Erf of the default domain only",
    "clip-to-max-min": "it rewrites a Clip of the graph itself, not one inside a subgraph",
    "einsum": "it rewrites a two-operand Einsum that is a (batched) matrix product with known shapes only",
    "unfuse-contrib": "it has no rewrite for this contrib op",
    "float64": "it makes float64 values float32; this node is rejected for another reason",
}
_FLOAT64 = ("it computes in float64 (downstream of a Cast to DOUBLE, or a double constant): HTP has no float64",
            "declare `fixes: [float64]` on the graph (prepare computes that part in float32, checked against the "
            "original on CPU), or keep the export in float32")
DEFAULT = ("HTP has no kernel for it (with these input types and shapes)",
           "replace it in the export, or split the graph so it runs outside")



@dataclass
class Diagnosis:
    """The nodes HTP rejects, counted per op type, each with its reason and fix."""

    rejected: list[tuple[str, str]]  # (op type, node name)
    details: dict[str, str] = field(default_factory=dict)  # op type -> a sharper reason from the graph
    fixes: dict[str, str] = field(default_factory=dict)  # op type -> the fix for that sharper reason
    declared: tuple[str, ...] = ()  # the graph's declared fixes: a cause whose fix is declared says what it left

    @property
    def counts(self) -> Counter:
        return Counter(op for op, _ in self.rejected)

    def causes(self) -> list[dict]:
        out = []
        for op, n in self.counts.most_common():
            reason, fix = CAUSES.get(op, DEFAULT)
            fix = self.fixes.get(op, fix)
            named = re.search(r"fixes: \[([\w-]+)\]", fix)
            if named and named[1] in self.declared:  # never "declare the fix" to whom declared it
                fix = (f"`fixes: [{named[1]}]` is declared and left it: "
                       + LEFT_BY_FIX.get(named[1], "no rewrite of that fix matches how this node is written")
                       + "; start from the float export, or split the graph there")
            names = [name for o, name in self.rejected if o == op]
            out.append({"op": op, "count": n, "nodes": names[:5], "reason": self.details.get(op, reason), "fix": fix})
        return out

    def summary(self) -> str:
        """One line: the op types by count, then the first cause and its fix."""
        if not self.rejected:
            return ""
        causes = self.causes()
        ops = ", ".join(f"{c['op']} x{c['count']} ({', '.join(c['nodes'][:3])}{', ...' if c['count'] > 3 else ''})"
                        for c in causes)
        seen, text = set(), []
        for c in causes:
            if (c["reason"], c["fix"]) in seen:
                continue
            seen.add((c["reason"], c["fix"]))
            text.append(f"{c['op']}: {c['reason']}; fix: {c['fix']}")
        return f"HTP rejects {len(self.rejected)} node(s): {ops}. " + " | ".join(text[:3])

    def as_dict(self) -> dict:
        return {"rejected_nodes": len(self.rejected), "ops": dict(self.counts), "causes": self.causes()}


def source_kind(m) -> list[dict]:
    """What the graph is, where that decides the precision and the export: statically quantized (QDQ),
    dynamically quantized, or fused by ONNX Runtime's transformer optimizer."""
    from collections import Counter

    ops = Counter(n.op_type for n in m.graph.node)
    dynamic_ops = ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM",
                   *QUANTIZED_FUSED_OPS)
    contrib = Counter(n.op_type for n in m.graph.node if n.domain == "com.microsoft" and n.op_type not in dynamic_ops)
    kinds = []
    dynamic = {k: ops[k] for k in dynamic_ops if ops[k]}
    embeddings = _int8_embeddings(m)
    if embeddings:
        dynamic["Gather of an int8 table"] = embeddings
    if dynamic:
        kinds.append({"kind": "dynamically quantized", "ops": dynamic,
                      "means": "int8 weights, activations quantized at run time (ONNX Runtime's quantize_dynamic): "
                      "HTP has no run-time quantization; start from the float model, or declare "
                      "`fixes: [dequantize]` (prepare writes each MatMulInteger back as a float MatMul, each "
                      "DynamicQuantizeLSTM as an LSTM, each int8 embedding as a float one), then build fp16, or "
                      "w8a16/int8 calibrated by qnn-release"
                      + ("; its fused and quantized ops (" + ", ".join(o for o in QUANTIZED_FUSED_OPS if ops[o])
                         + ") have no rewrite: start from the float export" if any(ops[o] for o in QUANTIZED_FUSED_OPS)
                         else "")})
    elif ops["QuantizeLinear"] or ops["DequantizeLinear"]:
        kinds.append({"kind": "statically quantized (QDQ)",
                      "ops": {k: ops[k] for k in ("QuantizeLinear", "DequantizeLinear")},
                      "means": "its scales were calibrated for another runtime; qnn-release quantizes float graphs "
                      "itself: build from the float export, or declare `fixes: [dequantize]` (prepare makes "
                      "this graph its float equivalent) for fp16, or w8a16/int8 calibrated on your samples"})
    if contrib:
        kinds.append({"kind": "fused by ONNX Runtime's transformer optimizer", "ops": dict(contrib),
                      "means": "com.microsoft ops only ONNX Runtime runs; `fixes: [unfuse-contrib]` writes "
                      "EmbedLayerNormalization, Attention, SkipLayerNormalization, FastGelu, QuickGelu, Gelu and "
                      "BiasGelu back as standard ops, or export without the optimizer"})
    return kinds


def _int8_embeddings(m) -> int:
    """Gathers from a constant 8-bit table whose rows a DequantizeLinear makes float (a dynamically quantized
    embedding): the Gather then runs on integers HTP only takes inside a quantized graph."""
    consts = {i.name: i.data_type for i in m.graph.initializer}
    users = {i for n in m.graph.node if n.op_type == "DequantizeLinear" for i in n.input[:1]}
    return sum(1 for n in m.graph.node if n.op_type == "Gather" and consts.get(n.input[0]) in (2, 3)
               and n.output[0] in users)


def _named_in_error(message: str) -> list[tuple[str, str]]:
    """onnxruntime's graph errors name the node: ``In Node, ("If_32", If, "", -1)``; only ops HTP is known
    not to run are taken from there (the error may be about anything)."""
    found = re.findall(r'In Node, \("([^"]*)", (\w+),', message)
    return [(op, name) for name, op in found if op in CAUSES]


def diagnose(model: Path, rejected: list[tuple[str, str]]) -> Diagnosis:
    """Count ``rejected`` per op type and sharpen the reason where the graph tells more (a Clip whose
    bounds are computed at run time or infinite)."""
    d = Diagnosis(rejected=sorted(set(rejected)))
    for op in _in_float64(model, {name for _, name in rejected}):
        d.details[op], d.fixes[op] = _FLOAT64
    clips = [name for op, name in rejected if op == "Clip"]
    if clips:
        reason = _clip_reason(model, set(clips))
        if reason:
            d.details["Clip"] = reason
    return d


def _in_float64(model: Path, names: set[str]) -> set[str]:
    """The op types of the named nodes that read or make a float64 value (shapes inferred)."""
    import onnx

    try:
        m = onnx.shape_inference.infer_shapes(onnx.load(str(model), load_external_data=False))
    except Exception:
        return set()
    types = {v.name: v.type.tensor_type.elem_type for v in [*m.graph.input, *m.graph.value_info, *m.graph.output]}
    types.update({i.name: i.data_type for i in m.graph.initializer})
    return {n.op_type for n in m.graph.node if (n.name or n.output[0]) in names
            and any(types.get(v) == onnx.TensorProto.DOUBLE for v in [*n.input, *n.output])}


def _clip_reason(model: Path, names: set[str]) -> str | None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    try:
        m = onnx.load(str(model), load_external_data=False)
    except Exception:
        return None
    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer if not i.external_data}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].HasField("t"):
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    for n in m.graph.node:
        if n.op_type != "Clip" or n.name not in names:
            continue
        parts = []
        for i, what in ((1, "min"), (2, "max")):
            if len(n.input) <= i or not n.input[i]:
                continue
            if n.input[i] not in consts:
                parts.append(f"its {what} is computed at run time")
            elif not np.all(np.isfinite(consts[n.input[i]])):
                parts.append(f"its {what} is infinite")
        if parts:
            return ("HTP's Clip (ReluMinMax) needs finite constant min and max: " + " and ".join(parts)
                    + " (no upper bound means Max(x, min))")
    return None


def trial_compile(model: Path, soc_model: int, htp_arch: int, fp16: bool = True) -> Diagnosis | None:
    """Compile ``model`` once with CPU fallback allowed (ONNX Runtime QNN EP): every node left outside the
    EPContext nodes, and every node the EP's log calls unsupported, is rejected by HTP. None when the
    trial itself fails for another reason (the per-chip compile then reports it)."""
    import tempfile

    import onnx

    from ..errors import CompileError
    from . import qnn_ep

    options = qnn_ep.htp_options(soc_model, htp_arch, fp16=fp16)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "trial.log"
        try:
            ctx, _ = qnn_ep.compile_context(model, qnn_ep.ContextFiles(out_dir=Path(tmp), stem="trial"), options,
                                            allow_cpu_fallback=True, log=log)
        except CompileError as e:
            # a graph ONNX Runtime cannot even partition (a data-dependent If reading outer values ends in
            # INVALID_GRAPH "... of node: []"): with fallback disabled the EP's log names what it refuses
            rejected = e.rejected or _named_in_error(e.message)
            if not rejected:
                try:
                    qnn_ep.compile_context(model, qnn_ep.ContextFiles(out_dir=Path(tmp) / "strict", stem="trial"),
                                           options, log=log)
                except CompileError as strict:
                    rejected = strict.rejected or _named_in_error(strict.message)
            return diagnose(model, rejected) if rejected else None
        compiled = onnx.load(str(ctx), load_external_data=False).graph
        on_cpu = [(n.op_type, n.name or n.output[0]) for n in compiled.node if n.op_type != "EPContext"]
        named = unsupported_from_log(log.read_text(errors="replace"))
    by_name = {name: op for op, name in on_cpu}
    by_name.update({name: op for op, name in named})
    # left on CPU by the EP on purpose, not a rejection: the graph's own float I/O quantization, and what ONNX
    # Runtime's QDQ optimizer made of it (a Q it moved ahead of a layout Transpose reads the input itself)
    io = _io_quantization(onnx.load(str(model), load_external_data=False).graph) | _io_quantization(compiled)
    return diagnose(model, [(op, name) for name, op in by_name.items() if name not in io])


def _io_quantization(g) -> set[str]:
    """The QuantizeLinear nodes that read a graph input and the DequantizeLinear nodes that make a graph
    output: a QDQ graph's float I/O. With CPU fallback allowed the QNN EP leaves them to CPU by design (its
    log says so) and the compiled binary takes the quantized tensors; HTP runs everything between. Asked of
    the QDQ graph and of the compiled one: ONNX Runtime moves a Q across a Transpose on a channels-last input
    (``x -> Transpose -> Q`` becomes ``x -> Q x_q -> ...``), a node the user's graph does not have."""
    ins, outs = {i.name for i in g.input}, {o.name for o in g.output}
    return {n.name or n.output[0] for n in g.node
            if (n.op_type == "QuantizeLinear" and n.input[0] in ins)
            or (n.op_type == "DequantizeLinear" and n.output[0] in outs)}
