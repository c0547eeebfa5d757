"""Whisper's reference decoder: log-mel features in numpy, greedy decoding with the two graphs.

Self-contained on purpose (numpy, onnxruntime, tokenizers; onnxruntime-qnn for the HTP): the
release archives ship this file as ``transcribe.py``, so an unpacked archive transcribes with
nothing else. ``qnn-release transcribe`` and the build's transcript verification use it too.

    python transcribe.py clip.wav [more.wav ...] [--cpu | --jit --soc-model N --htp-arch N] [--dir DIR]
        [--language en] [--segments]

A recording longer than 30 s is cut into windows of at most 30 s (``windows``: each cut falls in the
quietest fifth of a second of the window's last 10 s, so a cut lands between words, not in one) and each
window is transcribed on its own; a window Whisper takes for silence is dropped by Whisper's own rule.

The folder holds ``encoder_ctx.onnx`` + ``decoder_ctx.onnx`` (QNN context binaries: the HTP, or
its emulator on x86-64) or ``encoder.onnx`` + ``decoder.onnx`` (ONNX Runtime on CPU, or ``--jit``: its QNN EP
compiling them for the device's HTP when the session is created, for a chip without a binary), and
``tokenizer.json``, ``whisper.json`` (dimensions and special tokens), ``mel_filters.npy``.
"""

from __future__ import annotations

import contextlib
import json
import os
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
# Long recordings: Whisper without timestamps moves on by whole 30 s windows (openai-whisper transcribe.py,
# faster-whisper generate_segments: ``seek += segment_size``), cutting through whatever word is spoken at
# 30 s. The rule here: cut at the quietest QUIET_SECONDS (mean power of 10 ms frames) of the window's last
# CUT_SEARCH_SECONDS, the latest of equally quiet places (fewer windows), so a pause takes the cut.
CUT_SEARCH_SECONDS = 10
QUIET_SECONDS = 0.2
MIN_TAIL_SECONDS = 1.0  # no last window shorter than this (each window costs a whole encoder run)
# Whisper's no-speech rule (openai-whisper DecodingOptions / transcribe defaults): a window is silence when
# P(<|nospeech|>) at the start token exceeds 0.6 and the average log-probability of its tokens is below -1.
NO_SPEECH_THRESHOLD = 0.6
LOGPROB_THRESHOLD = -1.0
# Whisper's rule keeps its "you" on digital silence (P(no speech) 0.93 but log-probability -0.45 with Whisper
# base): a window quieter than -60 dBFS (RMS) is silence without running the model.
SILENCE_RMS = 10 ** (-60 / 20)


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


def windows(audio: np.ndarray, sr: int = SAMPLE_RATE) -> list[tuple[int, int]]:
    """Where a recording is cut into encoder windows: ``(start, end)`` sample ranges that cover it end to
    end, each at most 30 s; a recording of 30 s or less is one window. See CUT_SEARCH_SECONDS."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    n, size = audio.size, sr * CHUNK_SECONDS
    if n <= size:
        return [(0, n)]
    hop = sr // 100  # 10 ms frames
    power = np.square(audio[:n // hop * hop].astype(np.float64)).reshape(-1, hop).mean(axis=1)
    width = max(1, round(QUIET_SECONDS * 100))
    quiet = np.convolve(power, np.ones(width) / width, mode="valid")  # quiet[j]: frames j .. j+width-1
    out, start = [], 0
    while n - start > size:
        # candidate stretches lie wholly inside [end - CUT_SEARCH_SECONDS, end]; the cut is a stretch's middle
        lo = -(-(start + size - CUT_SEARCH_SECONDS * sr) // hop)
        hi = min((start + size) // hop - width, quiet.size - 1, int(n - MIN_TAIL_SECONDS * sr) // hop - width // 2)
        if hi < lo:
            cut = start + size
        else:
            span = quiet[lo:hi + 1]
            j = lo + span.size - 1 - int(np.argmin(span[::-1]))  # the latest of the quietest
            cut = min((j + width // 2) * hop, start + size)
        out.append((start, cut))
        start = cut
    out.append((start, n))
    return out


@dataclass
class Segment:
    start: float  # seconds into the recording
    end: float
    text: str
    no_speech: bool = False  # dropped by Whisper's no-speech rule


@dataclass
class Transcript:
    text: str
    tokens: list[int]
    encoder_seconds: float
    decoder_seconds: list[float] = field(default_factory=list)  # one per decoder step (prompt included)
    no_speech_prob: float | None = None  # P(<|nospeech|>) at the start token (None: no such token)
    avg_logprob: float = 0.0  # mean log-probability of the chosen tokens, end of text included
    segments: list[Segment] = field(default_factory=list)  # long form: one per window
    ended: bool = False  # decoding stopped at the end-of-text token (not at the token limit)
    departures: list[dict] = field(default_factory=list)  # with ``follow``: steps not taking the best token


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    top = np.max(x[np.isfinite(x)]) if np.isfinite(x).any() else 0.0
    return x - top - np.log(np.sum(np.exp(x - top)))


@contextlib.contextmanager
def _native_quiet():
    """The QNN library writes a "# LIBNATIVE: ..." banner to the process's stdout when the HTP backend loads: kept
    off the terminal (and out of a piped stdout) unless QNN_VERBOSE is set."""
    if os.environ.get("QNN_VERBOSE"):
        yield
        return
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _session(path: Path, device: str, soc_model: str | None = None, htp_arch: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if device == "cpu":
        return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    try:
        import onnxruntime_qnn
    except ImportError:
        raise WhisperInputError("the HTP needs onnxruntime-qnn (pip install onnxruntime-qnn), "
                                "or transcribe on CPU with the exported encoder.onnx/decoder.onnx") from None
    if device == "jit" and not soc_model:
        raise WhisperInputError("--jit compiles the float graphs for the device's HTP in fp16 and needs its chip: "
                                "--soc-model N --htp-arch N (`qnn-release socs` lists them)")
    if not any(d.ep_name == "QNNExecutionProvider" for d in ort.get_ep_devices()):
        ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options = {"backend_type": "htp", **({"enable_htp_fp16_precision": "1"} if device == "jit" else {})}
    if soc_model:
        options["soc_model"] = str(soc_model)
    if htp_arch:
        options["htp_arch"] = str(htp_arch)
    so.add_provider_for_devices(devices, options)
    with _native_quiet():
        return ort.InferenceSession(str(path), sess_options=so)


class Whisper:
    """Encoder + decoder sessions, the tokenizer and the decoding configuration of one folder."""

    def __init__(self, folder: str | Path, device: str | None = None, language: str | None = None,
                 chip: dict | None = None):
        """``chip``: the device's ``soc_model`` and ``htp_arch`` (default: whisper.json's); ``jit`` needs it."""
        folder = Path(folder)
        if not folder.is_dir():
            raise WhisperInputError(f"{folder}: not a folder")
        config_path = folder / "whisper.json"
        if not config_path.is_file():
            raise WhisperInputError(f"{folder}: no whisper.json: not a Whisper export or archive")
        self.config = json.loads(config_path.read_text())
        if device is None:
            device = "htp" if (folder / "encoder_ctx.onnx").is_file() else "cpu"
        names = {"htp": ("encoder_ctx.onnx", "decoder_ctx.onnx"), "cpu": ("encoder.onnx", "decoder.onnx"),
                 "jit": ("encoder.onnx", "decoder.onnx")}  # jit: the float graphs compiled for the HTP when loaded
        if device not in names:
            raise WhisperInputError(f"device {device!r}: expected cpu, htp or jit")
        enc, dec = (folder / n for n in names[device])
        for f in (enc, dec, folder / "tokenizer.json"):
            if not f.is_file():
                raise WhisperInputError(f"{folder}: no {f.name} (for device {device})")
        self.device, self.folder = device, folder
        chip = chip or self.config.get("chip") or {}
        self.load_seconds: dict[str, float] = {}  # per graph: session creation (jit: the compile)
        started = time.monotonic()
        self.encoder = _session(enc, device, chip.get("soc_model"), chip.get("htp_arch"))
        self.load_seconds["encoder"] = time.monotonic() - started
        self.decoder = _session(dec, device, chip.get("soc_model"), chip.get("htp_arch"))
        self.load_seconds["decoder"] = time.monotonic() - started - self.load_seconds["encoder"]
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
        no_speech = self.tokenizer.token_to_id("<|nospeech|>")
        self.no_speech = no_speech if no_speech is not None else self.tokenizer.token_to_id("<|nocaptions|>")

    def features(self, audio: np.ndarray) -> np.ndarray:
        return log_mel(audio, self.filters)

    def encode(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cross_k, cross_v = self.encoder.run(["cross_k", "cross_v"], {"mel": mel})
        return cross_k, cross_v

    def scores(self, logits: np.ndarray, first: bool) -> np.ndarray:
        """A step's logits as greedy decoding ranks them: suppressed tokens at -inf (and, for the ``first``
        text token, suppress_blank: no blank or end of text)."""
        scores = np.asarray(logits, dtype=np.float64).reshape(-1).copy()
        scores[self.suppress] = -np.inf
        if first:
            scores[self.suppress_begin] = -np.inf
        return scores

    def transcribe(self, audio: np.ndarray, max_tokens: int | None = None, observe=None,
                   follow: list[int] | None = None) -> Transcript:
        """Greedy decoding of the first 30 s; ``observe(kind, inputs, outputs)`` sees every graph run.
        ``follow``: decode these tokens instead of the best ones (another decoder's transcript, its end of text
        included when it ended), and say in ``departures`` where and how far each is from the best."""
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
        offset, no_speech_prob, logprob, ended, departures = 0, None, 0.0, False, []
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
            if offset == 1 and self.no_speech is not None and self.no_speech < logits.size:
                no_speech_prob = float(np.exp(log_softmax(logits.reshape(-1))[self.no_speech]))
            if offset < len(self.prompt):
                continue  # still reading the prompt
            scores = self.scores(logits, first=len(tokens) == len(self.prompt))
            nxt = best = int(np.argmax(scores))
            if follow is not None:
                if len(tokens) - len(self.prompt) >= len(follow):
                    break
                nxt = int(follow[len(tokens) - len(self.prompt)])
            lp = log_softmax(scores)
            if nxt != best:
                departures.append({"offset": offset - 1, "best": best, "token": nxt,
                                   "gap": round(float(lp[best] - lp[nxt]), 4)})
            logprob += float(lp[nxt])
            if nxt == self.eot:
                ended = True
                break
            tokens.append(nxt)
        text_tokens = tokens[len(self.prompt):]
        text = self.tokenizer.decode(text_tokens, skip_special_tokens=True).strip()
        return Transcript(text=text, tokens=text_tokens, encoder_seconds=enc_seconds, decoder_seconds=steps,
                          no_speech_prob=no_speech_prob, avg_logprob=logprob / (len(text_tokens) + 1), ended=ended,
                          departures=departures)

    def transcribe_long(self, audio: np.ndarray, max_tokens: int | None = None) -> Transcript:
        """Any length: each of ``windows(audio)`` transcribed on its own (no previous text as a prompt: every
        prompt token is a decoder step); windows quieter than SILENCE_RMS, or that Whisper's no-speech rule calls
        silence, are dropped."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if max_tokens is None:  # a whole window's worth (openai-whisper's sample_len), not the clips' max_tokens
            max_tokens = self.config["dims"]["n_text_ctx"] // 2
        texts, tokens, segments, enc, steps = [], [], [], 0.0, []
        for a, b in windows(audio) if audio.size else []:
            if np.sqrt(np.mean(np.square(audio[a:b], dtype=np.float64))) < SILENCE_RMS:
                segments.append(Segment(start=a / SAMPLE_RATE, end=b / SAMPLE_RATE, text="", no_speech=True))
                continue
            r = self.transcribe(audio[a:b], max_tokens=max_tokens)
            silent = (r.no_speech_prob is not None and r.no_speech_prob > NO_SPEECH_THRESHOLD
                      and r.avg_logprob < LOGPROB_THRESHOLD)
            segments.append(Segment(start=a / SAMPLE_RATE, end=b / SAMPLE_RATE, text=r.text, no_speech=silent))
            enc += r.encoder_seconds
            steps += r.decoder_seconds
            if not silent and r.text:
                texts.append(r.text)
                tokens += r.tokens
        return Transcript(text=" ".join(texts), tokens=tokens, encoder_seconds=enc, decoder_seconds=steps,
                          segments=segments)


def segment_lines(r: Transcript) -> list[str]:
    """``[0.00 -> 27.43] text`` per window, as Whisper prints segments (``(no speech)`` for a dropped one)."""
    return [f"[{s.start:.2f} -> {s.end:.2f}] {'(no speech)' if s.no_speech else s.text}" for s in r.segments]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Transcribe 16 kHz mono WAV files with this Whisper build")
    p.add_argument("clips", nargs="+", type=Path)
    p.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent,
                   help="the folder with the graphs (default: this script's)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--cpu", action="store_true", help="use encoder.onnx/decoder.onnx on CPU")
    how.add_argument("--jit", action="store_true", help="encoder.onnx/decoder.onnx compiled for the HTP when loaded "
                     "(a chip without a binary; needs --soc-model and --htp-arch)")
    p.add_argument("--soc-model", default=None, help="the device's QNN soc_model (with --jit)")
    p.add_argument("--htp-arch", default=None, help="the device's HTP arch, e.g. 79 (with --jit)")
    p.add_argument("--language", default=None)
    p.add_argument("--segments", action="store_true", help="one line per 30 s window, with its times")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per window (default 224)")
    args = p.parse_args(argv)
    if (args.soc_model is None) != (args.htp_arch is None) or (args.soc_model and not args.jit):
        p.error("--soc-model and --htp-arch go together, with --jit (the device's chip: `qnn-release socs`)")
    if args.max_tokens is not None and not 1 <= args.max_tokens <= 440:
        p.error(f"--max-tokens {args.max_tokens}: expected 1 to 440 (Whisper's limit per window is 224)")
    try:
        audio = [(clip, read_wav(clip)) for clip in args.clips]  # every file checked before any decoding
        chip = {"soc_model": args.soc_model, "htp_arch": args.htp_arch} if args.soc_model else None
        model = Whisper(args.dir, device="cpu" if args.cpu else "jit" if args.jit else None, language=args.language,
                        chip=chip)
        for clip, samples in audio:
            r = model.transcribe_long(samples, max_tokens=args.max_tokens)
            print(f"{clip}: {r.text}")
            for line in segment_lines(r) if args.segments else []:
                print(f"  {line}")
            each = f" {np.mean(r.decoder_seconds) * 1000:.1f} ms each" if r.decoder_seconds else ""
            print(f"  {len(r.segments)} window(s), encoder {r.encoder_seconds:.2f} s, {len(r.decoder_seconds)} "
                  f"decoder steps{each}", file=sys.stderr)
    except WhisperInputError as e:
        print(f"transcribe: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
