"""Whisper's reference decoder: log-mel features in numpy, greedy decoding with the two graphs.

Self-contained on purpose (numpy, onnxruntime, tokenizers; onnxruntime-qnn for the HTP): the
release archives ship this file as ``transcribe.py``, so an unpacked archive transcribes with
nothing else. ``qnn-release transcribe`` and the build's transcript verification use it too.

    python transcribe.py clip.wav [more.wav ...] [--cpu DIR] [--language en]

The folder holds ``encoder_ctx.onnx`` + ``decoder_ctx.onnx`` (QNN context binaries: the HTP, or
its emulator on x86-64) or ``encoder.onnx`` + ``decoder.onnx`` (ONNX Runtime on CPU), and
``tokenizer.json``, ``whisper.json`` (dimensions and special tokens), ``mel_filters.npy``.
"""

from __future__ import annotations

import json
import sys
import time
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
CHUNK_SECONDS = 30
N_SAMPLES = SAMPLE_RATE * CHUNK_SECONDS  # 480000 samples: the encoder's fixed 30 s window
N_FRAMES = N_SAMPLES // HOP  # 3000 mel frames


class WhisperInputError(ValueError):
    """A clip or a model folder this decoder cannot use; the message is one line with a hint."""


# -- audio and features ------------------------------------------------------------------------


def read_wav(path: str | Path) -> np.ndarray:
    """A 16 kHz mono PCM WAV as float32 in [-1, 1]; anything else is refused with the fix."""
    path = Path(path)
    try:
        with wave.open(str(path), "rb") as w:
            rate, channels, width, n = w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()
            raw = w.readframes(n)
    except FileNotFoundError:
        raise WhisperInputError(f"{path}: no such file") from None
    except (wave.Error, EOFError, OSError) as e:
        raise WhisperInputError(f"{path}: not a PCM WAV file ({e}); convert it: "
                                f"sox {path.name} -r 16000 -c 1 -b 16 out.wav") from None
    problems = []
    if rate != SAMPLE_RATE:
        problems.append(f"{rate} Hz")
    if channels != 1:
        problems.append(f"{channels} channels")
    if problems:
        raise WhisperInputError(f"{path}: {', '.join(problems)}: Whisper takes 16000 Hz mono; convert it: "
                                f"sox {path.name} -r 16000 -c 1 out.wav")
    if width == 2:
        audio = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 4:
        audio = np.frombuffer(raw, "<i4").astype(np.float32) / 2147483648.0
    elif width == 1:
        audio = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    else:
        raise WhisperInputError(f"{path}: {8 * width}-bit samples; convert it: sox {path.name} -b 16 out.wav")
    if audio.size == 0:
        raise WhisperInputError(f"{path}: no samples")
    return audio


def mel_filters(n_mels: int = 80, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-style mel filter bank [n_mels, n_fft/2 + 1], as librosa.filters.mel(norm='slaney') and Whisper."""
    fftfreqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower, upper = -ramps[:-2] / fdiff[:-1, None], ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


def log_mel(audio: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """[1, n_mels, 3000] log-mel features of the first 30 s (zero-padded), as Whisper computes them:
    a centred STFT (reflect padding, periodic Hann window of 400, hop 160), power, mel, log10 clamped
    to 8 below the maximum, scaled to about [-1, 1]."""
    audio = np.asarray(audio, dtype=np.float32)[:N_SAMPLES]
    audio = np.pad(audio, (0, N_SAMPLES - audio.size))
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:N_FRAMES]
    power = np.abs(np.fft.rfft(frames.astype(np.float64) * window, axis=-1)) ** 2  # [3000, 201]
    mel = filters.astype(np.float64) @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)[None]


# -- the model ---------------------------------------------------------------------------------


@dataclass
class Transcript:
    text: str
    tokens: list[int]
    encoder_seconds: float
    decoder_seconds: list[float] = field(default_factory=list)  # one per decoder step (prompt included)


def _session(path: Path, device: str, soc_model: str | None = None, htp_arch: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if device == "cpu":
        return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    try:
        import onnxruntime_qnn
    except ImportError:
        raise WhisperInputError("the QNN context binaries need onnxruntime-qnn (pip install onnxruntime-qnn), "
                                "or transcribe on CPU with the exported encoder.onnx/decoder.onnx") from None
    if not any(d.ep_name == "QNNExecutionProvider" for d in ort.get_ep_devices()):
        ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options = {"backend_type": "htp"}
    if soc_model:
        options["soc_model"] = str(soc_model)
    if htp_arch:
        options["htp_arch"] = str(htp_arch)
    so.add_provider_for_devices(devices, options)
    return ort.InferenceSession(str(path), sess_options=so)


class Whisper:
    """Encoder + decoder sessions, the tokenizer and the decoding configuration of one folder."""

    def __init__(self, folder: str | Path, device: str | None = None, language: str | None = None):
        folder = Path(folder)
        if not folder.is_dir():
            raise WhisperInputError(f"{folder}: not a folder")
        config_path = folder / "whisper.json"
        if not config_path.is_file():
            raise WhisperInputError(f"{folder}: no whisper.json: not a Whisper export or archive")
        self.config = json.loads(config_path.read_text())
        if device is None:
            device = "htp" if (folder / "encoder_ctx.onnx").is_file() else "cpu"
        names = {"htp": ("encoder_ctx.onnx", "decoder_ctx.onnx"), "cpu": ("encoder.onnx", "decoder.onnx")}
        if device not in names:
            raise WhisperInputError(f"device {device!r}: expected cpu or htp")
        enc, dec = (folder / n for n in names[device])
        for f in (enc, dec, folder / "tokenizer.json"):
            if not f.is_file():
                raise WhisperInputError(f"{folder}: no {f.name} (for device {device})")
        self.device, self.folder = device, folder
        chip = self.config.get("chip") or {}
        self.encoder = _session(enc, device, chip.get("soc_model"), chip.get("htp_arch"))
        self.decoder = _session(dec, device, chip.get("soc_model"), chip.get("htp_arch"))
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        filters = folder / "mel_filters.npy"
        self.filters = np.load(filters) if filters.is_file() else mel_filters(self.config["dims"]["n_mels"])
        self.language = language or self.config.get("language", "en")
        lang = self.tokenizer.token_to_id(f"<|{self.language}|>")
        if lang is None:
            raise WhisperInputError(f"language {self.language!r}: no token <|{self.language}|> in tokenizer.json")
        t = self.config["tokens"]
        self.prompt = [t["sot"], lang, t["transcribe"], t["no_timestamps"]]
        self.eot = t["eot"]
        vocab = self.config["dims"]["n_vocab"]
        self.suppress = np.zeros(vocab, dtype=bool)
        self.suppress[[i for i in self.config["suppress"] if i < vocab]] = True
        self.suppress[t["timestamp_begin"]:] = True  # no timestamps: they are never sampled
        self.suppress_begin = np.array([i for i in self.config["suppress_begin"] if i < vocab], dtype=np.int64)

    def features(self, audio: np.ndarray) -> np.ndarray:
        return log_mel(audio, self.filters)

    def encode(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross_k, cross_v = self.encoder.run(["cross_k", "cross_v"], {"mel": mel})
        return cross_k, cross_v

    def transcribe(self, audio: np.ndarray, max_tokens: int | None = None, observe=None) -> Transcript:
        """Greedy decoding of the first 30 s; ``observe(kind, inputs, outputs)`` sees every graph run."""
        mel = self.features(audio)
        t0 = time.monotonic()
        cross_k, cross_v = self.encode(mel)
        enc_seconds = time.monotonic() - t0
        if observe:
            observe("encoder", {"mel": mel}, [cross_k, cross_v])
        d = self.config["dims"]
        n_ctx = d["n_text_ctx"]
        shape = (d["decoder_layers"], 1, n_ctx, d["d_model"])
        k_cache, v_cache = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        tokens, steps = list(self.prompt), []
        # at most n_text_ctx // 2 new tokens, as openai-whisper (sample_len) and CTranslate2 decode
        if max_tokens is None:
            max_tokens = self.config.get("max_tokens") or n_ctx
        limit = len(self.prompt) + min(n_ctx // 2, max_tokens)
        offset = 0
        while len(tokens) < limit:
            feed = {"tokens": np.array([[tokens[offset]]], np.int32), "self_k_cache": k_cache,
                    "self_v_cache": v_cache, "cross_k": cross_k, "cross_v": cross_v,
                    "offset": np.array([offset], np.int32)}
            t0 = time.monotonic()
            logits, k_cache, v_cache = self.decoder.run(["logits", "new_self_k_cache", "new_self_v_cache"], feed)
            steps.append(time.monotonic() - t0)
            if observe:
                observe("decoder", feed, [logits, k_cache, v_cache])
            offset += 1
            if offset < len(self.prompt):
                continue  # still reading the prompt
            scores = logits.reshape(-1).astype(np.float64)
            scores[self.suppress] = -np.inf
            if len(tokens) == len(self.prompt):  # suppress_blank: no blank or end as the first token
                scores[self.suppress_begin] = -np.inf
            nxt = int(np.argmax(scores))
            if nxt == self.eot:
                break
            tokens.append(nxt)
        text_tokens = tokens[len(self.prompt):]
        text = self.tokenizer.decode(text_tokens, skip_special_tokens=True).strip()
        return Transcript(text=text, tokens=text_tokens, encoder_seconds=enc_seconds, decoder_seconds=steps)

    def transcribe_file(self, path: str | Path, **kw) -> Transcript:
        return self.transcribe(read_wav(path), **kw)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Transcribe 16 kHz mono WAV files with this Whisper build")
    p.add_argument("clips", nargs="+", type=Path)
    p.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent,
                   help="the folder with the graphs (default: this script's)")
    p.add_argument("--cpu", action="store_true", help="use encoder.onnx/decoder.onnx on CPU")
    p.add_argument("--language", default=None)
    args = p.parse_args(argv)
    try:
        model = Whisper(args.dir, device="cpu" if args.cpu else None, language=args.language)
        for clip in args.clips:
            r = model.transcribe_file(clip)
            print(f"{clip}: {r.text}")
            print(f"  encoder {r.encoder_seconds:.2f} s, {len(r.decoder_seconds)} decoder steps "
                  f"{np.mean(r.decoder_seconds) * 1000:.1f} ms each", file=sys.stderr)
    except WhisperInputError as e:
        print(f"transcribe: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
