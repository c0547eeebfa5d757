"""Where the NPU goes wrong: the first node whose output leaves CPU's, on the sample that failed.

The hunt a wrong answer needs (``shared/audits/vad-htp-root-cause.md``; seed 004's multi-output probe): the
graph's intermediates made graph outputs, the graph compiled for the chip and run on the HTP emulator and on CPU
over the same sample, each intermediate judged as an output would be. In topological order the first one that
fails names the node, with the agreement of its inputs (before) and of its output (after). The cost is bounded:
at most ``budget`` intermediates per compile, spread evenly, then the stretch between the last agreeing one and
the first failing one again (``rounds`` compiles at most). Only the embedded route has an emulator here.

Caveat, said in the report: extra outputs can keep HTP from fusing nodes, so a fault inside a fusion may vanish
from the probe graph (every intermediate agrees); that is reported as such, never as a pass.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..util.text import clip

BUDGET = 48  # intermediates per probe compile
ROUNDS = 3
SKIP_OPS = {"Constant", "Shape", "Size", "QuantizeLinear"}


@dataclass(frozen=True, kw_only=True)
class Sample:
    """What a hunt runs on: the sample's name (as the report says it) and its feed (arrays by input name)."""

    name: str
    feed: dict[str, np.ndarray]


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """What a hunt may cost: at most ``budget`` intermediates per probe compile, at most ``rounds`` compiles."""

    budget: int = BUDGET
    rounds: int = ROUNDS


@dataclass
class Bisection:
    sample: str
    compiles: int = 0
    probed: int = 0
    candidates: int = 0
    first: dict | None = None  # the first intermediate that leaves CPU's: tensor, node, op, attrs, numbers, inputs
    last_agreeing: dict | None = None
    known: str | None = None
    fix: str | None = None
    note: str | None = None
    numbers: dict = field(default_factory=dict)  # tensor -> {cosine, snr_db, max_abs, passed}

    def line(self) -> str:
        if self.first is None:
            return f"bisect on {self.sample}: {self.note}"
        f = self.first
        if f.get("reference_nonfinite"):
            return (f"bisect on {self.sample}: CPU itself first answers NaN/Inf at node {f['node']} ({f['op']}), "
                    f"{f['reference_nonfinite']} value(s) of '{f['tensor']}': the samples or the model, not the chip")
        before = ", ".join(f"'{i['tensor']}' cosine {i['cosine']:.6f}" for i in f["inputs"]) or \
            "the graph's inputs"
        text = (f"first divergent node: {f['node']} ({f['op']}{' ' + f['attrs'] if f['attrs'] else ''}) on "
                f"{self.sample}: in {before}; out '{f['tensor']}' cosine {f['cosine']:.6f}, SNR {f['snr_db']:.1f} dB, "
                f"max abs {f['max_abs']:.4g} (CPU peak {f['peak_cpu']:.4g})")
        if not f.get("adjacent", True) and self.last_agreeing:
            text += (f" (the first failing one probed: the last agreeing one is '{self.last_agreeing['tensor']}', "
                     "with unprobed nodes between)")
        if self.known:
            text += f"; known: {self.known}"
        if self.fix:
            text += f"; fix: {self.fix}"
        return text

    def as_dict(self) -> dict:
        return {"sample": self.sample, "compiles": self.compiles, "probed": self.probed,
                "candidates": self.candidates, "first": self.first, "last_agreeing": self.last_agreeing,
                "known": self.known, "fix": self.fix, "note": self.note, "line": self.line()}


def candidates(m, quantized: bool) -> tuple[list[str], dict[str, object], dict]:
    """(the intermediates worth probing in topological order, their value infos, the node making each)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(m)
    infos = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    outputs = {o.name for o in m.graph.output}
    made = {o: n for n in m.graph.node for o in n.output}
    names = []
    for n in m.graph.node:
        if n.op_type in SKIP_OPS:
            continue
        if quantized and not (n.op_type == "DequantizeLinear" and getattr(made.get(n.input[0]), "op_type", "")
                              == "QuantizeLinear"):
            continue  # in a QDQ graph the activations are what a DequantizeLinear of a QuantizeLinear gives
        for o in n.output:
            info = infos.get(o)
            if o and o not in outputs and info is not None and info.type.tensor_type.elem_type in (
                    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
                names.append(o)
    return names, infos, made


def _spread(names: list[str], budget: int) -> list[str]:
    """At most ``budget`` of ``names``, evenly spread, the last always among them (so a stretch whose picks all
    agree agrees up to its end)."""
    if len(names) <= budget:
        return list(names)
    if budget <= 1:
        return [names[-1]]
    picks = np.linspace(0, len(names) - 1, budget).round().astype(int)
    return [names[i] for i in sorted(set(picks.tolist()))]


def _attrs(node) -> str:
    from onnx import helper

    shown = []
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        if isinstance(v, (int, float, str, list)) and len(str(v)) < 40:
            shown.append(f"{a.name}={v}")
    return " ".join(shown[:6])


class _Probe:
    """One compile of the graph with ``names`` as extra outputs, run on CPU and on the emulator."""

    def __init__(self, m, infos: dict, feed: dict, soc, quantized: bool, work: Path):
        self.m, self.infos, self.feed, self.soc, self.quantized, self.work = m, infos, feed, soc, quantized, work
        self.compiles = 0

    def run(self, names: list[str]) -> tuple[dict, dict]:
        import onnx

        from ..prepare.graph import cpu_session
        from . import qnn_ep

        probe = onnx.ModelProto()
        probe.CopyFrom(self.m)
        probe.graph.output.extend(self.infos[n] for n in names)
        folder = Path(tempfile.mkdtemp(prefix="probe.", dir=self.work))
        path = folder / "probe.onnx"
        onnx.save(probe, str(path))
        want = [o.name for o in probe.graph.output]
        cpu = dict(zip(want, cpu_session(path).run(want, self.feed)))
        options = qnn_ep.htp_options(self.soc.soc_model, self.soc.htp_arch, fp16=not self.quantized)
        self.compiles += 1
        htp = qnn_ep.compile_and_run(path, folder, options, self.feed)
        if not set(want) <= set(htp):  # a stub that renamed its outputs keeps their order
            htp = dict(zip(want, htp.values()))
        return cpu, htp


def bisect(graph: Path, sample: Sample, soc, thresholds, *, quantized: bool = False,
           bounds: Bounds | None = None) -> Bisection:
    """The first node of ``graph`` whose output HTP computes unlike CPU on ``sample`` (see the module), within
    ``bounds`` (default: ``BUDGET`` intermediates per compile, ``ROUNDS`` compiles)."""
    import onnx

    m = onnx.load(str(graph))
    names, infos, made = candidates(m, quantized)
    result = Bisection(sample=sample.name, candidates=len(names))
    if not names:  # nothing between the inputs and the outputs to probe: said at once, without a compile
        result.note = ("nothing to probe: no intermediate between the inputs and the outputs can be probed (float "
                       "values; in a quantized graph, what a QuantizeLinear/DequantizeLinear pair makes): the outputs' "
                       "own numbers are the whole story")
        return result
    with tempfile.TemporaryDirectory(prefix="qnn-release-bisect.") as tmp:
        probe = _Probe(m, infos, sample.feed, soc, quantized, Path(tmp))
        lo, hi, seen_fail, outputs_agree = _hunt(probe, names, result, thresholds, [o.name for o in m.graph.output],
                                                 bounds or Bounds())
        result.compiles = probe.compiles
    if not seen_fail:
        result.note = (f"nothing found: every one of {result.probed} probed intermediates agrees with CPU, and "
                       + ("so do the outputs in the probe graph (the extra outputs changed what HTP fused, or the "
                          "failure is the bar's, not a wrong node)" if outputs_agree else
                          "the outputs do not: the divergence is in the last nodes, or inside a fusion the extra "
                          "outputs prevented (split the graph at its last nodes to see)"))
        return result
    bad = names[hi]
    node = made[bad]
    inputs = [{"tensor": i, **{k: result.numbers[i][k] for k in ("cosine", "snr_db", "max_abs")}}
              for i in node.input if i in result.numbers]
    result.first = {"tensor": bad, "node": node.name or bad, "op": node.op_type, "attrs": _attrs(node),
                    **result.numbers[bad], "inputs": inputs,
                    "adjacent": lo == hi - 1}
    if lo >= 0:
        result.last_agreeing = {"tensor": names[lo], **result.numbers[names[lo]]}
    result.known, result.fix = explain(m, node, result.numbers[bad], quantized)
    return result


def _hunt(probe: _Probe, names: list[str], result: Bisection, thresholds, outputs: list[str],
          bounds: Bounds) -> tuple[int, int, bool, bool | None]:
    """The probe rounds (``bounds.rounds`` at most, ``bounds.budget`` intermediates each): (the last agreeing index,
    the first failing one, whether any failed, whether the graph's own outputs agreed in the first probe)."""
    from .verify import judge

    budget = bounds.budget
    order = {n: k for k, n in enumerate(names)}
    lo, hi = -1, len(names)  # names[lo] agrees (or the inputs), names[hi] fails (or the outputs)
    seen_fail, outputs_agree = False, None
    for _ in range(bounds.rounds):
        stretch = names[lo + 1:hi]
        if not stretch:
            break
        picked = _spread(stretch, budget)
        cpu, htp = probe.run(picked)
        if outputs_agree is None:
            outputs_agree = all(not judge(cpu[o], htp[o], thresholds)["failures"] for o in outputs
                                if o in cpu and o in htp)
        for name in picked:
            d = judge(cpu[name], htp[name], thresholds)
            result.numbers[name] = {"cosine": round(float(d["cosine"]), 6), "snr_db": round(float(d["snr_db"]), 2),
                                    "max_abs": float(f"{d['max_abs']:.4g}"), "passed": not d["failures"],
                                    "peak_cpu": float(np.nanmax(np.abs(cpu[name])))
                                    if np.isfinite(cpu[name]).any() else 0.0,
                                    **({"reference_nonfinite": d["reference_nonfinite"]}
                                       if d.get("reference_nonfinite") else {})}
        result.probed += len(picked)
        failing = [n for n in picked if not result.numbers[n]["passed"]]
        if not failing:  # the stretch's last one is in the picks: it ends where the first failure was
            lo = max(lo, order[picked[-1]])
            break
        seen_fail = True
        hi = order[failing[0]]
        agreeing = [n for n in picked if order[n] < hi and result.numbers[n]["passed"]]
        lo = order[agreeing[-1]] if agreeing else lo
        if len(stretch) <= budget:
            break
    return lo, hi, seen_fail, outputs_agree


def explain(m, node, numbers: dict, quantized: bool) -> tuple[str | None, str | None]:
    """What is known of this node on HTP (the probes' table, the doctor's causes) and the declared fix."""
    from ..prepare.convtranspose import wrong_on_htp
    from .doctor import CAUSES
    from .htp_quirks import LAYER_PROBES, PROBES

    name = node.name or node.output[0]
    if node.op_type == "ConvTranspose" and name in wrong_on_htp(m):
        lp = LAYER_PROBES[0]
        return f"probe {lp.name}: {lp.effect}", f"`{lp.fix}` on the graph"
    special = [p for p in PROBES if p.op == node.op_type]
    if special:
        return "; ".join(f"probe {p.name}: {p.effect}" for p in special), None
    if not quantized and numbers.get("peak_cpu", 0.0) > 65504:
        return ("its CPU values reach {:.4g}, beyond fp16's 65504: it overflows in fp16".format(numbers["peak_cpu"]),
                "graphs[].prescale on the tensor a norm divides (the fp16 range check offers it), or build w8a16")
    if node.op_type in CAUSES:
        return CAUSES[node.op_type][0], CAUSES[node.op_type][1]
    return None, None


def sample_feed(graph: Path, sample: Path | None) -> tuple[dict[str, np.ndarray], str]:
    """The feed for ``graph``: the arrays of ``sample`` (.npz, by input name), or generated ones said as such."""
    import onnx

    from ..errors import UsageError
    from ..prepare.graph import TensorInfo, _dtype_name, generate_inputs

    m = onnx.load(str(graph), load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    inputs = [v for v in m.graph.input if v.name not in init]
    if sample is not None:
        try:
            with np.load(sample, allow_pickle=False) as z:
                feed = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise UsageError(f"--sample {sample}: not a readable .npz: {clip(str(e), 200)}") from None
        missing = [v.name for v in inputs if v.name not in feed]
        if missing:
            raise UsageError(f"--sample {sample}: no array for input(s) {', '.join(missing)}",
                             hint=f"the graph's inputs: {', '.join(v.name for v in inputs)}")
        for v in inputs:
            want = [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
            got = list(feed[v.name].shape)
            if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
                raise UsageError(f"--sample {sample}: input '{v.name}' has shape {got}, the graph takes "
                                 f"{[w if w is not None else '?' for w in want]}", hint="one array per input, "
                                 "shaped as the graph's input")
            feed[v.name] = feed[v.name].astype(_dtype_name(v.type.tensor_type.elem_type))
        return {v.name: feed[v.name] for v in inputs}, sample.name
    infos = []
    for v in inputs:
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in v.type.tensor_type.shape.dim]
        if any(d <= 0 for d in dims):
            raise UsageError(f"{graph}: input '{v.name}' has a dynamic shape",
                             hint="bisect the prepared graph (static shapes), or give --sample")
        infos.append(TensorInfo(name=v.name, shape=dims, dtype=_dtype_name(v.type.tensor_type.elem_type)))
    return generate_inputs(infos, count=1, seed=0)[0], "generated inputs"
