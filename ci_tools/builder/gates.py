"""Checks before any chip compiles, once per graph: a trial compile that names what HTP rejects, the fp16
range check on real samples, and samples or checks that name nothing the graphs have."""

from __future__ import annotations

from pathlib import Path

from ..errors import PrepareError, QnnReleaseError
from ..matrix.plan import Target
from ..matrix.schema import Model, NpzFrontEnd
from ..prepare.graph import Prepared
from ..sources.samples import SampleSet, calibration_feeds


def trial_compile(route, prep: Prepared, targets: list[Target], out: Path, cache: Path,
            quantized: Path | None = None) -> QnnReleaseError | None:
    """Once per graph and precision family, before any chip is compiled: a trial compile (CPU fallback
    allowed) for the most capable chip among the targets names every node HTP rejects. The float graph is
    tried in fp16 for the fp16 targets; a quantized precision's QDQ graph (``quantized``) for its own
    targets, since HTP takes different ops in float and quantized graphs. A rejection fails those targets
    once, with its cause, instead of once per chip. Routes without a trial skip this."""
    capable = [t for t in targets if t.soc.fp16 or quantized is not None]
    if not capable:
        return None
    t = max(capable, key=lambda x: (x.soc.htp_arch, x.soc.soc_model))
    diagnosis = route.doctor(prep, t.soc, quantized)
    if diagnosis is None or not diagnosis.rejected:
        return None
    graph = next((g for g in t.model.graphs if g.name == prep.graph), None)
    diagnosis.declared = tuple(graph.fixes) if graph is not None else ()
    from ..errors import CompileError

    what = f"{targets[0].precision} " if quantized is not None else "fp16 "
    return CompileError(f"{prep.model}/{prep.graph}: {diagnosis.summary()} ({what}trial compile for {t.soc.name}, "
                        f"{t.soc.arch}; no chip was compiled)",
                        hint="`qnn-release inspect` shows every op with its reason and fix",
                        details={"diagnosis": {**diagnosis.as_dict(), "trial_soc": t.soc.name,
                                               "trial_precision": targets[0].precision if quantized else "fp16"}})


def unused_samples(m: Model, preps: dict[str, Prepared]) -> QnnReleaseError | None:
    """Samples that feed none of the model's graphs are a mistake (a misspelt input), not "no samples"; so are
    checks (argmax, slices) that name an output no graph has."""
    from ..errors import ConfigError
    from ..sources.samples import graph_uses

    if not preps:
        return None
    outputs = {o.name for p in preps.values() for o in p.outputs}
    blocks = m.sample_blocks()
    judged_whole = [name for b in blocks for name in [*b.argmax, *(
        [*b.stream.decisions, *b.stream.range, *b.stream.carry] if b.stream is not None else [])]]
    for name in m.options.slices:
        if name not in outputs and len(preps) == len(m.graphs):
            return ConfigError(f"{m.name}: options.slices: no graph has the output '{name}'",
                               hint=f"outputs: {', '.join(sorted(outputs))}")
        if name in judged_whole:
            return ConfigError(f"{m.name}: options.slices.{name}: the output is also judged whole (samples.argmax or "
                               "samples.stream names it)", hint="judge it whole or by slices, not both")
    named = [("options.where", n) for gate in m.options.where.items() for n in (gate[0], gate[1].output)] + \
        [("options.constant_outputs", n) for n in m.options.constant_outputs]
    for key, name in named:
        if name not in outputs and len(preps) == len(m.graphs):
            return ConfigError(f"{m.name}: {key}: no graph has the output '{name}'",
                               hint=f"outputs: {', '.join(sorted(outputs))}")
    for name in m.options.where:
        if name in judged_whole:
            return ConfigError(f"{m.name}: options.where.{name}: the output is also judged whole (samples.argmax or "
                               "samples.stream names it)", hint="judge it at the gated positions or whole, not both")
    for b in blocks:
        for name in b.argmax:
            if name not in outputs and len(preps) == len(m.graphs):
                return ConfigError(f"{m.name}: samples.argmax: no graph has the output '{name}'",
                                   hint=f"outputs: {', '.join(sorted(outputs))}")
        if any(graph_uses(b, g, [i.name for i in p.inputs]) for g, p in preps.items()):
            continue
        if b.graphs and not set(b.graphs) & set(preps):
            continue  # its graphs are not built in this run
        fe = b.front_end
        names = sorted({i.name for p in preps.values() for i in p.inputs})
        return ConfigError(f"{m.name}: samples feed no graph: "
                           + (f"samples.graphs {b.graphs} names none of {sorted(preps)}" if b.graphs
                              else f"no graph has the input '{fe.input}' (samples.front_end.input)"
                              if not isinstance(fe, NpzFrontEnd) else "no graph has the inputs its .npz files hold"),
                           hint=f"the graphs' inputs: {', '.join(names)}")
    return None


def fp16_range_gate(m: Model, prep: Prepared, ss: SampleSet) -> QnnReleaseError | None:
    """Before any chip compiles: the prepared graph on CPU over its real samples, every intermediate
    recorded (in ``prep.notes``, which the report shows); a node whose values leave fp16's range
    refuses fp16 (unless the matrix says why not)."""
    from ..prepare.fp16_range import scan
    from ..prepare.graph import cpu_session

    sess = cpu_session(prep.path)
    names = [o.name for o in prep.outputs]
    feeds = calibration_feeds(ss, lambda f: sess.run(None, f), names)
    labels = [f"{n} step {i}" if ss.stream else n for n, steps in ss.streams for i in range(len(steps))]
    findings = scan(prep.path, feeds, labels)
    prep.notes.extend(f"fp16 range: {f.line()}" for f in findings)
    if not findings or m.options.fp16_overflow_ok:
        return None
    first = findings[0]
    more = f" ({len(findings) - 1} more node(s) in the report)" if len(findings) > 1 else ""
    return PrepareError(f"{m.name}/{prep.graph}: fp16 refused: {first.line()}{more}",
                        hint=_range_hint(prep, first),
                        details={"fp16_range": [f.as_dict() for f in findings]})


def _range_hint(prep: Prepared, first) -> str:
    """The fix for an fp16 overflow: the declared prescale rewrite when it starts inside a LayerNorm/RMSNorm."""
    import onnx

    from ..prepare.prescale import offer

    rest = "compile it as w8a16, or accept it with options.fp16_overflow_ok: <why>"
    entry = offer(onnx.load(str(prep.path)), first.node, first.value) if first.kind == "overflow" else None
    if entry is not None:
        return (f"the node is part of a normalisation of '{entry[0]}': add `prescale: {{{entry[0]}: {entry[1]}}}` to "
                f"graph '{prep.graph}' in the matrix (it runs on {entry[0]} / {entry[1]}, the same output); or " + rest)
    return ("rescale the values before this node in the export (e.g. a variance on a pre-scaled input, a LayerNorm "
            "whose sum of squares stays small), " + rest)
