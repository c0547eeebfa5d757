"""Verification by what a voice says: every chip's compiled encoder + decoder speak sentences on the HTP emulator,
and each build is judged (a) by its waveform against CPU's, decoder window by decoder window on the same latent
input (SNR and max abs), the encoder on the same ids, and (b) by a round trip: what a listener (our Whisper base
export, on CPU) hears in the chip's audio against what it hears in CPU's audio of the same sentence, and against
the sentence itself.

Per chip this costs minutes (a 256-frame decoder window, 3 s of audio, is about 20 s on the emulator), so each
chip says ``verify.per_chip`` sentences, chips taking turns through the list; CPU says every sentence once per
model. Results are cached by the targets' keys and the sentences.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ...compile.records import FAILED, REAL, TargetRecord
from ...compile.verify import DEFAULT_THRESHOLDS
from ...errors import QnnReleaseError, VerifyError
from ...sources.samples import resample
from ...util.files import write_atomic, write_json
from ...util.isolated import map_stoppable
from ...util.metrics import compare, worst
from ...util.text import clip, step_done
from .. import ChipCheck
from ..whisper.check import wer
from .export import sentences_of, snr_db
from .results import CHECK_VERSION, speech_of
from .runtime import Voice, write_wav

if TYPE_CHECKING:
    pass

SAMPLE_WAV = "speech-sample.wav"  # in each target's folder: the chip's audio of its first sentence
LISTENER_RATE = 16000
DEFAULT_MIN_SNR_DB = {"fp16": 20.0, "w8a16": 10.0, "int8": 5.0}
DEFAULT_MAX_WER = {"fp16": 0.05, "w8a16": 0.15, "int8": 0.3}
DEFAULT_MAX_ABS = {"fp16": 0.25, "w8a16": 0.5, "int8": 0.75}  # fp16 measured: 0.085 at worst (v73)


@dataclass(frozen=True, kw_only=True)
class ChipJob:
    """One chip build's check, as the worker takes it (plain values: it crosses to a spawned process)."""

    key: str
    soc: str
    precision: str
    export_dir: str
    listener: str
    chip: dict
    sentences: list[str]
    cpu: dict[str, str]  # sentence -> what the listener hears in CPU's audio of it
    graphs: dict[str, dict]  # graph -> folder, context_onnx, binaries
    wav_dir: str  # where the chip's audio of its first sentence is kept (the archive's sample)
    model: str = ""  # its name, for the progress lines


@dataclass(frozen=True, kw_only=True)
class ChipResult:
    sentences: list[dict]
    wer_vs_cpu: float
    wer: float
    worst_chunk_snr_db: float
    worst_chunk_max_abs: float
    parity: dict[str, dict]  # graph -> the worst parity over its runs
    emulator_seconds_per_encoder_run: float
    emulator_seconds_per_decoder_run: float
    real_time_factor: float  # emulator seconds (encoder + decoder + host) per second of audio
    first_audio_seconds: float  # on the emulator: the call to the first window's audio, first sentence
    sample_wav: str | None = None
    version: int = CHECK_VERSION
    key: str = ""
    soc: str = ""
    precision: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def listen(listener, audio: np.ndarray, rate: int) -> str:
    return listener.transcribe_long(resample(audio, rate, LISTENER_RATE)).text


def _chip_folder(job: ChipJob, export: Path, folder: Path) -> Path:
    for graph, files in job.graphs.items():
        target = Path(files["folder"]).resolve()
        for name in files["binaries"]:
            os.symlink(target / name, folder / name)
        os.symlink(target / files["context_onnx"], folder / f"{graph}_ctx.onnx")
    os.symlink(export / "duration.onnx", folder / "duration.onnx")
    voice = json.loads((export / "voice.json").read_text())
    voice["chip"] = job.chip
    (folder / "voice.json").write_text(json.dumps(voice))
    return folder


def _check_chip(job: ChipJob) -> ChipResult:
    """In a worker: the chip's sentences spoken on the emulator, each graph run also on CPU on the same inputs,
    and the audio heard by the listener."""
    from ...compile.qnn_ep import quiet_native
    from ..whisper.runtime import Whisper

    started = time.monotonic()
    export = Path(job.export_dir).resolve()
    cpu = Voice(export, device="cpu")
    listener = Whisper(job.listener, device="cpu", language="en")
    parity: dict[str, list] = {"encoder": [], "decoder": []}
    chunks: list[dict] = []

    def observe(kind, feed, outputs):
        session = cpu.encoder if kind == "encoder" else cpu.decoder
        types = {i.name: i.type for i in session.get_inputs()}
        fed = {k: (v.astype(np.int64) if types.get(k) == "tensor(int64)" else v) for k, v in feed.items()}
        ref = session.run(None, fed)
        parity[kind].append(compare(np.concatenate([np.ravel(r) for r in ref]),
                                    np.concatenate([np.ravel(o) for o in outputs])))
        if kind == "decoder":
            r, g = np.ravel(ref[0]), np.ravel(outputs[0])
            chunks.append({"snr_db": snr_db(r, g), "max_abs": round(float(np.max(np.abs(r - g))), 6)})

    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="piper-check.") as tmp:
        folder = _chip_folder(job, export, Path(tmp))
        with quiet_native():
            htp = Voice(folder, device="htp")
        for i, text in enumerate(job.sentences):
            first_chunk = len(chunks)
            speech = htp.speak(text, observe=observe)
            heard = listen(listener, speech.audio, speech.sample_rate)
            mine = chunks[first_chunk:]
            out.append({"text": text, "cpu_heard": job.cpu[text], "htp_heard": heard,
                        "wer_vs_cpu": wer([(job.cpu[text], heard)]), "wer": wer([(text, heard)]),
                        "audio_seconds": round(speech.audio_seconds, 3), "pieces": speech.pieces,
                        "decoder_runs": speech.chunks, "seconds": speech.seconds,
                        "first_audio_seconds": speech.first_audio_seconds,
                        "worst_chunk_snr_db": min(c["snr_db"] for c in mine) if mine else None,
                        "worst_chunk_max_abs": max(c["max_abs"] for c in mine) if mine else None})
            if i == 0:
                sample = speech
            step_done(f"{job.model} {job.soc} {job.precision}", "sentence", i + 1, len(job.sentences), started)
    Path(job.wav_dir).mkdir(parents=True, exist_ok=True)  # every sentence said: the first is the archive's sample
    write_wav(Path(job.wav_dir) / f"{job.key}.wav", sample.audio, sample.sample_rate)
    audio = sum(s["audio_seconds"] for s in out)
    busy = sum(sum(s["seconds"].values()) for s in out)
    n_enc, n_dec = sum(s["pieces"] for s in out), sum(s["decoder_runs"] for s in out)
    return ChipResult(
        key=job.key, soc=job.soc, precision=job.precision, sentences=out,
        wer_vs_cpu=wer([(s["cpu_heard"], s["htp_heard"]) for s in out]),
        wer=wer([(s["text"], s["htp_heard"]) for s in out]),
        worst_chunk_snr_db=min(c["snr_db"] for c in chunks), worst_chunk_max_abs=max(c["max_abs"] for c in chunks),
        parity={g: worst(p).as_dict() for g, p in parity.items() if p},
        emulator_seconds_per_encoder_run=round(sum(s["seconds"].get("encoder", 0) for s in out) / max(n_enc, 1), 3),
        emulator_seconds_per_decoder_run=round(sum(s["seconds"].get("decoder", 0) for s in out) / max(n_dec, 1), 3),
        real_time_factor=round(busy / audio, 3) if audio else 0.0,
        first_audio_seconds=out[0]["first_audio_seconds"] or 0.0,
        sample_wav=f"{job.key}.wav", seconds=round(time.monotonic() - started, 3))


def _safe(job: ChipJob) -> ChipResult | str:
    try:
        return _check_chip(job)
    except QnnReleaseError as e:
        return f"the speech check could not run: {e}"
    except Exception as e:  # one chip's failure stays on its targets
        return f"the speech check could not run: {type(e).__name__}: {clip(str(e), 300)}"


def cpu_heard(export: Path, listener: Path, sentences: list[str]) -> dict[str, str]:
    """What the listener hears in CPU's audio of every sentence (the exported graphs, no noise)."""
    from ..whisper.runtime import Whisper

    voice = Voice(export, device="cpu")
    ear = Whisper(listener, device="cpu", language="en")
    heard = {}
    for text in sentences:
        s = voice.speak(text)
        heard[text] = listen(ear, s.audio, s.sample_rate)
    return heard


def _key(graph_keys: list[str], sentences: list[str], listener: Path) -> str:
    spec = {"v": CHECK_VERSION, "targets": sorted(graph_keys), "sentences": sentences,
            "listener": hashlib.sha256((listener / "encoder.onnx").read_bytes()[:1 << 20]).hexdigest()}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def check_speech(check: ChipCheck) -> list[TargetRecord]:
    """Verify every chip build of ``check.groups`` (a model with ``verify.kind: speech``) by what it says: the
    records as judged, with ``speech`` and per-graph ``parity``; a chip whose audio leaves CPU's (a decoder window
    under ``min_snr_db``, or heard differently beyond ``max_wer``) fails both its targets (exit code 7)."""
    model, loaded, verify = check.model, check.loaded, speech_of(check.model)
    sentences = sentences_of((loaded.root / verify.sentences).resolve())
    listener = check.export / verify.listener
    turns: list[tuple[str, str]] = [
        (s.name, p) for chip in model.chips for s in loaded.catalog.expand(chip) for p in model.precisions
        if not all(model.excluded(s.name, p, g.name) for g in model.graphs)]
    store = check.cache / "speech"
    pending: list[ChipJob] = []
    results: dict[tuple[str, str], ChipResult | str | None] = {}
    cpu = None
    for (soc, precision), rs in sorted(check.groups.items()):
        turn = turns.index((soc, precision))
        n = min(verify.per_chip, len(sentences))
        mine = [sentences[(turn * n + i) % len(sentences)] for i in range(n)]
        key = _key(cast("list[str]", [r.key for r in rs]), mine, listener)  # built targets: each has its key
        cached = store / f"{key}.json"
        if cached.is_file() and not check.force:
            try:
                results[(soc, precision)] = ChipResult(**json.loads(cached.read_text()))
                continue
            except (OSError, ValueError, TypeError):
                cached.unlink(missing_ok=True)
        if check.from_store:
            results[(soc, precision)] = None
            continue
        if cpu is None:
            if check.progress is not None:
                check.progress.info(f"{model.name}: speaking {len(sentences)} sentence(s) on CPU for the listener")
            cpu = cpu_heard(check.export, listener, sentences)
        s = loaded.catalog.get(soc)
        pending.append(ChipJob(
            key=key, soc=soc, precision=precision, export_dir=str(check.export), listener=str(listener),
            chip={"name": soc, "soc_model": s.soc_model, "htp_arch": s.htp_arch}, sentences=mine, cpu=cpu,
            graphs={r.graph: {"folder": str(check.folders[r.id]), "context_onnx": r.context_onnx,
                              "binaries": r.binaries} for r in rs}, wav_dir=str(store), model=model.name))
    if pending and check.progress is not None:
        check.progress.info(f"{model.name}: {len(pending)} chip build(s) speak {verify.per_chip} sentence(s) "
                            "each on the HTP emulator (about 20 s per 3 s of audio)")
    for job, result in map_stoppable(_safe, pending, check.jobs, check.isolate):
        if isinstance(result, ChipResult):
            write_json(store / f"{job.key}.json", result.as_dict())
        results[(job.soc, job.precision)] = result
    export_check = _read(check.export / "export_check.json")
    for group, result in results.items():  # the sample goes with the targets (their folders are what is packaged)
        wav = store / result.sample_wav if isinstance(result, ChipResult) and result.sample_wav else None
        if wav is not None and wav.is_file():
            for r in check.groups[group]:
                write_atomic(check.folders[r.id] / SAMPLE_WAV, wav.read_bytes())
    return [r for group, result in results.items() for r in _apply(model, check.groups[group], result, export_check)]


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _apply(model, rs: list[TargetRecord], result: ChipResult | str | None, export_check: dict | None
           ) -> list[TargetRecord]:
    precision = rs[0].precision
    v = model.verify
    min_snr = v.min_snr_db.get(precision, DEFAULT_MIN_SNR_DB[precision])
    max_abs = v.max_abs.get(precision, DEFAULT_MAX_ABS[precision])
    max_wer = v.max_wer.get(precision, DEFAULT_MAX_WER[precision])
    min_cosine = DEFAULT_THRESHOLDS[precision].min_cosine
    out = []
    for r in rs:
        if result is None:
            out.append(r.with_(verified=False, verify_note="no speech verification in the store (--from-store "
                                                           "never runs the emulator)"))
            continue
        r = r.with_(verify_kind="speech")
        if isinstance(result, str):
            out.append(_fail(r, VerifyError(f"{r.id}: {result}")))
            continue
        summary = {k: val for k, val in result.as_dict().items() if k != "parity"}
        cpu_wer = wer([(x["text"], x["cpu_heard"]) for x in result.sentences])
        summary.update(min_snr_db=min_snr, max_abs=max_abs, max_wer=max_wer, min_encoder_cosine=min_cosine,
                       cpu_wer=cpu_wer, export_check={k: (export_check or {}).get(k) for k in
                                                      ("sentences", "worst_snr_db", "min_snr_db", "passed")})
        encoder = result.parity.get("encoder") or {}
        failures: dict[str, list[str]] = {"waveform": [], "round trip": []}
        if result.worst_chunk_snr_db < min_snr:
            failures["waveform"].append(f"a decoder window at SNR {result.worst_chunk_snr_db} dB < "
                                        f"verify.min_snr_db.{precision} {min_snr}")
        if result.worst_chunk_max_abs > max_abs:
            failures["waveform"].append(f"a decoder window off by {result.worst_chunk_max_abs} > "
                                        f"verify.max_abs.{precision} {max_abs}")
        if encoder.get("cosine", 1.0) < min_cosine:
            failures["waveform"].append(f"the encoder at cosine {encoder['cosine']:.6f} < {min_cosine} on the same ids")
        worst = max(result.sentences, key=lambda x: x["wer_vs_cpu"])
        if result.wer_vs_cpu > max_wer:
            failures["round trip"].append(
                f"the listener hears WER {result.wer_vs_cpu:.3f} > verify.max_wer.{precision} {max_wer} against CPU's "
                f"audio ({clip(worst['text'], 50)!r}: HTP {worst['htp_heard']!r}, CPU {worst['cpu_heard']!r})")
        if result.wer > cpu_wer + max_wer:
            failures["round trip"].append(f"the sentences are heard at WER {result.wer:.3f} in the chip's audio, "
                                          f"{cpu_wer:.3f} in CPU's (more than {max_wer} apart)")
        summary["passed_by"] = [name for name, why in failures.items() if not why]
        parity = result.parity.get(r.graph)
        r = r.with_(recipe={"kind": "speech", **summary}, **({"parity": parity} if parity is not None else {}),
                    emulator_seconds=(result.emulator_seconds_per_encoder_run if r.graph == "encoder"
                                      else result.emulator_seconds_per_decoder_run))
        why = [w for ws in failures.values() for w in ws]
        if why:
            hint = (f"raise verify.min_snr_db/max_abs/max_wer.{precision} if this precision is expected to drift; "
                    "`qnn-release speak` lets you listen")
            out.append(_fail(r, VerifyError(f"{r.id}: the chip's speech leaves CPU's: {'; '.join(why)}", hint=hint)))
        else:
            out.append(r.with_(verified=True, verified_on=REAL))
    return out


def _fail(r: TargetRecord, e: QnnReleaseError) -> TargetRecord:
    return r.with_(status=FAILED, verified=False, error=str(e), exit_code=e.exit_code)
