"""A model's real samples: pinned files of its kind, turned into graph inputs by a declared front end.

Audio (WAV -> float or int16 scale, resampled, cut into windows with a hop and leading context),
images (decoded, resized, normalised, in the graph's layout) or ``.npz`` tensors. A stateful graph
(``samples.stream``) gets each recording as one stream of consecutive steps; the inputs an output is
carried into start at zeros, and are filled from the previous step by whoever runs the stream.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..matrix.schema import AudioFrontEnd, ImageFrontEnd, Model, Samples, Stream
from . import audio
from .audio import AudioError, read_audio

SAMPLES_VERSION = 1  # bump when a front end changes the arrays it makes
EXTENSIONS = {"audio": audio.EXTENSIONS, "image": (".png", ".jpg", ".jpeg", ".bmp", ".webp"), "npz": (".npz",)}


@dataclass(frozen=True)
class SampleSet:
    """The inputs of one graph made from real samples: one stream per sample (a stateless graph's
    stream has one step), with where they came from."""

    streams: list[tuple[str, list[dict[str, np.ndarray]]]]
    files: dict[str, str]  # sample file -> sha256
    note: str  # what the report and metadata.json say the verification ran on
    stream: Stream | None = None
    argmax: dict[str, float] | None = None  # outputs judged by the class they pick

    @property
    def feeds(self) -> list[dict[str, np.ndarray]]:
        return [f for _, steps in self.streams for f in steps]

    @property
    def digest(self) -> str:
        h = hashlib.sha256(json.dumps({"v": SAMPLES_VERSION, "files": self.files, "argmax": self.argmax,
                                       "stream": self.stream.model_dump(mode="json") if self.stream else None},
                                      sort_keys=True).encode())
        for name, steps in self.streams:
            h.update(name.encode())
            for f in steps:
                for k in sorted(f):
                    h.update(k.encode())
                    h.update(np.ascontiguousarray(f[k]).tobytes())
        return h.hexdigest()

    def as_dict(self) -> dict:
        return {"note": self.note, "files": self.files, "streams": [[n, len(s)] for n, s in self.streams],
                "stateful": self.stream is not None}


def graph_uses(samples: Samples, graph: str, input_names: list[str]) -> bool:
    return samples.feeds(graph, input_names)


def make_samples(model: Model, graph: str, inputs, files: dict[str, Path], outputs=None) -> SampleSet | None:
    """``inputs``/``outputs``: the prepared graph's TensorInfo lists; ``files``: sample name -> verified blob."""
    s = model.samples_for(graph, [t.name for t in inputs])
    if s is None:
        return None
    what = f"{model.name}: samples"
    by_name = {t.name: t for t in inputs}
    fe = s.front_end
    if fe.kind != "npz" and fe.input not in by_name:
        raise ConfigError(f"{what}.front_end.input: graph '{graph}' has no input '{fe.input}'",
                          hint=f"inputs: {', '.join(by_name)}")
    if s.stream is not None:
        for out, inp in s.stream.carry.items():
            if inp not in by_name:
                raise ConfigError(f"{what}.stream.carry.{out}: graph '{graph}' has no input '{inp}'",
                                  hint=f"inputs: {', '.join(by_name)}")
    _check_output_names(s, graph, [o.name for o in outputs] if outputs is not None else None, what)
    from .store import sha256_file

    files = {n: p for n, p in files.items() if n.lower().endswith(EXTENSIONS[fe.kind])}
    if not files:
        raise ConfigError(f"{what}.source: no {fe.kind} file among the source's files",
                          hint=f"{fe.kind} samples are files ending in {', '.join(EXTENSIONS[fe.kind])}")
    for name in getattr(fe, "crops", {}):
        if name not in files:
            raise ConfigError(f"{what}.front_end.crops: '{name}' is not one of the sample files",
                              hint=f"files: {', '.join(sorted(files))}")
    shas = {name: sha256_file(p) for name, p in sorted(files.items())}
    streams: list[tuple[str, list[dict[str, np.ndarray]]]] = []
    for name, path in sorted(files.items()):
        if fe.kind == "audio":
            steps = _audio_steps(fe, path, name, by_name, what)
        elif fe.kind == "image":
            steps = [_image_feed(fe, path, name, by_name, what, box) for box in fe.crops.get(name, [None])]
        elif s.stream is not None:
            steps = _npz_steps(path, name, inputs, set(s.stream.carry.values()), what)
        else:
            steps = [_npz_feed(path, name, inputs, what)]
        if s.stream is not None:
            streams.append((name, steps))
        else:  # stateless: each window or image is a sample of its own
            streams += [(f"{name}#{i}" if len(steps) > 1 else name, [f]) for i, f in enumerate(steps)]
    if not streams:
        raise ConfigError(f"{what}: the sample files give no input", hint="check the files and the front end")
    if s.stream is None and len(streams) > s.max_samples:  # spread over the files, not the first ones only
        idx = np.linspace(0, len(streams) - 1, s.max_samples).round().astype(int)
        streams = [streams[i] for i in sorted(set(idx.tolist()))]
    elif s.stream is not None:
        streams = streams[: s.max_samples]
    kind = {"audio": "recordings", "image": "images", "npz": "tensor files"}[fe.kind]
    n_steps = sum(len(st) for _, st in streams)
    how = f"{len(streams)} streams, {n_steps} steps" if s.stream else f"{n_steps} samples"
    note = (f"real samples: {s.description} ({len(files)} {kind}, {how}; {_where(s.source)}; licence {s.license})")
    mine = {n: v for n, v in s.argmax.items() if outputs is None or n in {o.name for o in outputs}}
    return SampleSet(streams=streams, files=shas, note=note, stream=s.stream, argmax=mine or None)


def _check_output_names(s: Samples, graph: str, outputs: list[str] | None, what: str) -> None:
    """Every output a declared check names exists: a misspelt name would silently switch the check off."""
    if outputs is None:
        return
    named = []  # argmax may name any graph's output: it applies where the graph has it (checked per model)
    if s.stream is not None:
        named += [("stream.carry", n) for n in s.stream.carry] + [("stream.decisions", n) for n in s.stream.decisions]
        named += [("stream.range", n) for n in s.stream.range]
        named += [("stream.max_drift", n) for n in s.stream.max_drift]
        for n in s.stream.max_drift:
            if n not in s.stream.carry:
                raise ConfigError(f"{what}.stream.max_drift.{n}: '{n}' is not a carried output",
                                  hint=f"stream.carry: {', '.join(s.stream.carry)}")
        for n, bounds in s.stream.range.items():
            if len(bounds) != 2 or bounds[0] > bounds[1]:
                raise ConfigError(f"{what}.stream.range.{n}: expected [low, high] with low <= high, got {bounds}")
    for key, n in named:
        if n not in outputs:
            raise ConfigError(f"{what}.{key}: graph '{graph}' has no output '{n}'",
                              hint=f"outputs: {', '.join(outputs)}")


def _where(src) -> str:
    kind = src.kind
    if kind == "parts":
        return ", ".join(_where(sub) for sub in src.sources)
    if kind == "pip":
        return f"pip {src.package}" + (" sdist" if src.archive == "sdist" else "")
    if kind == "hf":
        return f"hf {src.repo}@{src.revision[:12]}"
    if kind == "url":
        return src.url
    return src.path


def _zeros(t) -> np.ndarray:
    return np.zeros(t.shape, dtype=np.dtype(t.dtype))


def read_wav(path: Path, what: str) -> tuple[np.ndarray, int]:
    """Mono float audio in [-1, 1] and its rate (WAV of any PCM width or float, FLAC, Ogg: `audio.read_audio`)."""
    try:
        x, rate, _ = read_audio(path)
    except AudioError as e:
        raise ConfigError(f"{what}: {str(e).removeprefix(path.name + ': ')}", hint=e.hint) from None
    return x, rate


def resample(x: np.ndarray, rate: int, to: int) -> np.ndarray:
    """Band-limited resampling by the FFT (exact for periodic signals; fine for verification inputs)."""
    if rate == to:
        return x
    n = round(len(x) * to / rate)
    spec = np.fft.rfft(x.astype(np.float64))
    keep = min(len(spec), n // 2 + 1)
    out = np.zeros(n // 2 + 1, dtype=complex)
    out[:keep] = spec[:keep]
    return (np.fft.irfft(out, n) * (n / len(x))).astype(np.float32)


def audio_windows(fe: AudioFrontEnd, x: np.ndarray, window: int) -> list[np.ndarray]:
    hop = fe.hop or (window - fe.context)
    if hop <= 0:
        raise ConfigError(f"front_end: hop {hop} (window {window} - context {fe.context}) must be > 0",
                          hint="set front_end.hop")
    x = np.concatenate([np.zeros(fe.context, np.float32), x])
    if len(x) < window:
        x = np.concatenate([x, np.zeros(window - len(x), np.float32)])
    starts = range(0, len(x) - window + 1, hop)
    return [x[s:s + window] for s in list(starts)[: fe.max_steps]]


def _audio_steps(fe: AudioFrontEnd, path: Path, name: str, by_name: dict, what: str) -> list[dict[str, np.ndarray]]:
    t = by_name[fe.input]
    window = fe.window or int(np.prod(t.shape))
    if int(np.prod(t.shape)) != window:
        raise ConfigError(f"{what}.front_end.window: {window} samples do not fit input '{t.name}' {t.shape}",
                          hint=f"the window must be {int(np.prod(t.shape))} samples")
    x, rate = read_wav(path, f"{what}: {name}")
    x = resample(x, rate, fe.sample_rate)
    if fe.scale == "int16":
        x = np.clip(np.round(x * 32768), -32768, 32767)
    steps = []
    for w in audio_windows(fe, x, window):
        feed = {n: _zeros(i) for n, i in by_name.items()}
        feed[t.name] = w.reshape(t.shape).astype(np.dtype(t.dtype))
        steps.append(feed)
    return steps


def _image_feed(fe: ImageFrontEnd, path: Path, name: str, by_name: dict, what: str,
                box: list[int] | None = None) -> dict[str, np.ndarray]:
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError(f"{what}: image samples need Pillow", hint="pip install pillow") from None
    t = by_name[fe.input]
    if len(t.shape) != 4:
        raise ConfigError(f"{what}.front_end: input '{t.name}' {t.shape} is not an image batch [1, C, H, W]")
    c, h, w = (t.shape[1], t.shape[2], t.shape[3]) if fe.layout == "nchw" else (t.shape[3], t.shape[1], t.shape[2])
    a: np.ndarray
    try:
        with Image.open(path) as opened:
            im = opened.convert("L" if fe.channels == "gray" else "RGB")
            if box is not None:
                x0, y0, x1, y1 = box
                if not (x0 < x1 <= im.width and y0 < y1 <= im.height):
                    raise ConfigError(f"{what}.front_end.crops: box {box} is not inside {name} "
                                      f"({im.width}x{im.height})", hint="boxes are [x0, y0, x1, y1] in pixels")
                im = im.crop((x0, y0, x1, y1))
            if fe.resize == "stretch":
                im, width = im.resize((w, h), Image.Resampling.BILINEAR), w
            else:
                width = max(1, min(w, int(np.ceil(h * im.width / im.height))))
                im = im.resize((width, h), Image.Resampling.BILINEAR)
            a = np.asarray(im, dtype=np.float32)
    except OSError as e:
        raise ConfigError(f"{what}: {name} is not an image Pillow reads: {e}") from None
    a = a[:, :, None] if a.ndim == 2 else a
    if fe.channels == "bgr":
        a = a[:, :, ::-1]
    if a.shape[2] != c:
        raise ConfigError(f"{what}.front_end.channels: {fe.channels} gives {a.shape[2]} channels, input "
                          f"'{t.name}' takes {c}")
    mean = np.resize(np.asarray(fe.mean, np.float32), c)
    std = np.resize(np.asarray(fe.std, np.float32), c)
    a = (a * fe.scale - mean) / std
    full = np.full((h, w, c), fe.pad, np.float32)
    full[:, : a.shape[1]] = a[:, :w]
    arr = full.transpose(2, 0, 1)[None] if fe.layout == "nchw" else full[None]
    feed = {n: _zeros(i) for n, i in by_name.items()}
    feed[t.name] = arr.astype(np.dtype(t.dtype))
    return feed


def _npz_arrays(path: Path, name: str, what: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{what}: {name} is not a readable .npz: {e}") from None
    return arrays


def _npz_feed(path: Path, name: str, inputs, what: str) -> dict[str, np.ndarray]:
    arrays = _npz_arrays(path, name, what)
    feed = {}
    for t in inputs:
        if t.name not in arrays:
            raise ConfigError(f"{what}: {name} has no array for input '{t.name}'", hint=f"arrays: {', '.join(arrays)}")
        if list(arrays[t.name].shape) != list(t.shape):
            raise ConfigError(f"{what}: {name}: input {t.name} has shape {list(arrays[t.name].shape)}, "
                              f"the graph takes {t.shape}")
        feed[t.name] = arrays[t.name].astype(np.dtype(t.dtype))
    return feed


def _npz_steps(path: Path, name: str, inputs, carried: set[str], what: str) -> list[dict[str, np.ndarray]]:
    """A stream from one .npz: arrays [steps, *shape] give each step its value, arrays shaped as the input are
    fed at every step, and a carried input left out starts at zeros (run_stream feeds it after that)."""
    arrays = _npz_arrays(path, name, what)
    per_step: dict[str, np.ndarray | None] = {}
    counts: set[int] = set()
    for t in inputs:
        a = arrays.get(t.name)
        if a is None:
            if t.name in carried:
                per_step[t.name] = None
                continue
            raise ConfigError(f"{what}: {name} has no array for input '{t.name}'", hint=f"arrays: {', '.join(arrays)}")
        if list(a.shape) == list(t.shape):
            per_step[t.name] = a
        elif list(a.shape[1:]) == list(t.shape) and a.shape[0] > 0:
            per_step[t.name] = a
            counts.add(a.shape[0])
        else:
            raise ConfigError(f"{what}: {name}: input {t.name} has shape {list(a.shape)}; the graph takes {t.shape} "
                              f"(one step) or [steps, {', '.join(map(str, t.shape))}] (a stream)")
    if len(counts) > 1:
        raise ConfigError(f"{what}: {name}: the stepped arrays have different step counts ({sorted(counts)})",
                          hint="every array with a leading steps axis needs the same number of steps")
    steps = counts.pop() if counts else 1
    dtype = {t.name: np.dtype(t.dtype) for t in inputs}
    shape = {t.name: t.shape for t in inputs}
    return [{k: (np.zeros(shape[k], dtype[k]) if a is None else
                 (a[i] if list(a.shape) != list(shape[k]) else a).astype(dtype[k]))
             for k, a in per_step.items()} for i in range(steps)]


def run_stream(run_step, steps: list[dict[str, np.ndarray]], carry: dict[str, str], output_names: list[str]
               ) -> tuple[list[dict[str, np.ndarray]], list[list[np.ndarray]]]:
    """Run ``steps`` in order, feeding each carried output into its input at the next step, as an app
    does; returns the feeds as run and the outputs of every step."""
    fed: list[dict[str, np.ndarray]] = []
    outs: list[list[np.ndarray]] = []
    state: dict[str, np.ndarray] = {}
    for feed in steps:
        f = dict(feed)
        for out_name, inp in carry.items():
            if out_name in state:
                f[inp] = state[out_name].reshape(f[inp].shape).astype(f[inp].dtype)
        got = run_step(f)
        fed.append(f)
        outs.append(got)
        state = {n: np.asarray(v) for n, v in zip(output_names, got) if n in carry}
    return fed, outs


def calibration_feeds(sample_set: SampleSet, cpu_step, output_names: list[str]) -> list[dict[str, np.ndarray]]:
    """The feeds a quantizer should see: a stream's steps with the state CPU carries into them."""
    if sample_set.stream is None:
        return sample_set.feeds
    return [f for _, steps in sample_set.streams
            for f in run_stream(cpu_step, steps, sample_set.stream.carry, output_names)[0]]
