"""What tests/test_real_samples.py and tests/unit/test_real_samples.py share."""

from __future__ import annotations

import wave

import numpy as np

from ci_tools.matrix.schema import Stream, Thresholds

TH = Thresholds(min_cosine=0.999, min_snr_db=20.0, max_abs=0.03)


VAD_STREAM = Stream(carry={"stateN": "state"}, decisions={"output": 0.5}, range={"output": [0, 1]})


def _streams(probs: list[float], state_scale: float = 1.0):
    """One stream of (output [1, 1], stateN [2, 1, 4]) steps."""
    return [[np.array([[p]], np.float32), np.full((2, 1, 4), p * state_scale, np.float32)] for p in probs]


def _path_samples(tmp_path, files: list[str], **front_end):
    from ci_tools.sources.store import sha256_file

    parts = [{"kind": "path", "path": f, "sha256": sha256_file(tmp_path / f)} for f in files]
    return {"description": "test samples", "license": "CC0-1.0",
            "source": parts[0] if len(parts) == 1 else {"kind": "parts", "sources": parts},
            "front_end": front_end or {"kind": "npz"}}


def _wav(path, x: np.ndarray, rate: int = 16000):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1 - 2**-15) * 32768).astype("<i2").tobytes())
