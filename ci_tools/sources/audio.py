"""Recordings as mono float audio for the sample front end (the Whisper archive's stdlib-only reader ships alone).

WAV is read here, chunk by chunk: PCM 8/16/24/32-bit, IEEE float 32/64-bit, and WAVE_FORMAT_EXTENSIBLE
(what sox, ffmpeg and most recorders write for 24-bit or multichannel audio). FLAC and Ogg are decoded
by libsndfile (the `soundfile` wheel bundles it) in a child process: once the QNN EP has loaded
``libQnnHtp.so`` into a process, that library's own copy of libffi's symbols (``ffi_call``,
``ffi_prep_cif``) is what every cffi call binds to, and a cffi library such as soundfile crashes
(SIGSEGV in ``sf_command``; "ffi_prep_closure(): bad user_data" with a file object). Seen with
onnxruntime-qnn 2.7.0 (QNN 2.51.0); ``tests/test_real_samples.py`` reads a FLAC after a compile.
What cannot be decoded is refused in one line that names the file and the fix.
"""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..util import cmd

EXTENSIONS = (".wav", ".flac", ".ogg")
PCM, FLOAT, EXTENSIBLE = 1, 3, 0xFFFE


class AudioError(ValueError):
    """A recording that cannot be read, with the fix (`hint`)."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def read_audio(path: str | Path) -> tuple[np.ndarray, int, int]:
    """(mono float32 samples in [-1, 1], sample rate, channels in the file); channels are averaged."""
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"{path}: no such file", hint="check the path")
    data = path.read_bytes()
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        x, rate, channels = _wav(data, path.name)
    else:
        x, rate, channels = _decode_elsewhere(path)
    if x.ndim == 2:
        x = x.mean(axis=1, dtype=np.float32) if x.shape[1] > 1 else x[:, 0]
    if not x.size:
        raise AudioError(f"{path.name}: the recording holds no samples", hint="check the file")
    return np.ascontiguousarray(x, dtype=np.float32), rate, channels


def _wav(data: bytes, name: str) -> tuple[np.ndarray, int, int]:
    fmt = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]
        if cid == b"fmt " and len(body) >= 16:
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
            if tag == EXTENSIBLE and len(body) >= 26:
                tag = struct.unpack("<H", body[24:26])[0]  # the sub-format GUID starts with the format tag
            fmt = (tag, channels, rate, bits)
        elif cid == b"data" and fmt is not None:
            return _samples(body, *fmt, name)
        pos += 8 + size + (size & 1)
    raise AudioError(f"{name}: a WAV file without {'a data' if fmt else 'a fmt'} chunk",
                     hint=f"the file is cut short or not a WAV; re-encode it: sox {name} out.wav")


def _samples(body: bytes, tag: int, channels: int, rate: int, bits: int, name: str):
    width = bits // 8
    if channels < 1 or width < 1:
        raise AudioError(f"{name}: {channels} channels of {bits}-bit samples", hint=f"re-encode it: sox {name} out.wav")
    frames = len(body) // (width * channels)
    raw = body[: frames * width * channels]
    x: np.ndarray  # float32 in every branch (numpy keeps float32 when dividing by a Python number)
    if tag == FLOAT and bits in (32, 64):
        x = np.frombuffer(raw, {32: "<f4", 64: "<f8"}[bits]).astype(np.float32)
    elif tag == PCM and bits == 8:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    elif tag == PCM and bits == 24:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / 2**23
    elif tag == PCM and bits in (16, 32):
        x = np.frombuffer(raw, {16: "<i2", 32: "<i4"}[bits]).astype(np.float32) / 2 ** (bits - 1)
    else:
        kind = {PCM: "PCM", FLOAT: "float"}.get(tag, f"format tag {tag:#x}")
        raise AudioError(f"{name}: {bits}-bit {kind} WAV is not read",
                         hint=f"8/16/24/32-bit PCM or 32/64-bit float; convert it: sox {name} -b 16 out.wav")
    return x.reshape(-1, channels), rate, channels


def _decode_elsewhere(path: Path) -> tuple[np.ndarray, int, int]:
    """FLAC/Ogg through libsndfile, in a child process (see the module's docstring for why)."""
    with tempfile.TemporaryDirectory(prefix="qnn-audio-") as tmp:
        out = Path(tmp) / "audio.npz"
        r = cmd.run([sys.executable, "-m", "ci_tools.sources.audio", str(path), str(out)],
                           capture_output=True, text=True)
        if r.returncode != 0 or not out.exists():
            why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            raise AudioError(f"{path.name}: not a recording libsndfile reads ({why})",
                             hint=f"WAV, FLAC or Ogg; convert others: sox {path.name} out.wav")
        with np.load(out) as z:
            return z["x"], int(z["rate"]), int(z["channels"])


def _child(path: str, out: str) -> int:
    import soundfile

    try:
        x, rate = soundfile.read(path, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        print(str(e).strip().rsplit("': ", 1)[-1].rstrip(".") or type(e).__name__, file=sys.stderr)
        return 3
    np.savez(out, x=x, rate=rate, channels=x.shape[1])
    return 0


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:3]))
