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


def thresholds_for(options: Options, precision: str) -> Thresholds:
    base = DEFAULT_THRESHOLDS[precision]
    override = options.verify.get(precision)
    if override is None:
        return base
    return base.model_copy(update={k: v for k, v in override.model_dump().items() if v is not None})


def check(target_id: str, output_names: list[str], reference: list[list[np.ndarray]],
          compiled: list[list[np.ndarray]], thresholds: Thresholds, emulator_seconds: float | None) -> Verification:
    per_output: dict[str, list[Parity]] = {n: [] for n in output_names}
    per_sample: list[Parity] = []
    for ref_outs, got_outs in zip(reference, compiled):
        if len(ref_outs) != len(got_outs):
            raise VerifyError(f"{target_id}: the binary gives {len(got_outs)} outputs, the graph {len(ref_outs)}")
        for name, r, g in zip(output_names, ref_outs, got_outs):
            if np.asarray(r).size != np.asarray(g).size:
                raise VerifyError(f"{target_id}: output '{name}' has {np.asarray(g).size} elements, "
                                  f"expected {np.asarray(r).size}")
            per_output[name].append(compare(r, g))
        # Judged on all outputs of a sample together: a one-element output (a VAD probability
        # near 0) has a meaningless cosine on its own; per-output numbers are still recorded.
        per_sample.append(compare(np.concatenate([np.ravel(r) for r in ref_outs]).astype(np.float64),
                                  np.concatenate([np.ravel(g) for g in got_outs]).astype(np.float64)))
    overall = worst(per_sample)
    v = Verification(parity=overall, per_output={n: worst(ps).as_dict() for n, ps in per_output.items()},
                     thresholds=thresholds.model_dump(), emulator_seconds=emulator_seconds, samples=len(reference))
    failures = []
    if thresholds.min_cosine is not None and overall.cosine < thresholds.min_cosine:
        failures.append(f"cosine {overall.cosine:.6f} < {thresholds.min_cosine}")
    if thresholds.min_snr_db is not None and overall.snr_db < thresholds.min_snr_db:
        failures.append(f"SNR {overall.snr_db:.1f} dB < {thresholds.min_snr_db} dB")
    # max_abs is an absolute tolerance that suffices on its own: outputs that are almost all zero
    # (a detector's probability map on generated inputs) have no meaningful cosine or SNR.
    if failures and thresholds.max_abs is not None:
        if overall.max_abs <= thresholds.max_abs and not overall.nan_count:
            return dataclasses.replace(v, passed_by="max_abs")
        else:
            failures.append(f"max abs error {overall.max_abs:.4g} > {thresholds.max_abs}")
    if overall.nan_count:
        failures.insert(0, f"{overall.nan_count} NaN/Inf values")
    if failures:
        peak = max(float(np.max(np.abs(np.asarray(r, dtype=np.float64)))) if np.asarray(r).size else 0.0
                   for outs in reference for r in outs)
        hint = ("check quantization/calibration, or set options.verify for this precision" if peak >= 0.05 else
                f"the CPU outputs are near zero on these inputs (max |y| {peak:.3g}, max abs error "
                f"{overall.max_abs:.3g}): give real inputs (calibration.path) or an absolute tolerance "
                f"options.verify.<precision>.max_abs")
        raise VerifyError(f"{target_id}: HTP output differs from CPU: {'; '.join(failures)}", hint=hint)
    return v
