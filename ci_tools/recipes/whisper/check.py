"""Verification by text: every chip's compiled encoder + decoder transcribe clips on the HTP emulator,
and the transcripts are compared with ONNX Runtime's on CPU (word error rate) and with what the clips say.

Per chip this costs minutes (whisper-base: ~150 s per encoder run on the emulator, seconds per decoder
step), so each chip transcribes ``verify.per_chip`` clips, chips taking turns through the list; the CPU
transcribes every clip once per model. Results are cached by the targets' keys and the clips.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import yaml

from ...compile.records import FAILED, GENERATED, REAL, TargetRecord
from ...errors import ConfigError, QnnReleaseError, VerifyError
from ...sources.store import sha256_file
from ...util.files import write_json
from ...util.isolated import map_stoppable
from ...util.metrics import compare, worst
from ...util.text import clip as clipped
from ...util.text import step_done
from .. import ChipCheck
from .results import CHECK_VERSION, transcript_of
from .runtime import CHUNK_SECONDS, SAMPLE_RATE, Whisper, WhisperInputError, log_softmax, read_wav

if TYPE_CHECKING:
    pass

GAP_SECONDS = 0.5  # silence between two clips packed into one window
DEFAULT_MAX_WER = {"fp16": 0.0, "w8a16": 0.1, "int8": 0.25}
# A near-tie: where HTP's transcript leaves CPU's, CPU (decoding along HTP's tokens) rates HTP's token within this
# many nats of its own best. Measured: Whisper base fp16 on SM8650, "Four Queen of Clothes" for CPU's "Cloves"
# (' Cl' for ' Clo'): 0.0093 nats, probabilities within 1 %. 0.1 nats is probabilities within 10.5 %.
NEAR_TIE_NATS = 0.1


@dataclass(frozen=True, kw_only=True)
class ChipJob:
    """One chip build's check, as the worker takes it (plain values: it crosses to a spawned process)."""

    key: str  # the check's cache key
    soc: str
    precision: str
    export_dir: str
    language: str
    max_tokens: int
    cpu: dict[str, str]  # clip name -> CPU's transcript
    cpu_wer: float | None
    chip: dict  # name, soc_model, htp_arch: written into the folder's whisper.json
    clips: list[dict]  # windows: paths, names, name, text
    graphs: dict[str, dict]  # graph -> folder, context_onnx, binaries
    model: str = ""  # its name, for the progress lines


@dataclass(frozen=True, kw_only=True)
class ChipResult:
    """What a chip build transcribed and how it compares, as the worker returns it and the cache keeps it
    (``transcripts/<key>.json``)."""

    clips: list[dict]
    wer_vs_cpu: float
    parity: dict[str, dict]  # graph -> the worst parity over the window's runs
    emulator_seconds_per_encoder_run: float
    emulator_seconds_per_decoder_step: float
    version: int = CHECK_VERSION
    key: str = ""
    soc: str = ""
    precision: str = ""
    agree: int = 0
    wer: float = 0.0
    emulator_seconds_load: float | None = None
    cpu_wer_all: float | None = None
    cpu_clips_all: int | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Clip:
    path: Path
    text: str
    sha256: str
    label: str | None = None  # a recording's file name in its source (its blob is named by its sha256)

    @property
    def name(self) -> str:
        return self.label or self.path.name


def verify_clips(loaded, model, cache: Path) -> tuple[list[Clip], bool]:
    """What the chips transcribe: the model's pinned recordings (real speech, True), else its clips."""
    rec = model.verify.recordings
    if rec is None:
        return load_clips(loaded.root, model.verify.clips), False
    from ...sources.store import SourceStore

    files = SourceStore(cache, loaded.root).fetch_source(model, rec.source)
    out = []
    for name, text in rec.texts.items():
        try:
            read_wav(files[name])
        except WhisperInputError as e:
            raise ConfigError(f"{model.name}: verify.recordings: {name}: {e}") from None
        out.append(Clip(path=files[name], text=text, sha256=sha256_file(files[name]), label=_label(name, rec.texts)))
    return out, True


def _label(name: str, all_names) -> str:
    """A recording's name in reports: its file name, with its folder when another file has the same name."""
    short = Path(name).name
    clash = [n for n in all_names if Path(n).name == short]
    return short if len(clash) == 1 else f"{Path(name).parent.name}/{short}"


def load_clips(root: Path, clips_file: str) -> list[Clip]:
    """The clips of a clips.yaml, each read once to refuse what Whisper cannot take (not 16 kHz mono PCM)."""
    path = (root / clips_file).resolve()
    try:
        data = yaml.safe_load(path.read_text())
    except OSError:
        raise ConfigError(f"verify.clips: {path} does not exist", hint="a clips.yaml relative to the repository") \
            from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    items = data.get("clips") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{path}: expected a list `clips` of {{file, text}}", hint="see clips/whisper/clips.yaml")
    out = []
    for i, c in enumerate(items):
        if not isinstance(c, dict) or not isinstance(c.get("file"), str) or not isinstance(c.get("text"), str):
            raise ConfigError(f"{path}: clips[{i}]: expected {{file: name.wav, text: what it says}}")
        wav = path.parent / c["file"]
        try:
            read_wav(wav)
        except WhisperInputError as e:
            raise ConfigError(f"{path}: clips[{i}]: {e}") from None
        out.append(Clip(path=wav, text=c["text"], sha256=sha256_file(wav)))
    return out


def chip_clips(clips: list[Clip], turn: int, per_chip: int) -> list[Clip]:
    """The clips of the chip that is ``turn``-th in the matrix: chips take turns through the list."""
    n = min(per_chip, len(clips))
    return [clips[(turn * n + i) % len(clips)] for i in range(n)]


def pack_windows(clips: list[Clip], pack: bool) -> list[list[Clip]]:
    """The clips in Whisper's 30-second windows, in order: as many as fit each window (with ``GAP_SECONDS`` of
    silence between them) when ``pack``, else one clip per window. The encoder always runs on a whole
    window, padded: packing does in one run what took one per clip."""
    out: list[list[Clip]] = []
    used = 0.0
    for c in clips:
        length = len(read_wav(c.path)) / SAMPLE_RATE
        if pack and out and used + GAP_SECONDS + length <= CHUNK_SECONDS:
            out[-1].append(c)
            used += GAP_SECONDS + length
        else:
            out.append([c])
            used = length
    return out


def window_audio(paths: list[str]) -> np.ndarray:
    gap = np.zeros(int(GAP_SECONDS * SAMPLE_RATE), dtype=np.float32)
    parts = [read_wav(p) for p in paths]
    return np.concatenate([x for i, a in enumerate(parts) for x in ((gap, a) if i else (a,))])


# -- word error rate ---------------------------------------------------------------------------


ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
SPELLED = {"mr": "mister", "mrs": "missus", "dr": "doctor", "ok": "okay"}


def _spell(token: str) -> list[str]:
    if re.fullmatch(r"[0-9]{1,2}", token):
        n = int(token)
        return [ONES[n]] if n < 20 else [TENS[n // 10]] + ([ONES[n % 10]] if n % 10 else [])
    return [SPELLED.get(token, token)]


def words(text: str) -> list[str]:
    """The words both sides are compared on, a stated subset of Whisper's English normaliser: lower case,
    punctuation dropped (apostrophes kept inside words, hyphens split), numbers 0-99 spelled out ("7" and
    "seven", "21" and "twenty one" are equal) and mr/mrs/dr/ok spelled out."""
    raw = re.sub(r"[^\w\s']|(?<!\w)'|'(?!\w)", " ", text.lower()).split()
    return [w for t in raw for w in _spell(t)]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + deletions + insertions, reference words): Levenshtein distance over words."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)], len(ref)


def wer(pairs: list[tuple[str, str]]) -> float:
    errors = total = 0
    for ref, hyp in pairs:
        e, n = word_errors(ref, hyp)
        errors, total = errors + e, total + n
    return round(errors / total, 4) if total else 0.0


# -- calibration (w8a16, int8) -----------------------------------------------------------------


def calibration(export_dir: Path, clips: list[Clip], graph: str, decoder_samples: int,
                language: str = "en", max_tokens: int = 128) -> list[dict[str, np.ndarray]]:
    """Real inputs of ``graph``: the clips' mel features (encoder); for the decoder, every prompt step of
    every clip and text steps spread over the clips, ``decoder_samples`` in all (more if the prompt steps are)."""
    model = Whisper(export_dir, device="cpu", language=language)
    feeds: dict[str, list[dict]] = {"encoder": [], "decoder": []}

    def keep(kind, feed, _outputs):
        feeds[kind].append(dict(feed))

    for clip in clips:
        model.transcribe(read_wav(clip.path), max_tokens=max_tokens, observe=keep)
    if graph == "encoder":
        return feeds["encoder"]
    # Every prompt step of every clip (start of transcript, language, task, no timestamps), then text steps
    # spread over the clips up to `decoder_samples`. The prompt steps' activations are unlike a text
    # token's, and the cache they write is read at every later step: calibrated without offset 1 (12
    # steps spread over 4 clips), Whisper base w8a16 clipped it and read "The weather" as "The winner".
    steps = feeds["decoder"]
    prompt = [i for i, f in enumerate(steps) if int(f["offset"][0]) < len(model.prompt)]
    text = [i for i, f in enumerate(steps) if int(f["offset"][0]) >= len(model.prompt)]
    n = min(max(decoder_samples - len(prompt), 0), len(text))
    spread = [text[i] for i in np.unique(np.linspace(0, len(text) - 1, n).round().astype(int))] if n else []
    return [steps[i] for i in sorted(prompt + spread)]


# -- the check ---------------------------------------------------------------------------------


def _chip_folder(job: ChipJob, export_dir: Path, folder: Path) -> Path:
    """A folder the decoder reads: the chip's binaries and stubs beside the export's tokenizer and config."""
    for graph, files in job.graphs.items():
        target = Path(files["folder"]).resolve()
        for name in files["binaries"]:
            os.symlink(target / name, folder / name)
        os.symlink(target / files["context_onnx"], folder / f"{graph}_ctx.onnx")
    for name in ("tokenizer.json", "mel_filters.npy"):
        os.symlink(export_dir / name, folder / name)
    config = json.loads((export_dir / "whisper.json").read_text())
    config["chip"] = job.chip
    (folder / "whisper.json").write_text(json.dumps(config))
    return folder


def _check_chip(job: ChipJob) -> ChipResult:
    """In a worker: transcribe the chip's clips with its binaries on the emulator and on CPU."""
    started = time.monotonic()
    export_dir = Path(job.export_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="whisper-check.") as tmp:
        folder = _chip_folder(job, export_dir, Path(tmp))
        from ...compile.qnn_ep import quiet_native

        loading = time.monotonic()
        with quiet_native():  # the QNN library's banner on loading: not on the build's terminal
            htp = Whisper(folder, device="htp", language=job.language)
        load_seconds = time.monotonic() - loading
        cpu = Whisper(export_dir, device="cpu", language=job.language)
        parity: dict[str, list] = {"encoder": [], "decoder": []}
        htp_logits: dict[int, np.ndarray] = {}  # this window's HTP logits by decoder step (offset)

        def observe(kind, feed, outputs):
            ref = (cpu.encoder if kind == "encoder" else cpu.decoder).run(None, feed)
            parity[kind].append(compare(np.concatenate([np.ravel(r) for r in ref]),
                                        np.concatenate([np.ravel(o) for o in outputs])))
            if kind == "decoder":
                htp_logits[int(feed["offset"][0])] = outputs[0]

        clips = []
        for c in job.clips:  # a window: one clip, or several packed
            audio = window_audio(c["paths"])
            said_on_cpu = job.cpu[c["name"]] if len(c["paths"]) == 1 else \
                cpu.transcribe(audio, max_tokens=job.max_tokens).text
            htp_logits.clear()
            got = htp.transcribe(audio, max_tokens=job.max_tokens, observe=observe)
            departures = [] if got.text == said_on_cpu else \
                _divergence(cpu, audio, got, job.max_tokens, htp_logits)
            clips.append({"file": c["name"], "files": c["names"], "reference": c["text"], "cpu": said_on_cpu,
                          "htp": got.text,
                          "htp_tokens": got.tokens, "encoder_seconds": round(got.encoder_seconds, 3),
                          "decoder_steps": len(got.decoder_seconds),
                          "audio_seconds": round(len(audio) / SAMPLE_RATE, 3),
                          "decoder_seconds": round(sum(got.decoder_seconds), 3),
                          "htp_ended": got.ended, "divergent_steps": departures})
            step_done(f"{job.model} {job.soc} {job.precision}", "clip window", len(clips), len(job.clips), started)
    for c in clips:
        c["wer_vs_cpu"] = wer([(c["cpu"], c["htp"])])
        c["wer"] = wer([(c["reference"], c["htp"])])
    steps = sum(c["decoder_steps"] for c in clips)
    return ChipResult(
        key=job.key, soc=job.soc, precision=job.precision, clips=clips, agree=sum(c["cpu"] == c["htp"] for c in clips),
        wer_vs_cpu=wer([(c["cpu"], c["htp"]) for c in clips]), wer=wer([(c["reference"], c["htp"]) for c in clips]),
        emulator_seconds_per_encoder_run=round(float(np.mean([c["encoder_seconds"] for c in clips])), 3),
        emulator_seconds_per_decoder_step=round(sum(c["decoder_seconds"] for c in clips) / max(steps, 1), 4),
        emulator_seconds_load=round(load_seconds, 3), parity={g: worst(p).as_dict() for g, p in parity.items() if p},
        cpu_wer_all=job.cpu_wer, cpu_clips_all=len(job.cpu), seconds=round(time.monotonic() - started, 3))


def _divergence(cpu: Whisper, audio: np.ndarray, htp, max_tokens: int, htp_logits: dict) -> list[dict]:
    """Where HTP's transcript leaves CPU's: CPU decodes the window along HTP's tokens (its own encoder output
    and caches), and at each step where HTP's token is not CPU's best, says both, CPU's gap between them
    (natural log-probability; 0 is a tie) and HTP's own (from its logits at that step: information, the rule
    reads CPU's). Costs CPU time only: one encoder run and the steps."""
    follow = htp.tokens + ([cpu.eot] if htp.ended else [])
    forced = cpu.transcribe(audio, max_tokens=max_tokens, follow=follow)
    name = lambda t: cpu.tokenizer.decode([t], skip_special_tokens=False)  # noqa: E731
    out = []
    for d in forced.departures:
        best, token = d["best"], d["token"]
        htp_gap = None
        if d["offset"] in htp_logits:
            lp = log_softmax(cpu.scores(htp_logits[d["offset"]], first=d["offset"] == len(cpu.prompt) - 1))
            htp_gap = _finite(lp[token] - lp[best])
        out.append({"offset": d["offset"], "cpu": name(best), "htp": name(token), "gap": _finite(d["gap"]),
                    "htp_gap": htp_gap, "end_of_text": cpu.eot in (best, token)})
    return out


def _finite(x: float) -> float | None:
    """A gap for JSON: None where a token is suppressed (an infinite gap)."""
    return round(float(x), 4) if np.isfinite(x) else None


def _cpu_transcripts(export_dir: Path, clips: list[Clip], language: str, max_tokens: int) -> dict:
    model = Whisper(export_dir, device="cpu", language=language)
    texts = {c.name: model.transcribe(read_wav(c.path), max_tokens=max_tokens).text for c in clips}
    return {"texts": texts, "wer": wer([(c.text, texts[c.name]) for c in clips]), "clips": len(clips)}


def _key(graph_keys: list[str], packed: list[list[Clip]], language: str, max_tokens: int) -> str:
    spec = {"v": CHECK_VERSION, "targets": sorted(graph_keys), "language": language, "max_tokens": max_tokens,
            "windows": [[[c.name, c.sha256, c.text] for c in w] for w in packed]}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def check_transcripts(check: ChipCheck) -> list[TargetRecord]:
    """Verify every chip build of ``check.groups`` (a model with ``verify.kind: transcript``) by what it
    transcribes: the records as judged, saying ``verified``, ``transcript`` and per-graph ``parity``; a chip
    whose emulator transcript is too far from the CPU's fails both its targets (exit code 7)."""
    model, loaded, verify = check.model, check.loaded, transcript_of(check.model)
    clips, recorded = verify_clips(loaded, model, check.cache)
    # every chip build of the matrix takes its turn, whatever the filters of this build
    turns: list[tuple[str, str]] = [
        (s.name, p) for chip in model.chips for s in loaded.catalog.expand(chip) for p in model.precisions
        if not all(model.excluded(s.name, p, g.name) for g in model.graphs)]
    store = check.cache / "transcripts"
    pending: list[ChipJob] = []
    results: dict[tuple[str, str], ChipResult | str | None] = {}
    cpu = None
    for (soc, precision), rs in sorted(check.groups.items()):
        mine = pack_windows(chip_clips(clips, turns.index((soc, precision)), verify.per_chip), verify.pack)
        # built targets: each has its key
        key = _key(cast("list[str]", [r.key for r in rs]), mine, verify.language, verify.max_tokens)
        cached = store / f"{key}.json"
        if cached.is_file() and not check.force:
            try:
                results[(soc, precision)] = ChipResult(**json.loads(cached.read_text()))
                continue
            except (OSError, ValueError, TypeError):  # unreadable or of another shape: checked again
                cached.unlink(missing_ok=True)
        if check.from_store:
            results[(soc, precision)] = None
            continue
        if cpu is None:
            cpu = _cpu_transcripts(check.export, clips, verify.language, verify.max_tokens)
        pending.append(_job(check, soc, precision, mine, key, cpu))
    for job, result in _run(pending, check.jobs, check.progress, model.name, check.isolate):
        if isinstance(result, ChipResult):
            write_json(store / f"{job.key}.json", result.as_dict())
        results[(job.soc, job.precision)] = result
    export_check = _export_check(check.export)
    return [r for group, result in results.items()
            for r in _apply(model, check.groups[group], result, export_check, recorded)]


def _job(check: ChipCheck, soc: str, precision: str, windows: list[list[Clip]], key: str, cpu: dict) -> ChipJob:
    """One chip's check as the worker takes it: its build's records are ``check.groups[(soc, precision)]``."""
    model, s, verify = check.model, check.loaded.catalog.get(soc), transcript_of(check.model)
    rs = check.groups[(soc, precision)]
    return ChipJob(
        key=key, soc=soc, precision=precision, export_dir=str(check.export), language=verify.language,
        max_tokens=verify.max_tokens, cpu=cpu["texts"], cpu_wer=cpu["wer"],
        chip={"name": soc, "soc_model": s.soc_model, "htp_arch": s.htp_arch},
        clips=[{"paths": [str(c.path) for c in w], "names": [c.name for c in w],
                "name": " + ".join(c.name for c in w), "text": " ".join(c.text for c in w)} for w in windows],
        graphs={r.graph: {"folder": str(check.folders[r.id]), "context_onnx": r.context_onnx,
                          "binaries": r.binaries} for r in rs}, model=model.name)


def _run(pending: list[ChipJob], jobs: int, progress, model: str, isolate: bool = False):
    if not pending:
        return
    if progress is not None:
        windows_ = sum(len(j.clips) for j in pending)
        clips = sum(len(w["paths"]) for j in pending for w in j.clips)
        progress.info(f"{model}: transcribing {clips} clip(s) in {windows_} window(s) on the HTP emulator for "
                      f"{len(pending)} chip build(s) (minutes per window: one encoder run each)")
    yield from map_stoppable(_safe, pending, jobs, isolate)


def _safe(job: ChipJob) -> ChipResult | str:
    """The check's result, or one line saying why it could not run (the emulator refused a binary ...)."""
    try:
        return _check_chip(job)
    except (QnnReleaseError, WhisperInputError) as e:
        return str(e)
    except Exception as e:
        return f"the transcript check could not run: {type(e).__name__}: {clipped(str(e), 300)}"


def _export_check(export_dir: Path) -> dict | None:
    try:
        return json.loads((export_dir / "export_check.json").read_text())
    except (OSError, ValueError):
        return None


def _apply(model, rs: list[TargetRecord], result: ChipResult | str | None, export_check: dict | None,
           recorded: bool = False) -> list[TargetRecord]:
    """The chip's records as the transcript check judged them."""
    precision = rs[0].precision
    limit = model.verify.max_wer_vs_cpu.get(precision, DEFAULT_MAX_WER[precision])
    near_ties, not_near = _near_ties(result) if isinstance(result, ChipResult) else (None, None)
    out = []
    for r in rs:
        if result is None:  # not judged (verify_kind unset): the next build that can run the check judges it
            out.append(r.with_(verified=False, verify_note="no transcript verification in the store (--from-store "
                                                           "never runs the emulator)"))
            continue
        r = r.with_(verify_kind="transcript")
        if isinstance(result, str):
            out.append(_fail(r, VerifyError(f"{r.id}: {result}")))
            continue
        summary = {k: v for k, v in result.as_dict().items() if k not in ("parity",)}
        summary["max_wer_vs_cpu"] = limit
        summary["export_check"] = export_check
        parity = result.parity.get(r.graph)
        r = r.with_(recipe={"kind": "transcript", **summary}, **({"parity": parity} if parity is not None else {}),
                    emulator_seconds=(result.emulator_seconds_per_encoder_run if r.graph == "encoder"
                                      else result.emulator_seconds_per_decoder_step))
        if near_ties is not None:
            r = r.with_(recipe={"kind": "transcript", **summary, "near_ties": near_ties,
                                "near_tie_nats": NEAR_TIE_NATS})
        if result.wer_vs_cpu > limit and near_ties is None:
            worst_clip = max(result.clips, key=lambda c: c["wer_vs_cpu"])
            r = _fail(r, VerifyError(
                f"{r.id}: the emulator transcript differs from CPU: WER {result.wer_vs_cpu:.3f} > {limit} "
                f"({worst_clip['file']}: HTP {worst_clip['htp']!r}, CPU {worst_clip['cpu']!r}"
                f"{'; ' + not_near if not_near else ''})",
                hint=f"raise verify.max_wer_vs_cpu.{precision} if this precision is expected to drift, "
                     "or check the calibration"))
        else:
            # espeak-ng clips are synthetic speech: verified, but on real samples only with recordings
            r = r.with_(verified=True, verified_on=REAL if recorded else GENERATED)
        out.append(r)
    return out


def _near_ties(result: ChipResult) -> tuple[list[dict] | None, str | None]:
    """(near-ties, None) where HTP's transcript differs from CPU's only through near-ties, else (None, why not).
    In every differing window: HTP ended its text itself (not at the token limit), each step where HTP's token
    is not the one CPU rates best (decoding along HTP's tokens) is within NEAR_TIE_NATS of it and is not an end
    of text (an early or a late end drops or adds words: never a near-tie), and the two transcripts are no more
    words apart than there are such steps."""
    differing = [c for c in result.clips if c["wer_vs_cpu"] > 0]
    if not differing:
        return None, None
    if any("divergent_steps" not in c for c in result.clips):
        return None, "checked before near-ties were looked for"
    ties = []
    for c in differing:
        steps = c["divergent_steps"]
        where = f"{c['file']}: "
        if not c.get("htp_ended"):
            return None, where + "HTP stopped at the token limit, not at the end of its text"
        if not steps:
            return None, where + "no step where HTP left CPU's best token"
        for d in steps:
            what = f"step {d['offset']}: HTP {d['htp']!r} for CPU's {d['cpu']!r}"
            if d.get("end_of_text"):
                return None, f"{where}{what}: an end of text is not a near-tie"
            if d["gap"] is None or d["gap"] > NEAR_TIE_NATS:
                gap = "a token CPU never picks" if d["gap"] is None else f"{d['gap']} nats"
                return None, f"{where}{what}: {gap}, more than a near-tie ({NEAR_TIE_NATS})"
        edits, _ = word_errors(c["cpu"], c["htp"])
        if edits > len(steps):
            return None, f"{where}{edits} words differ for {len(steps)} near-tie step(s)"
        ties += [{"file": c["file"], **{k: d[k] for k in ("offset", "cpu", "htp", "gap", "htp_gap")}} for d in steps]
    return ties, None


def _fail(r: TargetRecord, e: QnnReleaseError) -> TargetRecord:
    return r.with_(status=FAILED, verified=False, error=str(e), exit_code=e.exit_code)


__all__ = ["Clip", "calibration", "check_transcripts", "chip_clips", "load_clips", "wer", "word_errors"]
