"""Verify a compiled target: run it on the HTP emulator and compare with ONNX Runtime on CPU."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import VerifyError
from .matrix import Options, Thresholds
from .metrics import Parity, compare, worst

# fp16 activations are usually lossless; 8-bit weights must be checked (REFERENCE.md section 1.7).
DEFAULT_THRESHOLDS = {
    "fp16": Thresholds(min_cosine=0.999, min_snr_db=20.0),
    "w8a16": Thresholds(min_cosine=0.99, min_snr_db=10.0),
    "int8": Thresholds(min_cosine=0.95),
}


@dataclass(frozen=True)
class Verification:
    parity: Parity
    per_output: dict[str, dict]
    thresholds: dict
    emulator_seconds: float | None
    samples: int


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
    if overall.nan_count:
        failures.append(f"{overall.nan_count} NaN/Inf values")
    if thresholds.min_cosine is not None and overall.cosine < thresholds.min_cosine:
        failures.append(f"cosine {overall.cosine:.6f} < {thresholds.min_cosine}")
    if thresholds.max_abs is not None and overall.max_abs > thresholds.max_abs:
        failures.append(f"max abs error {overall.max_abs:.4g} > {thresholds.max_abs}")
    if thresholds.min_snr_db is not None and overall.snr_db < thresholds.min_snr_db:
        failures.append(f"SNR {overall.snr_db:.1f} dB < {thresholds.min_snr_db} dB")
    if failures:
        raise VerifyError(f"{target_id}: HTP output differs from CPU: {'; '.join(failures)}",
                          hint="check quantization/calibration, or set options.verify for this precision")
    return v
