"""Verify a compiled target: run it on the HTP emulator and compare with ONNX Runtime on CPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from ..errors import ConfigError, VerifyError
from ..matrix.schema import Gate, Options, OutputSlice, Stream, Thresholds
from ..util.metrics import Parity, compare, nonfinite, worst

# How outputs are judged; in every target's key, so a target judged by an older rule is judged again (its compile
# reused): 2 refuses a NaN or constant CPU reference (a NaN reference once passed an all-zero binary), max_rel.
JUDGE_VERSION = 2

# fp16 activations are usually lossless; 8-bit weights must be checked (REFERENCE.md section 1.7).
# max_abs is an absolute tolerance that passes on its own: a detector's probability map on
# generated inputs is ~0 everywhere (PP-OCRv4 det: peak 3e-3, HTP error 3e-4, cosine 0.97), where
# cosine and SNR measure fp16 rounding of nothing. 1e-3 is about fp16's resolution at 1.0.
# max_rel is that tolerance relative to the output's CPU peak: a detector's stride-8 sigmoid class scores
# peak at 0.097 on real images, and its fp16 binaries (the same boxes as CPU, IoU >= 0.999) err by 0.0014
# there: 1.5 % of the peak, beyond max_abs, within max_rel's 2 %. An all-zero answer errs by 100 %.
DEFAULT_THRESHOLDS = {
    "fp16": Thresholds(min_cosine=0.999, min_snr_db=20.0, max_abs=1e-3, max_rel=0.02, min_deviation_snr_db=10.0),
    "w8a16": Thresholds(min_cosine=0.99, min_snr_db=10.0, max_abs=1e-3, max_rel=0.05, min_deviation_snr_db=10.0),
    "int8": Thresholds(min_cosine=0.95, min_deviation_snr_db=6.0),
}


@dataclass(frozen=True)
class Verification:
    parity: Parity
    per_output: dict[str, dict]
    thresholds: dict
    emulator_seconds: float | None
    samples: int
    passed_by: str = "cosine"  # or "max_abs"/"max_rel": within the tolerance though cosine/SNR are low; "argmax"
    worst_output: str | None = None
    per_sample: list[dict] | None = None  # every sample's numbers per output (sample_numbers)
    rules: tuple[str, ...] = ()  # every rule other than the default bars an output passed by, in words


def thresholds_for(options: Options, precision: str) -> Thresholds:
    base = DEFAULT_THRESHOLDS[precision]
    override = next((t for p, t in options.verify.items() if p == precision), None)
    if override is None:
        return base
    return base.model_copy(update={k: v for k, v in override.model_dump().items() if v is not None})


HINTS = {
    "fp16": "fp16 keeps about 3 significant digits and overflows above 65504: look for large intermediate "
            "values (unnormalised sums, big logits) on this output's path, or compile it as w8a16",
    "w8a16": "8-bit weights, 16-bit activations: calibrate with real samples (`samples:` in the matrix), or "
             "compare with the fp16 build of the same chip",
    "int8": "8-bit activations lose range: calibrate with real samples (`samples:` in the matrix), or use w8a16",
}
# the same, for a model already calibrated and verified on its real samples: more samples will not help
REAL_HINTS = {
    "w8a16": "8-bit weights, 16-bit activations, calibrated on the real samples already: compare with the fp16 build "
             "of the same chip, keep fp16 for this model, or judge the output as the app reads it (samples.argmax, "
             "options.where, options.verify.w8a16.max_rel)",
    "int8": "8-bit activations lose range even calibrated on the real samples: use w8a16 or fp16",
}


FP16_MAX = 65504.0

REFERENCE_NAN = "CPU itself answers NaN/Inf"  # the failure a non-finite reference gives, and how it is recognised
REFERENCE_CONSTANT = "CPU answers the constant"  # the failure an output constant on every sample gives

MAX_ABS_PEAK_RATIO = 2.0  # max_abs passes on its own only where an all-zero output would miss it by 2x


def judge(ref: np.ndarray, got: np.ndarray, th: Thresholds, peak: float | None = None) -> dict:
    """One output of one sample, on its own: cosine and SNR (a one-number output: its relative error),
    or within the absolute tolerance ``max_abs``; NaN/Inf never pass. ``max_abs`` is no pass where the
    CPU output itself stays below ``MAX_ABS_PEAK_RATIO`` times it (``peak``, over every sample): an
    all-zero output would pass it as well."""
    p = compare(ref, got)
    d = {**p.as_dict(), "failures": [], "passed_by": "cosine"}
    if np.asarray(ref).size == 0:
        d["failures"].append("empty: there is nothing to compare")
        return d
    bad_ref = nonfinite(ref)
    if bad_ref:  # before anything else: a NaN reference passes any answer once its positions are dropped
        d["reference_nonfinite"] = bad_ref
        d["failures"].append(f"{REFERENCE_NAN} ({bad_ref} of {np.asarray(ref).size} values): the samples or the "
                             "model, not the chip")
        return d
    if p.nan_count:  # before any tolerance: NaN/Inf never pass, not even on max_abs
        d["failures"].append(f"{p.nan_count} NaN/Inf values")
        return d
    r = np.asarray(ref, dtype=np.float64).ravel()
    g = np.asarray(got, dtype=np.float64).ravel()
    if r.size == 1:  # a cosine of one number is its sign: judge the relative error
        rel = float(abs(g[0] - r[0]) / max(abs(r[0]), 1e-6)) if np.isfinite(g[0]) else float("inf")
        limit = 10 ** (-th.min_snr_db / 20) if th.min_snr_db is not None else 0.1
        d.update(relative_error=rel, passed_by="relative_error")
        if rel > limit:
            d["failures"].append(f"relative error {rel:.3g} > {limit:.3g} ({r[0]:.4g} on CPU, {g[0]:.4g} on HTP)")
    else:
        if th.min_cosine is not None and p.cosine < th.min_cosine:
            d["failures"].append(f"cosine {p.cosine:.6f} < {th.min_cosine}")
        if th.min_snr_db is not None and p.snr_db < th.min_snr_db:
            d["failures"].append(f"SNR {p.snr_db:.1f} dB < {th.min_snr_db} dB")
    if d["failures"] and (th.max_abs is not None or th.max_rel is not None):
        _tolerances(d, p, r, th, peak)
    if not d["failures"] and d["passed_by"] in ("cosine", "max_rel") and th.min_deviation_snr_db is not None:
        _judge_deviations(d, r, g, th.min_deviation_snr_db)
    return d


def _tolerances(d: dict, p: Parity, r: np.ndarray, th: Thresholds, peak: float | None) -> None:
    """An output that fails cosine or SNR passes within a tolerance that suffices on its own (``passed_by`` says
    which), or gets why it does not."""
    # max_abs is an absolute tolerance that suffices on its own: outputs that are almost all zero
    # (a detector's probability map on generated inputs) have no meaningful cosine or SNR. max_rel is the
    # same tolerance relative to the output's CPU peak, for an output that never nears 1 (sigmoid scores
    # peaking at 0.1), where an absolute bar of fp16's resolution at 1.0 means nothing.
    top = float(np.max(np.abs(r))) if peak is None and r.size else (peak or 0.0)
    why = []
    if th.max_abs is not None:
        if p.max_abs > th.max_abs:
            why.append(f"max abs error {p.max_abs:.4g} > {th.max_abs}")
        elif top < MAX_ABS_PEAK_RATIO * th.max_abs:
            why.append(f"max abs error {p.max_abs:.4g} is within {th.max_abs}, but the CPU output peaks "
                       f"at {top:.3g}: an all-zero output would pass too")
        else:
            d.update(failures=[], passed_by="max_abs")
    own = float(np.max(np.abs(r))) if r.size else 0.0  # this sample's own peak: a quiet sample answered
    if d["failures"] and th.max_rel is not None and own > 0.0:  # with zeros errs by 100 % of it
        rel = p.max_abs / own
        d["error_of_peak"] = float(f"{rel:.4g}")
        if rel <= th.max_rel:
            d.update(failures=[], passed_by="max_rel")
        else:
            why.append(f"max abs error {p.max_abs:.4g} is {100 * rel:.3g}% of the CPU peak {own:.3g} "
                       f"(> max_rel {100 * th.max_rel:g}%)")
    if d["failures"]:
        d["failures"].extend(why)


SPREAD_OF_PEAK = 1e-3  # an output whose spread is below this share of its peak is judged as constant


def _judge_deviations(d: dict, r: np.ndarray, g: np.ndarray, limit: float) -> None:
    """Does the answer carry what the output carries? Cosine and SNR are dominated by an output's mean where
    it varies little around a large value: a constant (or the right values shifted) scores high on both. The
    deviations from CPU's mean against the error: about 0 dB for a flat or offset-only answer."""
    if r.size < 2:
        return
    spread = r - r.mean()
    energy, peak = float(np.dot(spread, spread)), float(np.max(np.abs(r)))
    if peak == 0.0 or np.sqrt(energy / r.size) < SPREAD_OF_PEAK * peak:
        return  # constant on CPU too: nothing to carry
    err = g - r
    noise = float(np.dot(err, err))
    dev = 200.0 if noise == 0.0 else float(min(200.0, 10.0 * np.log10(energy / noise)))
    d["deviation_snr_db"] = round(dev, 2)
    if dev < limit:
        d["failures"].append(f"its variation is not carried: the deviations from CPU's mean agree at {dev:.1f} dB "
                             f"< {limit} dB (a flat or offset answer; cosine and SNR are the mean's here)")


def sliced_names(output_names: list[str], slices: dict[str, dict[str, OutputSlice]] | None) -> list[str]:
    """The names outputs are judged under: an output with declared slices becomes ``output[slice]`` each."""
    return [f"{n}[{s}]" if n in (slices or {}) else n for n in output_names for s in (slices or {}).get(n, {None: 0})]


def cut_slices(output_names: list[str], outs: list[np.ndarray],
               slices: dict[str, dict[str, OutputSlice]] | None) -> list[np.ndarray]:
    """One sample's outputs with each sliced output replaced by its slices (in ``sliced_names`` order)."""
    if not slices:
        return list(outs)
    cut = []
    for name, a in zip(output_names, outs):
        if name not in slices:
            cut.append(a)
            continue
        a = np.asarray(a)
        for sname, sl in slices[name].items():
            axis = sl.axis + a.ndim if sl.axis < 0 else sl.axis
            stop = a.shape[axis] if axis < a.ndim and sl.stop is None else sl.stop
            if not 0 <= axis < a.ndim or not sl.start < min(stop, a.shape[axis]):
                raise ConfigError(f"options.slices.{name}.{sname}: axis {sl.axis}, {sl.start}:{sl.stop} is empty or "
                                  f"outside the output's shape {list(a.shape)}",
                                  hint="a slice names an axis of the output and a non-empty start:stop on it")
            cut.append(np.take(a, range(sl.start, min(stop, a.shape[axis])), axis=axis))
    return cut


def sample_numbers(sample: str, output: str, d: dict) -> dict:
    """One sample's numbers for one output, as the record keeps them (every sample, not only the worst)."""
    return {"sample": sample, "output": output, "cosine": round(float(d["cosine"]), 6),
            "snr_db": round(float(d["snr_db"]), 2), "max_abs": float(f"{d['max_abs']:.4g}"),
            "passed": not d["failures"]}


@dataclass(frozen=True, kw_only=True)
class Judging:
    """How a target's outputs are judged beyond its thresholds: the precision's own checks (fp16's garbage
    values), what the inputs were (said in a failure), outputs judged by the class they pick (``argmax``: at
    most that share of positions may pick differently), outputs judged slice by slice (``slices``), and for
    a stateful graph its stream's ranges, decisions and drift (``stream``)."""

    precision: str = "fp16"
    inputs_note: str | None = None
    argmax: dict[str, float] | None = None
    slices: dict[str, dict[str, OutputSlice]] | None = None
    where: dict[str, Gate] | None = None  # output -> judged only where another output's CPU value passes the gate
    constant_outputs: tuple[str, ...] = ()  # outputs constant on CPU by design (any other constant one is refused)
    stream: Stream | None = None
    @classmethod
    def of(cls, options: Options, **values) -> Judging:
        """How a model's options say its outputs are judged (slices, gates, outputs constant by design)."""
        return cls(slices=options.slices or None, where=options.where or None,
                   constant_outputs=tuple(options.constant_outputs), **values)

    carried: dict[str, int] | None = None  # stream -> the steps the emulator carried its state through (the rest
    # fed CPU's state): its drift is judged after them


@dataclass(frozen=True)
class Runs:
    """What is compared: CPU's answers (``reference``) and the binary's (``compiled``), output by output, per sample
    (a stream check's: per stream, per step), with the samples' (streams') names and the emulator's seconds per
    run."""

    reference: list
    compiled: list
    sample_names: list[str] | None = None
    emulator_seconds: float | None = None


def check(target_id: str, output_names: list[str], runs: Runs, thresholds: Thresholds,
          how: Judging | None = None) -> Verification:
    """Every output judged on its own, on every sample: a small output that disagrees is not hidden by
    large ones that agree. The worst sample of each output is named; every sample's numbers are kept.
    An output with declared ``slices`` is judged slice by slice (box pixels apart from class scores).

    ``how.argmax``: outputs judged by the class they pick (the argmax over the last axis, at every other
    position) instead of their values: at most that share of positions may pick differently."""
    how = how or Judging()
    precision, argmax, slices = how.precision, how.argmax, how.slices
    gated = gate_positions(output_names, runs.reference, runs.compiled, how.where)
    reference, compiled = gated.reference, gated.compiled
    reference = [cut_slices(output_names, o, slices) for o in reference]
    compiled = [cut_slices(output_names, o, slices) for o in compiled]
    output_names = sliced_names(output_names, slices)
    per_output: dict[str, dict] = {}
    per_sample: list[dict] = []
    peaks = {n: max((float(np.max(np.abs(np.asarray(o[k], dtype=np.float64)))) if np.asarray(o[k]).size else 0.0)
                    for o in reference) for k, n in enumerate(output_names)} if reference else {}
    names = runs.sample_names or [f"sample {i}" for i in range(len(reference))]
    for sample, ref_outs, got_outs in zip(names, reference, compiled):
        if len(ref_outs) != len(got_outs):
            raise VerifyError(f"{target_id}: the binary gives {len(got_outs)} outputs, the graph {len(ref_outs)}")
        for name, r, g in zip(output_names, ref_outs, got_outs):
            if np.asarray(r).size != np.asarray(g).size:
                raise VerifyError(f"{target_id}: output '{name}' has {np.asarray(g).size} elements, "
                                  f"expected {np.asarray(r).size}")
            if name in gated.counts and np.asarray(r).size == 0:
                continue  # the gate selects nothing on this sample: nothing of it matters here
            d = judge(r, g, thresholds, peak=peaks.get(name))
            d["peak_cpu"] = float(np.max(np.abs(np.asarray(r, dtype=np.float64)))) if np.asarray(r).size else 0.0
            d["sample"] = sample
            garbage = _fp16_garbage(g) if precision == "fp16" else None
            if garbage:
                d["failures"].append(garbage)
            per_sample.append(sample_numbers(sample, name, d))
            old = per_output.get(name)

            def badness(x: dict) -> tuple:  # a one-number output's worst sample is its largest relative error;
                # CPU's own fault (NaN) first, whatever the chip does on another sample
                return (_reference_fault(x), bool(x["failures"]), x.get("relative_error", 0.0), -x["cosine"],
                        -x["snr_db"])

            if old is None or badness(d) > badness(old):
                per_output[name] = d
    # one-number outputs are judged by their relative error: their cosine (a sign) stays out of the overall
    # numbers unless every output is one number, where the overall cosine is 1 - the worst relative error
    for name, limit in (argmax or {}).items():
        if name in per_output:
            rates = _judge_argmax(per_output[name], output_names.index(name), reference, compiled, names, limit)
            for d in per_sample:  # an output judged by the class it picks passes or fails by that, per sample
                if d["output"] == name:
                    d.update(judged_by="argmax", flip_rate=round(rates[d["sample"]], 4),
                             passed=rates[d["sample"]] <= limit)
    gated.say(per_output, how, thresholds)
    refuse_constant(per_output, output_names, reference, how.constant_outputs)
    vectors = [d for d in per_output.values() if "relative_error" not in d] or [
        {**d, "cosine": max(0.0, 1.0 - d["relative_error"])} for d in per_output.values()]
    return _conclude(target_id, _Judged(per_output, vectors, per_sample, len(reference)), thresholds, how,
                     runs.emulator_seconds)


@dataclass(frozen=True)
class _Judged:
    """Every output judged: its worst sample's numbers, the numbers the overall parity is taken over, every
    sample's numbers, and how many samples (a stream check: steps) there were."""

    per_output: dict[str, dict]
    vectors: list[dict]
    per_sample: list[dict]
    samples: int


def _conclude(target_id: str, judged: _Judged, thresholds: Thresholds, how: Judging,
              emulator_seconds: float | None) -> Verification:
    """The verdict over every output judged: raise naming the worst failing output, or the Verification."""
    per_output, vectors, per_sample = judged.per_output, judged.vectors, judged.per_sample
    overall = worst([Parity(**{k: d[k] for k in ("cosine", "max_abs", "snr_db", "nan_count")}) for d in vectors])
    failing = {n: d for n, d in per_output.items() if d["failures"]}
    worst_name = (min(failing, key=lambda n: (not _reference_fault(failing[n]), failing[n]["cosine"],
                                              failing[n]["snr_db"])) if failing else
                  min(per_output, key=lambda n: (per_output[n]["cosine"], per_output[n]["snr_db"])))
    if failing:
        _raise_failure(target_id, judged, worst_name, thresholds, how)
    by = {d["passed_by"] for d in per_output.values()}
    return Verification(parity=overall, per_output=per_output, thresholds=thresholds.model_dump(),
                        emulator_seconds=emulator_seconds, samples=judged.samples, worst_output=worst_name,
                        per_sample=per_sample, rules=rules_said(per_output, thresholds, how),
                        passed_by=next((b for b in ("max_abs", "max_rel", "argmax") if b in by), "cosine"))


def rules_said(per_output: dict[str, dict], th: Thresholds, how: Judging) -> tuple[str, ...]:
    """In words, every rule other than the default bars (cosine, SNR) an output passed by: the record, the build
    summary, the page and the archive README say it beside the numbers."""
    said = []
    for name, d in per_output.items():
        if d.get("passed_by") == "max_abs":
            said.append(f"{name}: within max_abs {th.max_abs} (cosine {d['cosine']:.4f}, SNR {d['snr_db']:.1f} dB "
                        "below their bars)")
        elif d.get("passed_by") == "max_rel":
            said.append(f"{name}: max error {100 * d['error_of_peak']:.2g}% of its CPU peak {d['peak_cpu']:.3g}, "
                        f"within max_rel {100 * (th.max_rel or 0):g}% (cosine {d['cosine']:.4f}, SNR "
                        f"{d['snr_db']:.1f} dB below their bars)")
        elif d.get("passed_by") == "argmax":
            said.append(f"{name}: judged by the class it picks (argmax: {d.get('argmax_flips', 0)} of "
                        f"{d.get('argmax_positions', 0)} positions differ, at most "
                        f"{100 * (how.argmax or {}).get(name, 0):g}%)")
        if d.get("judged_where"):
            said.append(f"{name}: judged only where {d['judged_where']}")
        if name.split("[", 1)[0] in how.constant_outputs:
            said.append(f"{name}: constant on CPU by design (options.constant_outputs)")
    return tuple(said)


@dataclass(frozen=True)
class Gated:
    reference: list[list[np.ndarray]]
    compiled: list[list[np.ndarray]]
    counts: dict[str, tuple[int, int]]  # gated output -> (positions selected, positions) over every sample

    def say(self, per_output: dict[str, dict], how: Judging, thresholds: Thresholds) -> None:
        """Each gated output's record says where it was judged; one the gate left empty everywhere fails."""
        for name, (selected, total) in self.counts.items():
            rule = (how.where or {})[name].rule()
            if name not in per_output or not selected:
                per_output[name] = {**judge(np.zeros(0), np.zeros(0), thresholds), "peak_cpu": 0.0, "sample": None}
                per_output[name]["failures"] = [f"the gate where {rule} on CPU selects no position on any sample: "
                                                "nothing of it is judged"]
            per_output[name]["judged_where"] = f"{rule} on CPU ({selected} of {total} positions)"


def gate_positions(output_names: list[str], reference: list[list[np.ndarray]], compiled: list[list[np.ndarray]],
                   where: dict[str, Gate] | None) -> Gated:
    """Each gated output cut to the positions where its gate output's CPU value passes the gate (as the app reads
    it: pitch only where the model is confident); the gate is CPU's, so HTP's own gate cannot hide an error."""
    if not where:
        return Gated(reference, compiled, {})
    counts: dict[str, tuple[int, int]] = {}
    ref_out, got_out = [list(o) for o in reference], [list(o) for o in compiled]
    for name, gate in where.items():
        if name not in output_names and gate.output not in output_names:
            continue  # a gate of another graph of the model
        for who in (name, gate.output):
            if who not in output_names:
                raise ConfigError(f"options.where.{name}: the graph has no output '{who}'",
                                  hint=f"its outputs: {', '.join(output_names)}")
        k, j = output_names.index(name), output_names.index(gate.output)
        selected = total = 0
        for ref, got in zip(ref_out, got_out):
            value, by = np.asarray(ref[k]), np.asarray(ref[j], dtype=np.float64)
            try:  # positions first: a gate [1, T] on an output [1, T, C] holds for each of its C values
                by = by.reshape(value.shape) if by.size == value.size else np.broadcast_to(
                    by.reshape(by.shape + (1,) * max(0, value.ndim - by.ndim)), value.shape)
            except ValueError:
                raise ConfigError(f"options.where.{name}: the gate '{gate.output}' is shaped {list(by.shape)}, "
                                  f"which does not broadcast to '{name}' {list(value.shape)}",
                                  hint="gate an output by one of the same positions (pitch [1, T] by confidence "
                                  "[1, T])") from None
            keep = np.ones(value.shape, dtype=bool)
            if gate.min is not None:
                keep &= by >= gate.min
            if gate.max is not None:
                keep &= by <= gate.max
            selected, total = selected + int(keep.sum()), total + keep.size
            ref[k], got[k] = value[keep], np.asarray(got[k]).reshape(value.shape)[keep]
        counts[name] = (selected, total)
    return Gated(ref_out, got_out, counts)


def refuse_constant(per_output: dict[str, dict], output_names: list[str], reference: list[list[np.ndarray]],
                    declared: tuple[str, ...]) -> None:
    """An output whose CPU reference is one value at every position of every sample proves nothing: a binary
    answering that constant (all zeros, the usual case of a padded input) passes any bar. It fails unless it is
    declared constant by design."""
    for k, name in enumerate(output_names):
        if name not in per_output or name.split("[", 1)[0] in declared or per_output[name]["failures"]:
            continue
        values = [np.asarray(o[k], dtype=np.float64).ravel() for o in reference]
        n = sum(v.size for v in values)
        if n < 2:
            continue
        lo, hi = min(float(v.min()) for v in values if v.size), max(float(v.max()) for v in values if v.size)
        if lo == hi:
            per_output[name]["constant_reference"] = lo
            per_output[name]["failures"].append(
                f"{REFERENCE_CONSTANT} {lo:g} at all {n} positions of every sample: a binary answering {lo:g} "
                f"passes any bar (declare options.constant_outputs: [{name.split('[', 1)[0]}] if it is so by design)")


def _judge_argmax(d: dict, k: int, reference, compiled, names: list[str], limit: float) -> dict[str, float]:
    """An output an app reads by its argmax (a CTC recognizer's classes per time step, a classifier):
    judged by how many positions pick another class than CPU, not by its probabilities' values."""
    flips = positions = 0
    worst: tuple[float, str | None] = (0.0, None)
    per_sample_rate: dict[str, float] = {}
    broken = []  # NaN or HTP garbage in any sample: never passed on the class picked
    for sample, r, g in zip(names, reference, compiled):
        a, b = np.asarray(r[k]), np.asarray(g[k])
        bad = int(np.count_nonzero(~np.isfinite(b.astype(np.float64))))
        if bad:
            broken.append(f"{bad} NaN/Inf values on {sample}")
        garbage = _fp16_garbage(b)
        if garbage:
            broken.append(f"{garbage} on {sample}")
        if a.shape[-1] < 2:
            broken.append(f"argmax over a last axis of size {a.shape[-1]}: there is no class to pick")
        differ = a.reshape(-1, a.shape[-1]).argmax(-1) != b.reshape(-1, b.shape[-1]).argmax(-1)
        flips, positions = flips + int(differ.sum()), positions + differ.size
        worst = max(worst, (float(differ.mean()), sample), key=lambda x: x[0])
        per_sample_rate[sample] = float(differ.mean())
    d.update(argmax_flips=flips, argmax_positions=positions)
    kept = sorted(set(broken), key=broken.index)
    if flips > limit * positions:
        kept.append(f"{flips} of {positions} positions pick another class than CPU "
                    f"({100 * flips / positions:.1f}% > {100 * limit:.1f}%; worst {worst[1]})")
        d["sample"] = worst[1]
    d["failures"] = kept
    if not kept:
        d["passed_by"] = "argmax"
    return per_sample_rate


def _fp16_garbage(got: np.ndarray) -> str | None:
    g = np.asarray(got, dtype=np.float64)
    big = np.abs(g[np.isfinite(g)]) > FP16_MAX
    if not big.any():
        return None
    return (f"{int(big.sum())} value(s) beyond fp16's ±65504 (e.g. {g[np.isfinite(g)][big][0]:.6g}): HTP makes no "
            "NaN/inf, values out there are its garbage from an invalid operation upstream")


def _reference_fault(d: dict) -> bool:
    """A failure of CPU's own answer (NaN, or one constant everywhere): the samples' or the model's, not the chip's."""
    return any(f.startswith((REFERENCE_NAN, REFERENCE_CONSTANT)) for f in d["failures"])


def _raise_failure(target_id: str, judged: _Judged, worst_name: str, thresholds: Thresholds, how: Judging) -> None:
    per_output, per_sample = judged.per_output, judged.per_sample
    precision, inputs_note = how.precision, how.inputs_note
    failing = {n: d for n, d in per_output.items() if d["failures"]}
    d = failing[worst_name]
    real = bool(inputs_note) and not (inputs_note or "").startswith("generated")
    near_zero = d["peak_cpu"] < 0.05
    hint = (f"the CPU values of '{worst_name}' are near zero on these inputs (max |y| {d['peak_cpu']:.3g}): "
            f"give the model real samples (`samples:` in the matrix) on which it has a range, or an absolute tolerance "
            f"options.verify.{precision}.max_abs or one relative to its peak options.verify.{precision}.max_rel"
            if near_zero and not real else REAL_HINTS[precision] if real and precision in REAL_HINTS
            else HINTS.get(precision, HINTS["fp16"]))
    if not real and inputs_note:
        hint += "; verified on generated inputs only"
    if any("beyond fp16" in f for f in d["failures"]):
        hint = ("HTP produced values no fp16 op can (ci_tools/compile/htp_quirks.py lists the known causes): give the "
                "model real samples so the build's fp16 range check names the node; " + HINTS["fp16"])
    cause = None
    if any(f.startswith(REFERENCE_NAN) for f in d["failures"]):
        cause = "reference"
        hint = ("run the original model on CPU with this sample: padding where the model divides by a length or takes "
                "a log or a sqrt, or values outside the range it was trained on, make it NaN; fix the samples (pad as "
                "the app does, with its mask or length), then build again")
    elif any(f.startswith(REFERENCE_CONSTANT) for f in d["failures"]):
        cause = "reference"
        hint = ("give samples on which the output varies (a padded or silent sample often gives all zeros), or "
                "declare it in options.constant_outputs if it is constant by design")
    more = f" ({len(failing)} of {len(per_output)} outputs fail)" if len(per_output) > 1 else ""
    on = f" on {d['sample']}" if d.get("sample") and "constant_reference" not in d else ""
    verb = "is not judged" if cause else "differs from CPU"
    raise VerifyError(f"{target_id}: output '{worst_name}' {verb}{on}: {'; '.join(d['failures'])}{more}",
                      hint=hint, details={"per_output": per_output, "worst_output": worst_name,
                                          "per_sample": per_sample, "thresholds": thresholds.model_dump(),
                                          "verify_inputs": inputs_note, **({"cause": cause} if cause else {})})


def check_streams(target_id: str, output_names: list[str], runs: Runs, thresholds: Thresholds,
                  how: Judging) -> Verification:
    """A stateful graph run as streams (HTP and CPU each carrying its own state): each output judged over
    the whole sequence (its steps side by side), values outside the declared or CPU-observed range,
    decision flips at the declared thresholds, and the carried state's drift at each stream's end
    (``how.stream``)."""
    precision, slices = how.precision, how.slices
    stream = cast(Stream, how.stream)  # a stream check is only run for samples with a stream
    streams, reference, compiled = runs.sample_names or [], runs.reference, runs.compiled
    reference, compiled, counts = _gate_streams(output_names, reference, compiled, how.where)
    reference = [[cut_slices(output_names, o, slices) for o in s] for s in reference]
    compiled = [[cut_slices(output_names, o, slices) for o in s] for s in compiled]
    output_names = sliced_names(output_names, slices)
    per_output: dict[str, dict] = {}
    per_sample: list[dict] = []
    steps = sum(len(s) for s in reference)
    for k, name in enumerate(output_names):
        r = [np.asarray(step[k], dtype=np.float64).ravel() for s in reference for step in s]
        g = [np.asarray(step[k], dtype=np.float64).ravel() for s in compiled for step in s]
        where = [(sname, i) for sname, s in zip(streams, reference) for i in range(len(s))]
        rr, gg = np.concatenate(r), np.concatenate(g)
        at = 0
        for sname, sr in zip(streams, reference):  # each stream's own numbers, over its steps
            n = sum(np.asarray(step[k]).size for step in sr)
            if n:
                per_sample.append(sample_numbers(sname, name, judge(rr[at:at + n], gg[at:at + n], thresholds,
                                                                    peak=float(np.max(np.abs(rr))))))
            at += n
        d = judge(rr, gg, thresholds, peak=float(np.max(np.abs(rr))) if rr.size else 0.0)
        d["peak_cpu"] = float(np.max(np.abs(rr))) if rr.size else 0.0
        _worst_step(d, r, g, where)
        _outside_range(d, name, (rr, gg), g, where, stream)
        if name in stream.decisions:
            _decision_flips(d, rr, gg, stream.decisions[name], stream.max_flips)
        if name in stream.carry:  # how far the carried state has drifted at the end of each stream
            carried = how.carried or {}
            ends = []
            for sname, sr, sg in zip(streams, reference, compiled):
                if sr:  # the last step the emulator carried its own state into
                    i = carried.get(sname, len(sr)) - 1
                    ends.append((float(np.max(np.abs(np.asarray(sr[i][k], np.float64)
                                                     - np.asarray(sg[i][k], np.float64)))), sname, i + 1))
            drift, worst_end, at = max(ends) if ends else (0.0, None, 0)
            d["state_drift"] = drift
            if carried:
                d["state_drift_after_steps"] = at
            limit = stream.max_drift.get(name)
            if limit is not None and drift > limit:
                when = f"after step {at} of {worst_end}" if worst_end in carried else f"by the end of {worst_end}"
                d["failures"].append(f"the carried state drifts {drift:.4g} from CPU {when} "
                                     f"(> stream.max_drift {limit})")
        if precision == "fp16":
            garbage = _fp16_garbage(gg)
            if garbage:
                d["failures"].append(garbage)
        per_output[name] = d
    Gated([], [], counts).say(per_output, how, thresholds)
    refuse_constant(per_output, output_names, [step for s in reference for step in s], how.constant_outputs)
    return _conclude(target_id, _Judged(per_output, list(per_output.values()), per_sample, steps), thresholds, how,
                     runs.emulator_seconds)


def _gate_streams(output_names: list[str], reference, compiled, where: dict[str, Gate] | None):
    """Each stream's steps gated as samples are: (reference, compiled, the gate's counts over every stream)."""
    if not where:
        return reference, compiled, {}
    gated = [gate_positions(output_names, sr, sg, where) for sr, sg in zip(reference, compiled)]
    counts = {n: (sum(g.counts[n][0] for g in gated), sum(g.counts[n][1] for g in gated))
              for n in (gated[0].counts if gated else {})}
    return [g.reference for g in gated], [g.compiled for g in gated], counts


def _worst_step(d: dict, r: list[np.ndarray], g: list[np.ndarray], where: list[tuple[str, int]]) -> None:
    """The step of the sequence where HTP is furthest from CPU, with both values there."""
    errs = [float(np.max(np.abs(a - b))) if a.size else -1.0 for a, b in zip(r, g)]  # a step a gate emptied: never
    if not errs or max(errs) < 0:  # a gate that left nothing
        return
    w = int(np.argmax(errs))
    d["worst_step"] = {"sample": where[w][0], "step": where[w][1], "max_abs": errs[w],
                       "cpu": float(r[w][np.argmax(np.abs(r[w] - g[w]))]),
                       "htp": float(g[w][np.argmax(np.abs(r[w] - g[w]))])}
    d["sample"] = f"{where[w][0]} step {where[w][1]}"


def _outside_range(d: dict, name: str, values: tuple[np.ndarray, np.ndarray], g: list[np.ndarray],
                   where: list[tuple[str, int]], stream: Stream) -> None:
    """HTP values outside the declared range (or what CPU spans, with 1% slack), 1 fp32 ulp allowed; ``values``:
    CPU's and HTP's over every step."""
    rr, gg = values
    if not rr.size:
        return
    lo, hi = stream.range.get(name, (float(rr.min()), float(rr.max())))
    slack = 0.0 if name in stream.range else 0.01 * (hi - lo)  # fp16 rounding at the edges of what CPU spans
    lo32, hi32 = np.nextafter(np.float32(lo - slack), np.float32(-np.inf)), np.nextafter(
        np.float32(hi + slack), np.float32(np.inf))  # 1 fp32 ulp: HTP's float32 outputs read 1 ulp high
    outside = (gg < lo32) | (gg > hi32)
    if outside.any():
        first = int(np.argmax(outside))
        step_of = np.repeat(np.arange(len(g)), [a.size for a in g])[first]
        d["outside_range"] = int(outside.sum())
        d["failures"].append(f"{int(outside.sum())} value(s) outside [{lo:.4g}, {hi:.4g}] "
                             f"({'declared' if name in stream.range else 'what CPU spans'}), first "
                             f"{gg[first]:.6g} at {where[step_of][0]} step {where[step_of][1]}")


def _decision_flips(d: dict, rr: np.ndarray, gg: np.ndarray, th: float, max_flips: float) -> None:
    """How often HTP's decision at the threshold differs from CPU's."""
    flips = int(np.sum((rr > th) != (gg > th)))
    d["decision_flips"] = flips
    d["flip_rate"] = flips / max(1, rr.size)
    if d["flip_rate"] > max_flips:
        d["failures"].append(f"{flips} of {rr.size} decisions at {th} differ from CPU "
                             f"({100 * d['flip_rate']:.1f}% > {100 * max_flips:.1f}%)")
