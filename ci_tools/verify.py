"""Verify a compiled target: run it on the HTP emulator and compare with ONNX Runtime on CPU."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .errors import VerifyError
from .matrix import Options, Thresholds
from .metrics import Parity, compare, worst

# fp16 activations are usually lossless; 8-bit weights must be checked (REFERENCE.md section 1.7).
# max_abs is an absolute tolerance that passes on its own: a detector's probability map on
# generated inputs is ~0 everywhere (PP-OCRv4 det: peak 3e-3, HTP error 3e-4, cosine 0.97), where
# cosine and SNR measure fp16 rounding of nothing. 1e-3 is about fp16's resolution at 1.0.
DEFAULT_THRESHOLDS = {
    "fp16": Thresholds(min_cosine=0.999, min_snr_db=20.0, max_abs=1e-3),
    "w8a16": Thresholds(min_cosine=0.99, min_snr_db=10.0, max_abs=1e-3),
    "int8": Thresholds(min_cosine=0.95),
}


@dataclass(frozen=True)
class Verification:
    parity: Parity
    per_output: dict[str, dict]
    thresholds: dict
    emulator_seconds: float | None
    samples: int
    passed_by: str = "cosine"  # or "max_abs": within the absolute tolerance though cosine/SNR are low
    worst_output: str | None = None


def thresholds_for(options: Options, precision: str) -> Thresholds:
    base = DEFAULT_THRESHOLDS[precision]
    override = options.verify.get(precision)
    if override is None:
        return base
    return base.model_copy(update={k: v for k, v in override.model_dump().items() if v is not None})


HINTS = {
    "fp16": "fp16 keeps about 3 significant digits and overflows above 65504: look for large intermediate "
            "values (unnormalised sums, big logits) on this output's path, or compile it as w8a16",
    "w8a16": "8-bit weights, 16-bit activations: calibrate with real inputs (calibration.path), or compare with "
             "the fp16 build of the same chip",
    "int8": "8-bit activations lose range: calibrate with real inputs (calibration.path), or use w8a16",
}


def judge(ref: np.ndarray, got: np.ndarray, th: Thresholds) -> dict:
    """One output of one sample, on its own: cosine and SNR (a one-number output: its relative error),
    or within the absolute tolerance ``max_abs``; NaN/Inf never pass."""
    p = compare(ref, got)
    d = {**p.as_dict(), "failures": [], "passed_by": "cosine"}
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
    # max_abs is an absolute tolerance that suffices on its own: outputs that are almost all zero
    # (a detector's probability map on generated inputs) have no meaningful cosine or SNR.
    if d["failures"] and th.max_abs is not None:
        if p.max_abs <= th.max_abs:
            d.update(failures=[], passed_by="max_abs")
        else:
            d["failures"].append(f"max abs error {p.max_abs:.4g} > {th.max_abs}")
    return d


def check(target_id: str, output_names: list[str], reference: list[list[np.ndarray]],
          compiled: list[list[np.ndarray]], thresholds: Thresholds, emulator_seconds: float | None,
          precision: str = "fp16", inputs_note: str | None = None) -> Verification:
    """Every output judged on its own, on every sample: a small output that disagrees is not hidden by
    large ones that agree. The worst sample of each output is kept, failed or not."""
    per_output: dict[str, dict] = {}
    for ref_outs, got_outs in zip(reference, compiled):
        if len(ref_outs) != len(got_outs):
            raise VerifyError(f"{target_id}: the binary gives {len(got_outs)} outputs, the graph {len(ref_outs)}")
        for name, r, g in zip(output_names, ref_outs, got_outs):
            if np.asarray(r).size != np.asarray(g).size:
                raise VerifyError(f"{target_id}: output '{name}' has {np.asarray(g).size} elements, "
                                  f"expected {np.asarray(r).size}")
            d = judge(r, g, thresholds)
            d["peak_cpu"] = float(np.max(np.abs(np.asarray(r, dtype=np.float64)))) if np.asarray(r).size else 0.0
            old = per_output.get(name)

            def badness(x: dict) -> tuple:  # a one-number output's worst sample is its largest relative error
                return (bool(x["failures"]), x.get("relative_error", 0.0), -x["cosine"], -x["snr_db"])

            if old is None or badness(d) > badness(old):
                per_output[name] = d
    # one-number outputs are judged by their relative error: their cosine (a sign) stays out of the overall
    # numbers unless every output is one number, where the overall cosine is 1 - the worst relative error
    vectors = [d for d in per_output.values() if "relative_error" not in d] or [
        {**d, "cosine": max(0.0, 1.0 - d["relative_error"])} for d in per_output.values()]
    overall = worst([Parity(**{k: d[k] for k in ("cosine", "max_abs", "snr_db", "nan_count")}) for d in vectors])
    failing = {n: d for n, d in per_output.items() if d["failures"]}
    worst_name = (min(failing, key=lambda n: (failing[n]["cosine"], failing[n]["snr_db"])) if failing else
                  min(per_output, key=lambda n: (per_output[n]["cosine"], per_output[n]["snr_db"])))
    by = {d["passed_by"] for d in per_output.values()}
    v = Verification(parity=overall, per_output=per_output, thresholds=thresholds.model_dump(),
                     emulator_seconds=emulator_seconds, samples=len(reference),
                     passed_by="max_abs" if "max_abs" in by else "cosine")
    if failing:
        d = failing[worst_name]
        near_zero = d["peak_cpu"] < 0.05
        hint = (f"the CPU values of '{worst_name}' are near zero on these inputs (max |y| {d['peak_cpu']:.3g}): "
                f"give real inputs (calibration.path) or an absolute tolerance options.verify.{precision}.max_abs"
                if near_zero else HINTS.get(precision, HINTS["fp16"]))
        if inputs_note and inputs_note.startswith("generated"):
            hint += "; verified on generated inputs only"
        more = f" ({len(failing)} of {len(per_output)} outputs fail)" if len(per_output) > 1 else ""
        raise VerifyError(f"{target_id}: output '{worst_name}' differs from CPU: {'; '.join(d['failures'])}{more}",
                          hint=hint, details={"per_output": per_output, "worst_output": worst_name,
                                              "thresholds": thresholds.model_dump(), "verify_inputs": inputs_note})
    return dataclasses.replace(v, worst_output=worst_name)
