"""A quantized (QDQ) graph checked on ONNX Runtime CPU against its float graph before any chip sees it.

The QDQ graph is the quantizer's simulation of what HTP will run. A graph that is broken there (a
constant of -inf quantized with an infinite scale, NaN from 0 x inf, per-axis scales on an axis of
size 1, an output that no longer depends on the input) fails here with the node named, never blamed
on the calibration and never compiled. Poor but working calibration is left to the per-chip parity.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import CompileError
from ..util.metrics import compare

BROKEN_BELOW = 0.5  # cosine vs the float graph on CPU: below it the graph computes something else
MAX_SAMPLES = 4


def check_quantized(float_path: Path, qdq_path: Path, samples: list[dict[str, np.ndarray]], what: str,
                    precision: str) -> dict:
    """Raise CompileError naming the first node where a broken QDQ graph departs; return per-output
    cosines on CPU (kept in the target's record)."""
    from .graph import cpu_session

    feeds = samples[:MAX_SAMPLES]
    if not feeds:
        return {}
    ref_sess, q_sess = cpu_session(float_path), cpu_session(qdq_path)
    names = [o.name for o in ref_sess.get_outputs()]
    ref = [ref_sess.run(None, f) for f in feeds]
    got = [q_sess.run(None, f) for f in feeds]
    cosines, problems = {}, []
    for k, name in enumerate(names):
        r = [np.asarray(o[k], np.float64) for o in ref]
        g = [np.asarray(o[k], np.float64) for o in got]
        bad = sum(int(np.count_nonzero(~np.isfinite(x))) for x in g)
        cos = min(compare(a, b).cosine for a, b in zip(r, g))
        cosines[name] = round(cos, 6)
        if bad:
            problems.append((name, f"{bad} NaN/Inf values"))
        elif len(feeds) > 1 and _varies(r) and not _varies(g):
            problems.append((name, "the same value for every input (it no longer depends on the input)"))
        elif cos < BROKEN_BELOW:
            problems.append((name, f"cosine {cos:.3f} against the float graph"))
    if problems:
        name, why = problems[0]
        node = first_departure(float_path, qdq_path, feeds[0])
        raise CompileError(f"{what}: the {precision} graph is broken on CPU before any chip: output '{name}': {why}"
                           + (f"; it starts at {node}" if node else ""),
                           hint="a quantizer defect, not the calibration: keep that node in float (or fix its "
                                "constants in the export), try calibration.per_channel: false, or use fp16",
                           details={"quantized_cpu_cosine": cosines})
    return cosines


def _varies(outs: list[np.ndarray]) -> bool:
    scale = max(float(np.max(np.abs(o))) if o.size else 0.0 for o in outs) or 1.0
    return any(float(np.max(np.abs(o - outs[0]))) > 1e-6 * scale for o in outs[1:])


def first_departure(float_path: Path, qdq_path: Path, feed: dict[str, np.ndarray]) -> str | None:
    """The first node (in the float graph's order) whose output, read at the same name in the QDQ graph,
    is non-finite or far from the float one while its inputs were not."""
    from .fp16_range import watched_session

    try:
        fm, fs, _, _ = watched_session(float_path)
        _, qs, _, _ = watched_session(qdq_path)
        fv = dict(zip([o.name for o in fs.get_outputs()], fs.run(None, feed)))
        qv = dict(zip([o.name for o in qs.get_outputs()], qs.run(None, feed)))
    except Exception:  # the localisation is a help: without it the error still names the output
        return None
    for n in fm.graph.node:
        for o in n.output:
            if o not in fv or o not in qv or np.shape(fv[o]) != np.shape(qv[o]):
                continue
            a, b = np.asarray(fv[o], np.float64), np.asarray(qv[o], np.float64)
            finite = np.isfinite(a).all()
            infinite_in = [i for i in n.input if i in fv and not np.isfinite(np.asarray(fv[i], np.float64)).all()]
            note = (f" (its input '{infinite_in[0]}' holds ±inf in the float graph: an infinite constant such as an "
                    "attention mask of -inf cannot be quantized; use a large finite value such as -1e4)"
                    if infinite_in else "")
            if finite and not np.isfinite(b).all():
                return f"node '{n.name or o}' ({n.op_type}), whose output holds NaN/Inf{note}"
            if finite and a.size > 1 and compare(a, b).cosine < BROKEN_BELOW:
                return f"node '{n.name or o}' ({n.op_type}), cosine {compare(a, b).cosine:.3f}{note}"
    return None
