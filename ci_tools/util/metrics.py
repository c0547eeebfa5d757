"""Parity metrics between a reference output (CPU) and a compiled one (HTP), NaN-free.

The numbers are taken over the positions where both sides are finite; where none is left (a reference that is
NaN everywhere) they say disagreement, never agreement: nothing compared is not a match. Whether a non-finite
reference fails a sample is the judge's rule (``compile/verify.judge``), which names it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

SNR_CAP_DB = 200.0  # an exact match has infinite SNR; JSON has no infinity


@dataclass(frozen=True)
class Parity:
    cosine: float
    max_abs: float
    snr_db: float
    nan_count: int

    def as_dict(self) -> dict:
        return asdict(self)


def compare(ref: np.ndarray, out: np.ndarray) -> Parity:
    ref = np.asarray(ref, dtype=np.float64).ravel()
    out = np.asarray(out, dtype=np.float64).ravel()
    if ref.shape != out.shape:
        raise ValueError(f"shape mismatch: {ref.size} vs {out.size} elements")
    nan_count = int(np.count_nonzero(~np.isfinite(out)))
    finite = np.isfinite(out) & np.isfinite(ref)
    if not finite.any():  # nothing to compare (empty, or non-finite on a side everywhere): no agreement
        return Parity(cosine=0.0, max_abs=0.0, snr_db=-SNR_CAP_DB, nan_count=nan_count)
    r, o = ref[finite], out[finite]
    nr, no = float(np.linalg.norm(r)), float(np.linalg.norm(o))
    if nr == 0.0 and no == 0.0:
        cosine = 1.0
    elif nr == 0.0 or no == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.clip(np.dot(r, o) / (nr * no), -1.0, 1.0))
    diff = r - o
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    noise, signal = float(np.dot(diff, diff)), float(np.dot(r, r))
    if noise == 0.0:
        snr = SNR_CAP_DB
    elif signal == 0.0:
        snr = -SNR_CAP_DB
    else:
        snr = float(np.clip(10.0 * math.log10(signal / noise), -SNR_CAP_DB, SNR_CAP_DB))
    return Parity(cosine=cosine, max_abs=max_abs, snr_db=snr, nan_count=nan_count)


def nonfinite(a: np.ndarray) -> int:
    """How many values of ``a`` are NaN or infinite."""
    return int(np.count_nonzero(~np.isfinite(np.asarray(a, dtype=np.float64))))


def worst(parities: list[Parity]) -> Parity:
    """The worst of several outputs / samples: lowest cosine and SNR, largest error, all NaNs."""
    return Parity(cosine=min(p.cosine for p in parities), max_abs=max(p.max_abs for p in parities),
                  snr_db=min(p.snr_db for p in parities), nan_count=sum(p.nan_count for p in parities))


def peak_memory_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports KiB)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def rounded(p: Parity) -> dict:
    """A parity as a release states it: cosine to 6 places, SNR to 2, the largest error to 4 digits."""
    return {"cosine": round(p.cosine, 6), "snr_db": round(p.snr_db, 2), "max_abs": float(f"{p.max_abs:.4g}")}
