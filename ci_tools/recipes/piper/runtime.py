"""A Piper (VITS) voice cut into static graphs: text in, WAV out.

Self-contained on purpose (numpy, onnxruntime, piper-phonemize; onnxruntime-qnn for the HTP): the release
archives ship this file as ``speak.py``, so an unpacked archive speaks with nothing else.
``qnn-release speak`` and the build's speech verification use it too.

    python speak.py "Text to say." -o out.wav [--dir DIR] [--cpu | --jit --soc-model N --htp-arch N] [--seed N]

The folder holds ``voice.json`` (phoneme map, sample rate, scales, the graphs' sizes), ``duration.onnx``
(the duration predictor: data-dependent shapes, always on CPU; 2 ms a sentence) and either
``encoder_ctx.onnx`` + ``decoder_ctx.onnx`` (QNN context binaries: the HTP, or its emulator on x86-64) or
``encoder.onnx`` + ``decoder.onnx`` (ONNX Runtime on CPU, or ``--jit``: its QNN EP compiling them for the
device's HTP when the session is created, for a chip without a binary). The pipeline: espeak-ng phonemes -> ids (Piper's
``^ _ p _ ... $``), the encoder at a fixed ``max_ids`` (zero-padded, masked by the true length), durations
``ceil(exp(logw) * length_scale)`` on the host, the prior expanded by ``np.repeat`` (plus noise), then the
flow + HiFi-GAN decoder over fixed windows of ``frames`` latent frames that overlap by ``overlap`` frames on
each side (every window inside the utterance; a short one zero-padded with ``y_mask`` 0), joined by their
centres. A sentence longer than ``max_ids`` ids is split at punctuation, else between words.
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

BOS, EOS, PAD = "^", "$", "_"


def _clip(text: str, limit: int) -> str:
    """The first line of ``text`` cut at a word boundary (this file ships alone: ci_tools.util.text.clip's twin)."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    if len(line) <= limit:
        return line
    head = line[:limit - 1]
    return (head.rsplit(" ", 1)[0] if " " in head[limit // 2:] else head).rstrip(" ,;:") + "…"
BREAKS = (",", ";", ":")  # where a sentence too long for the encoder is split first
MAX_TEXT_CHARS = 10000
GRAPHS = {"htp": ("encoder_ctx.onnx", "decoder_ctx.onnx"), "cpu": ("encoder.onnx", "decoder.onnx"),
          "jit": ("encoder.onnx", "decoder.onnx")}  # jit: the float graphs compiled for the HTP at session creation
VOICE_KEYS = ("sample_rate", "espeak_voice", "phoneme_id_map", "noise_scale", "length_scale", "noise_w",
              "max_ids", "frames", "overlap", "hop", "channels")


class VoiceInputError(Exception):
    """Text or a voice folder this runtime cannot take: one line saying what and what to do."""


@dataclass
class Speech:
    audio: np.ndarray  # float32 in [-1, 1] at ``sample_rate``
    sample_rate: int
    pieces: int = 0  # utterances (sentences, or parts of a long one)
    frames: int = 0  # latent frames (hop samples each)
    chunks: int = 0  # decoder runs
    seconds: dict[str, float] = field(default_factory=dict)  # per stage: encoder, duration, expand, decoder
    first_audio_seconds: float | None = None  # from the call to the first decoder window's audio

    @property
    def audio_seconds(self) -> float:
        return len(self.audio) / self.sample_rate


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


def _session(path: Path, device: str, chip: dict | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if device == "cpu":
        return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    try:
        import onnxruntime_qnn
    except ImportError:
        raise VoiceInputError("the HTP needs onnxruntime-qnn (pip install onnxruntime-qnn), or "
                              "speak on CPU with the exported encoder.onnx/decoder.onnx (--cpu)") from None
    if device == "jit" and not (chip or {}).get("soc_model"):
        raise VoiceInputError("--jit compiles the float graphs for the device's HTP in fp16 and needs its chip: "
                              "--soc-model N --htp-arch N (`qnn-release socs` lists them)")
    if not any(d.ep_name == "QNNExecutionProvider" for d in ort.get_ep_devices()):
        ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options = {"backend_type": "htp", **({"enable_htp_fp16_precision": "1"} if device == "jit" else {})}
    for key in ("soc_model", "htp_arch"):
        if value := (chip or {}).get(key):
            options[key] = str(value)
    so.add_provider_for_devices(devices, options)
    with _native_quiet():
        return ort.InferenceSession(str(path), sess_options=so)


def read_voice(folder: Path) -> dict:
    """``voice.json``, with every key the pipeline reads checked."""
    path = folder / "voice.json"
    try:
        voice = json.loads(path.read_text())
    except FileNotFoundError:
        raise VoiceInputError(f"{folder}: no voice.json (not a voice folder: an unpacked archive or an export)") \
            from None
    except (OSError, ValueError) as e:
        raise VoiceInputError(f"{path}: not JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(voice, dict):
        raise VoiceInputError(f"{path}: expected an object with {', '.join(VOICE_KEYS)}")
    missing = [k for k in VOICE_KEYS if k not in voice]
    if missing:
        raise VoiceInputError(f"{path}: no {', '.join(missing)} (written by the piper export)")
    id_map = voice["phoneme_id_map"]
    if not isinstance(id_map, dict) or not all(isinstance(v, list) and v and all(isinstance(i, int) for i in v)
                                               for v in id_map.values()):
        raise VoiceInputError(f"{path}: phoneme_id_map: expected phoneme -> [id, ...] (as Piper's .onnx.json)")
    if not {BOS, EOS, PAD} <= id_map.keys():
        raise VoiceInputError(f"{path}: phoneme_id_map lacks one of {BOS!r} {EOS!r} {PAD!r} (Piper's markers)")
    return voice


def check_voice(voice: dict, encoder, decoder, where: str) -> None:
    """The voice's map and sizes against the graphs it is used with (a .onnx.json of another voice is refused
    here, not heard as noise)."""
    ids = encoder.get_inputs()[0]
    if list(ids.shape) != [1, voice["max_ids"]]:
        raise VoiceInputError(f"{where}: the encoder takes ids {ids.shape}, voice.json says max_ids "
                              f"{voice['max_ids']}: the voice.json and the graphs are from different exports")
    z = decoder.get_inputs()[0]
    if list(z.shape) != [1, voice["channels"], voice["frames"]]:
        raise VoiceInputError(f"{where}: the decoder takes {z.shape}, voice.json says [1, {voice['channels']}, "
                              f"{voice['frames']}]: the voice.json and the graphs are from different exports")
    n_symbols = voice.get("num_symbols")
    top = max(i for v in voice["phoneme_id_map"].values() for i in v)
    if n_symbols is not None and top >= n_symbols:
        raise VoiceInputError(f"{where}: phoneme_id_map uses id {top}, the voice has {n_symbols} symbols")


class Voice:
    """The graphs of one folder and the voice's configuration."""

    def __init__(self, folder: str | Path, device: str | None = None, threads: int | None = None,
                 chip: dict | None = None):
        """``chip``: the device's ``soc_model`` and ``htp_arch`` (default: voice.json's); ``jit`` needs it."""
        folder = Path(folder)
        self.voice = read_voice(folder)
        if device is None:
            device = "htp" if (folder / GRAPHS["htp"][0]).is_file() else "cpu"
        if device not in GRAPHS:
            raise VoiceInputError(f"device {device!r}: expected cpu, htp or jit")
        self.device = device
        enc, dec = (folder / n for n in GRAPHS[device])
        for p in (enc, dec, folder / "duration.onnx"):
            if not p.is_file():
                raise VoiceInputError(f"{folder}: no {p.name} (a voice folder for {device} has "
                                      f"{', '.join(GRAPHS[device])} and duration.onnx)")
        chip = chip or self.voice.get("chip")
        self.load_seconds: dict[str, float] = {}  # per graph: session creation (jit: the compile)
        started = time.monotonic()
        self.encoder = _session(enc, device, chip)
        self.load_seconds["encoder"] = time.monotonic() - started
        self.decoder = _session(dec, device, chip)
        self.load_seconds["decoder"] = time.monotonic() - started - self.load_seconds["encoder"]
        self.duration = _session(folder / "duration.onnx", "cpu")
        check_voice(self.voice, self.encoder, self.decoder, str(folder))
        self.sample_rate = int(self.voice["sample_rate"])

    # -- text -> ids ---------------------------------------------------------------------------------

    def pieces(self, text: str) -> list[list[int]]:
        """Every utterance of ``text`` as ids, each at most ``max_ids``; bad text raises VoiceInputError."""
        return text_to_ids(text, self.voice)

    # -- ids -> audio --------------------------------------------------------------------------------

    def encode(self, ids: list[int], rng=None, observe=None, seconds=None):
        """m_p, logs_p [C, n] and the durations [n] of one utterance."""
        v, n = self.voice, len(ids)
        inputs = self.encoder.get_inputs()
        dtype = np.int32 if inputs[0].type == "tensor(int32)" else np.int64
        x = np.zeros((1, v["max_ids"]), dtype)
        x[0, :n] = ids
        feed = {inputs[0].name: x, inputs[1].name: np.array([n], dtype)}
        t = time.perf_counter()
        out = self.encoder.run(None, feed)
        _add(seconds, "encoder", time.perf_counter() - t)
        if observe is not None:
            t = time.perf_counter()
            observe("encoder", feed, out)
            _add(seconds, "observed", time.perf_counter() - t)
        named = dict(zip((o.name for o in self.encoder.get_outputs()), out))
        m_p, logs_p, x_mask, dp_x = (named[k] for k in ("m_p", "logs_p", "x_mask", "dp_x"))
        t = time.perf_counter()
        noise = np.zeros((1, 2, n), np.float32) if rng is None else rng.standard_normal((1, 2, n), dtype=np.float32)
        logw = self.duration.run(None, {"dp_x": dp_x[:, :, :n], "x_mask": x_mask[:, :, :n], "noise": noise,
                                        "noise_w": np.array(v["noise_w"], np.float32)})[0]
        w = np.exp(logw) * x_mask[:, :, :n] * np.float32(v["length_scale"])  # float32, as the original graph
        dur = np.ceil(w).astype(np.int64)[0, 0]
        _add(seconds, "duration", time.perf_counter() - t)
        return m_p[0, :, :n], logs_p[0, :, :n], dur

    def windows(self, frames_total: int) -> list[tuple[int, int, int]]:
        """(window start, keep from, keep to) per decoder run over ``frames_total`` latent frames."""
        frames, overlap = self.voice["frames"], self.voice["overlap"]
        out, pos = [], 0
        while pos < frames_total:
            start = min(max(pos - overlap, 0), max(frames_total - frames, 0))
            end = frames_total if start + frames >= frames_total else start + frames - overlap
            out.append((start, pos, end))
            pos = end
        return out

    def decode(self, z: np.ndarray, observe=None, seconds=None, started: float | None = None,
               excluded: float = 0.0) -> tuple:
        """The flow + decoder over z [C, T]: (audio, runs, seconds from ``started`` to the first window's audio,
        less ``excluded``: what the observer took before)."""
        v = self.voice
        frames, hop = v["frames"], v["hop"]
        total = z.shape[1]
        audio = np.zeros(total * hop, np.float32)
        names = [i.name for i in self.decoder.get_inputs()]
        first = None
        plan = self.windows(total)
        for start, keep_from, keep_to in plan:
            k = min(frames, total - start)
            zc = np.zeros((1, v["channels"], frames), np.float32)
            mask = np.zeros((1, 1, frames), np.float32)
            zc[0, :, :k] = z[:, start:start + k]
            mask[0, 0, :k] = 1.0
            feed = {names[0]: zc, names[1]: mask}
            t = time.perf_counter()
            y = self.decoder.run(None, feed)
            done = time.perf_counter()
            _add(seconds, "decoder", done - t)
            if first is None and started is not None:  # the graphs' time only: not what ``observe`` does
                first = done - started - excluded
            if observe is not None:
                observe("decoder", feed, y)
            y = np.asarray(y[0]).reshape(-1)
            audio[keep_from * hop:keep_to * hop] = y[(keep_from - start) * hop:(keep_to - start) * hop]
        return audio, len(plan), first

    def synthesize(self, ids: list[int], rng=None, observe=None, seconds=None, started=None):
        """One utterance's audio: (audio, latent frames, decoder runs, seconds to first audio)."""
        m_p, logs_p, dur = self.encode(ids, rng, observe, seconds)
        t = time.perf_counter()
        m, logs = np.repeat(m_p, dur, axis=1), np.repeat(logs_p, dur, axis=1)
        if m.shape[1] == 0:  # every duration 0: the graph clips the length to one frame
            m = logs = np.zeros((m_p.shape[0], 1), np.float32)
        z = m if rng is None else \
            m + rng.standard_normal(m.shape, dtype=np.float32) * np.exp(logs) * np.float32(self.voice["noise_scale"])
        _add(seconds, "expand", time.perf_counter() - t)
        observed = (seconds or {}).pop("observed", 0.0)
        audio, runs, first = self.decode(z.astype(np.float32), observe, seconds, started, observed)
        return audio, z.shape[1], runs, first

    def speak(self, text: str, rng=None, observe=None, silence: float = 0.0) -> Speech:
        """``text`` spoken: its utterances in order with ``silence`` seconds between them (Piper's
        ``sentence_silence``, 0 by default as in Piper's Python API). ``rng`` None: no
        noise (deterministic: CPU and HTP compare sample for sample); a numpy Generator: Piper's sampling."""
        started = time.perf_counter()
        pieces = self.pieces(text)
        seconds: dict[str, float] = {}
        gap = np.zeros(int(silence * self.sample_rate), np.float32)
        parts: list[np.ndarray] = []
        frames, runs, first = 0, 0, None
        for i, ids in enumerate(pieces):
            audio, f, r, t = self.synthesize(ids, rng, observe, seconds, started if i == 0 else None)
            parts += [gap, audio] if parts else [audio]
            frames, runs, first = frames + f, runs + r, first if first is not None else t
        return Speech(audio=np.concatenate(parts), sample_rate=self.sample_rate, pieces=len(pieces), frames=frames,
                      chunks=runs, seconds={k: round(s, 4) for k, s in seconds.items()},
                      first_audio_seconds=round(first, 4) if first is not None else None)


def _add(seconds, key, value) -> None:
    if seconds is not None:
        seconds[key] = seconds.get(key, 0.0) + value


def phonemize(text: str, voice: str) -> list[list[str]]:
    try:
        from piper_phonemize import phonemize_espeak
    except ImportError:
        raise VoiceInputError("phonemes need piper-phonemize (pip install piper-phonemize; wheels for Python "
                              "3.10/3.11 on Linux)") from None
    return [s for s in phonemize_espeak(text, voice) if s]


def text_to_ids(text: str, voice: dict) -> list[list[int]]:
    """``text`` as utterances of ids (Piper's ``^ _ p1 _ p2 _ ... _ $``): espeak-ng's sentences, each split at
    ``, ; :`` (else between words) until it fits ``max_ids``."""
    if not text.strip():
        raise VoiceInputError("the text is empty: give a sentence to say")
    if len(text) > MAX_TEXT_CHARS:
        raise VoiceInputError(f"the text has {len(text)} characters, more than {MAX_TEXT_CHARS}: split it into "
                              "several calls (a paragraph or less each)")
    id_map, max_ids = voice["phoneme_id_map"], int(voice["max_ids"])
    out = []
    for sentence in phonemize(text, voice["espeak_voice"]):
        unknown = sorted({p for p in sentence if p not in id_map})
        if unknown:
            raise VoiceInputError(f"phoneme(s) {' '.join(repr(p) for p in unknown)} of {_clip(text, 60)!r} are not in "
                                  f"the voice's phoneme map (espeak-ng voice {voice['espeak_voice']!r}): spell the "
                                  "word differently, or use a voice trained with them")
        for piece in split_sentence(sentence, id_map, max_ids, text):
            ids = list(id_map[BOS]) + list(id_map[PAD])
            for p in piece:
                ids += list(id_map[p]) + list(id_map[PAD])
            out.append(ids + list(id_map[EOS]))
    if not out:
        raise VoiceInputError(f"{_clip(text, 60)!r} has nothing to say (espeak-ng gave no phonemes)")
    return out


def split_sentence(phonemes: list[str], id_map: dict, max_ids: int, text: str = "") -> list[list[str]]:
    """A sentence's phonemes in pieces whose ids fit ``max_ids``: after the last ``, ; :`` that fits, else at the
    last space; a single word longer than the encoder takes is refused."""
    cost = [len(id_map[p]) + 1 for p in phonemes]
    budget = max_ids - 3  # ^ _ ... $
    pieces, start = [], 0
    while sum(cost[start:]) > budget:
        used, end = 0, start
        while end < len(phonemes) and used + cost[end] <= budget:
            used, end = used + cost[end], end + 1
        cut = next((i + 1 for i in range(end - 1, start, -1) if phonemes[i] in BREAKS), None) or \
            next((i for i in range(end - 1, start, -1) if phonemes[i] == " "), None)
        if cut is None:
            raise VoiceInputError(f"a word of {_clip(text, 60)!r} is longer than the encoder takes ({max_ids} ids): "
                                  "put spaces or punctuation into it")
        pieces.append(phonemes[start:cut])
        start = cut
        while start < len(phonemes) and phonemes[start] == " ":
            start += 1
    return pieces + ([phonemes[start:]] if start < len(phonemes) else [])


def write_wav(path: str | Path, audio: np.ndarray, rate: int) -> None:
    """16-bit mono PCM, written beside and moved into place (never a half-written WAV)."""
    path = Path(path)
    if path.is_dir() or not path.parent.is_dir():
        raise VoiceInputError(f"{path}: {'a folder' if path.is_dir() else 'no folder ' + str(path.parent)}: "
                              "give a .wav file in an existing folder")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with wave.open(str(tmp), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes((np.clip(audio, -1, 1) * 32767).round().astype("<i2").tobytes())
        tmp.replace(path)
    except OSError as e:
        raise VoiceInputError(f"{path}: cannot write it ({e.strerror or e})") from None
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Say a text with a Piper voice's graphs (HTP or CPU) into a WAV.")
    p.add_argument("text")
    p.add_argument("-o", "--output", type=Path, required=True, help="the WAV to write")
    p.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent, help="the voice folder")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--cpu", action="store_true", help="the float graphs on CPU instead of the context binaries")
    how.add_argument("--jit", action="store_true", help="the float graphs compiled for the HTP when loaded (a chip "
                     "without a binary; needs --soc-model and --htp-arch)")
    p.add_argument("--soc-model", default=None, help="the device's QNN soc_model (with --jit)")
    p.add_argument("--htp-arch", default=None, help="the device's HTP arch, e.g. 79 (with --jit)")
    p.add_argument("--seed", type=int, default=None, help="sample Piper's noise with this seed (default: none)")
    p.add_argument("--sentence-silence", type=float, default=0.0, help="seconds between sentences (default 0)")
    args = p.parse_args(argv)
    if (args.soc_model is None) != (args.htp_arch is None) or (args.soc_model and not args.jit):
        p.error("--soc-model and --htp-arch go together, with --jit (the device's chip: `qnn-release socs`)")
    try:
        if args.output.is_dir() or not args.output.parent.is_dir():
            write_wav(args.output, np.zeros(0, np.float32), 1)  # refused in one line, before any graph runs
        chip = {"soc_model": args.soc_model, "htp_arch": args.htp_arch} if args.soc_model else None
        voice = Voice(args.dir, device="cpu" if args.cpu else "jit" if args.jit else None, chip=chip)
        rng = None if args.seed is None else np.random.default_rng(args.seed)
        s = voice.speak(args.text, rng=rng, silence=max(0.0, args.sentence_silence))
        write_wav(args.output, s.audio, s.sample_rate)
    except VoiceInputError as e:
        print(f"speak: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # onnxruntime or espeak-ng refusing: one line, the exit code of a bad run
        print(f"speak: error: {type(e).__name__}: {_clip(str(e), 300)}", file=sys.stderr)
        return 1
    busy = sum(s.seconds.values())
    print(f"{args.output}: {s.audio_seconds:.2f} s of audio, {s.pieces} utterance(s), {s.chunks} decoder run(s) on "
          f"{voice.device}; real-time factor {busy / max(s.audio_seconds, 1e-9):.3f}, first audio after "
          f"{s.first_audio_seconds:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
