"""fp16 range check: run a prepared graph on CPU over its real samples with every intermediate tensor
recorded, and name the nodes whose values leave what fp16 holds.

Two failures, both measured on HTP (REFERENCE.md; ``shared/audits/vad-htp-root-cause.md``):
- overflow: |x| > 65504. IEEE fp16 would give inf; HTP makes no inf/NaN and carries garbage such as
  131008 on (a LayerNorm's ReduceSum of squares on a real file reached 161273 on CPU);
- underflow that matters: a value that is non-zero in fp32 but rounds to 0 in fp16 (|x| < 2^-25), where
  a later op divides by it, takes its log or its reciprocal square root.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

FP16_MAX = 65504.0
FP16_ZERO_BELOW = 2.0 ** -25  # rounds to (signed) zero in fp16
NEEDS_NONZERO = {("Div", 1), ("Log", 0), ("Reciprocal", 0), ("Pow", 1)}  # (op, input index)
MAX_FEEDS = 1024  # silero-vad's two recordings are 221 steps: every step is scanned


@dataclass(frozen=True)
class Finding:
    node: str
    op: str
    tensor: str
    kind: str  # "overflow" or "underflow"
    value: float  # the largest |x| (overflow) or the smallest non-zero |x| (underflow)
    sample: str
    path: list[str]  # the nodes from this one to the nearest graph output

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        where = f"node '{self.node}' ({self.op}) output '{self.tensor}'"
        if self.kind == "overflow":
            what = f"reaches {self.value:.6g}, beyond fp16's 65504"
        else:
            then = self.path[1] if len(self.path) > 1 else "a later op"
            what = f"holds {self.value:.3g}, which fp16 rounds to 0 before {then}"
        to = " -> ".join(self.path[:6]) + (" -> ..." if len(self.path) > 6 else "")
        return f"{where} {what} on {self.sample} (path to the output: {to})"


def scan(model_path: Path, feeds: list[dict[str, np.ndarray]], names: list[str]) -> list[Finding]:
    """Every node that overflows fp16 (or underflows where a zero breaks a later op) on ``feeds``;
    the first of a chain is listed first (topological order)."""
    m, sess, consumers, outputs = watched_session(model_path)
    out_names = [o.name for o in sess.get_outputs()]
    peak: dict[str, tuple[float, str]] = {}
    tiny: dict[str, tuple[float, str]] = {}
    for feed, sample in list(zip(feeds, names))[:MAX_FEEDS]:
        for name, value in zip(out_names, sess.run(out_names, feed)):
            a = np.abs(np.asarray(value, dtype=np.float64))
            if not a.size or not np.issubdtype(np.asarray(value).dtype, np.floating):
                continue
            top = float(np.max(a[np.isfinite(a)])) if np.isfinite(a).any() else 0.0
            if top > peak.get(name, (-1.0, ""))[0]:
                peak[name] = (top, sample)
            small = a[(a > 0) & (a < FP16_ZERO_BELOW)]
            if small.size and float(small.min()) < tiny.get(name, (np.inf, ""))[0]:
                tiny[name] = (float(small.min()), sample)
    findings = []
    for n in m.graph.node:
        for o in n.output:
            if o in peak and peak[o][0] > FP16_MAX:
                findings.append(Finding(n.name or o, n.op_type, o, "overflow", peak[o][0], peak[o][1],
                                        _path(n, o, consumers, outputs)))
            if o in tiny and any((c.op_type, k) in NEEDS_NONZERO for c, k in consumers.get(o, [])):
                findings.append(Finding(n.name or o, n.op_type, o, "underflow", tiny[o][0], tiny[o][1],
                                        _path(n, o, consumers, outputs)))
    return findings


def watched_session(model_path: Path):
    """The graph with every float intermediate as an extra output, in an unoptimised CPU session:
    (model, session, consumers by tensor name, the graph's own output names)."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(model_path))
    try:
        m = onnx.shape_inference.infer_shapes(m)
    except Exception:  # noqa: S110 - types of intermediates are a help, not a need
        pass
    typed = {v.name: v.type.tensor_type.elem_type for v in list(m.graph.value_info) + list(m.graph.output)
             if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    real = {o.name for o in m.graph.output}
    consumers: dict[str, list] = {}
    for n in m.graph.node:
        for k, i in enumerate(n.input):
            consumers.setdefault(i, []).append((n, k))
    for name in [o for n in m.graph.node for o in n.output if o and typed.get(o) in floats and o not in real]:
        m.graph.output.append(onnx.helper.make_tensor_value_info(name, typed[name], None))
    # what shape inference cannot type (outputs of contrib or custom ops, and all that follows them) is
    # watched too: ONNX Runtime types an untyped graph output from the node that makes it
    untyped = [o for n in m.graph.node for o in n.output if o and o not in typed and o not in real]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    watched = onnx.ModelProto()
    watched.CopyFrom(m)
    watched.graph.output.extend(onnx.helper.make_empty_tensor_value_info(o) for o in untyped)
    try:
        sess = ort.InferenceSession(watched.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
        m = watched
    except Exception:  # an untyped output ORT cannot expose (a sequence, an optional): watch the typed ones
        sess = ort.InferenceSession(m.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
    return m, sess, consumers, real


def _path(node, tensor: str, consumers: dict, outputs: set[str]) -> list[str]:
    """Node names from ``node`` to the nearest graph output (breadth first)."""
    from collections import deque

    start = node.name or tensor
    queue, seen = deque([(tensor, [start])]), {tensor}
    while queue:
        t, path = queue.popleft()
        if t in outputs:
            return [*path, f"output '{t}'"]
        for c, _ in consumers.get(t, []):
            for o in c.output:
                if o not in seen:
                    seen.add(o)
                    queue.append((o, [*path, c.name or o]))
    return [start]
