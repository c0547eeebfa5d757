"""Recordings as mono float audio, read by libsndfile (the `soundfile` wheel bundles it).

One reader for the sample front end and the Whisper recipe: WAV in every PCM width, 32/64-bit float,
WAVE_FORMAT_EXTENSIBLE (what sox, ffmpeg and most recorders write for 24-bit or multichannel audio),
FLAC and Ogg Vorbis. What it cannot decode is refused in one line that names the file and the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

EXTENSIONS = (".wav", ".flac", ".ogg")


class AudioError(ValueError):
    """A recording that cannot be read, with the fix (`hint`)."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def read_audio(path: str | Path) -> tuple[np.ndarray, int, int]:
    """(mono float32 samples in [-1, 1], sample rate, channels in the file); channels are averaged."""
    import soundfile

    path = Path(path)
    if not path.is_file():
        raise AudioError(f"{path}: no such file", hint="check the path")
    try:
        x, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        why = str(e).strip().rsplit("': ", 1)[-1].rstrip(".") or type(e).__name__  # drop "Error opening '<path>'"
        raise AudioError(f"{path.name}: not a recording libsndfile reads ({why})",
                         hint=f"WAV, FLAC or Ogg; convert others: sox {path.name} out.wav") from None
    channels = x.shape[1]
    mono = x.mean(axis=1, dtype=np.float32) if channels > 1 else x[:, 0]
    if not mono.size:
        raise AudioError(f"{path.name}: the recording holds no samples", hint="check the file")
    return np.ascontiguousarray(mono, dtype=np.float32), int(rate), channels
