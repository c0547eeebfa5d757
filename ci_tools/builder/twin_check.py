"""``python -m ci_tools.builder.twin_check GRAPH SOC_MODEL HTP_ARCH FEEDS.npz SPEC.json OUT.npz [REFERENCE]``: a twin
run as an app runs it, in this process alone (``builder/twin.py``). A float GRAPH is compiled in fp16; a QDQ GRAPH
(a quantized twin) as it is quantized, with CPU's answer from the float REFERENCE graph. Prints one JSON line: the
first load's seconds (the QNN EP compiling the graph at session creation, no context cache) and the process's peak
memory before and after it; writes the outputs on CPU and through the EP for each feed to OUT.npz. SPEC: ``count``
feeds, and for a stateful graph ``streams`` (steps per stream, in order) and ``carry`` (output -> input): each side
carries its own state."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np


def _run(step, feeds: list[dict], spec: dict, names: list[str]) -> list[list[np.ndarray]]:
    """Every feed's outputs; a stream's steps in order, each fed the state this side carried."""
    if not spec.get("streams"):
        return [step(f) for f in feeds]
    from ..sources.samples import run_stream

    outs, at = [], 0
    for n in spec["streams"]:
        outs += run_stream(step, feeds[at:at + n], spec["carry"], names)[1]
        at += n
    return outs


def main() -> int:
    graph, soc_model, htp_arch, feeds_path, spec_path, out = sys.argv[1:7]
    reference = sys.argv[7] if len(sys.argv) > 7 else None
    from ..compile import qnn_ep
    from ..prepare.graph import cpu_session
    from ..util.metrics import peak_memory_mb

    with open(spec_path) as f:
        spec = json.load(f)
    with np.load(feeds_path, allow_pickle=False) as z:
        feeds = [{k.split("/", 1)[1]: z[k] for k in z.files if k.split("/", 1)[0] == str(i)}
                 for i in range(spec["count"])]
    cpu_sess = cpu_session(reference or graph)
    cpu = _run(lambda f: cpu_sess.run(None, f), feeds, spec, [o.name for o in cpu_sess.get_outputs()])
    ort, _ = qnn_ep._ort()
    options = qnn_ep.htp_options(soc_model, int(htp_arch), fp16=reference is None)
    before = peak_memory_mb()
    start = time.monotonic()
    with qnn_ep.quiet_native():
        sess = ort.InferenceSession(graph, sess_options=qnn_ep.session_options(allow_cpu_fallback=False,
                                                                               options=options))
        first_load = time.monotonic() - start
        htp = _run(lambda f: sess.run(None, f), feeds, spec, [o.name for o in cpu_sess.get_outputs()])
    arrays: dict[str, Any] = {f"{side}/{i}/{k}": o for side, runs in (("cpu", cpu), ("htp", htp))
                              for i, outs in enumerate(runs) for k, o in enumerate(outs)}
    np.savez(out, **arrays)  # (typed Any: numpy's stub would match a name to savez's own allow_pickle)
    print(json.dumps({"first_load_seconds": round(first_load, 3), "peak_memory_mb": peak_memory_mb(),
                      "memory_before_mb": before}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
