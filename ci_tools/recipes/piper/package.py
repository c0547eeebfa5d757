"""What a voice's archive carries beside the binaries: the duration predictor (CPU), ``voice.json`` with the
chip, the reference runtime as ``speak.py``, a sentence with the WAV these binaries said it as, and the numbers of
the speech verification for ``metadata.json``."""

from __future__ import annotations

import json
from pathlib import Path

from ...compile.records import BuildReport, TargetRecord
from ...errors import PackageError
from . import runtime
from .check import SAMPLE_WAV

KEYS = ("wer_vs_cpu", "max_wer", "wer", "worst_chunk_snr_db", "worst_chunk_max_abs", "min_snr_db", "passed_by",
        "max_abs", "cpu_wer",
        "emulator_seconds_per_encoder_run", "emulator_seconds_per_decoder_run", "export_check")
SENTENCE_KEYS = ("text", "cpu_heard", "htp_heard", "wer_vs_cpu", "wer", "audio_seconds", "pieces", "decoder_runs",
                 "worst_chunk_snr_db", "worst_chunk_max_abs")


def archive_extras(report: BuildReport, model, soc, records: list[TargetRecord], top: str
                   ) -> tuple[list[tuple[str, Path | bytes]], dict | None]:
    found = report.exports.get(model.name)
    if found is None or not all((Path(found) / f).is_file() for f in ("duration.onnx", "voice.json")):
        raise PackageError(f"{model.name}: the export (duration.onnx, voice.json) is gone from the cache",
                           hint="run `qnn-release build` again (nothing recompiles)")
    export = Path(found)
    voice = json.loads((export / "voice.json").read_text())
    voice["chip"] = {"name": soc.name, "soc_model": soc.soc_model, "htp_arch": soc.htp_arch}
    members: list[tuple[str, Path | bytes]] = [
        (f"{top}/duration.onnx", export / "duration.onnx"),
        (f"{top}/voice.json", (json.dumps(voice, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()),
        (f"{top}/speak.py", Path(runtime.__file__).read_bytes())]
    speech = records[0].recipe
    if not speech:
        return members, None
    first = speech["sentences"][0]
    wav = report.path.parent / records[0].id / SAMPLE_WAV
    if not wav.is_file():
        raise PackageError(f"{records[0].id}: no {SAMPLE_WAV} (what these binaries said) in the target's folder",
                           hint="run `qnn-release build` again: the speech check writes it")
    members += [(f"{top}/sample/sentence.wav", wav), (f"{top}/sample/sentence.txt", (first["text"] + "\n").encode())]
    numbers = {k: speech[k] for k in KEYS}
    numbers["sentences"] = [{k: s[k] for k in SENTENCE_KEYS} for s in speech["sentences"]]
    numbers["emulator_real_time_factor"] = speech["real_time_factor"]
    numbers["emulator_first_audio_seconds"] = speech["first_audio_seconds"]
    numbers["verify_seconds"] = speech["seconds"]
    return members, numbers


def readme_context(top: str, members: list[tuple[str, Path | bytes]], binaries: list[str]) -> dict:
    names = [n[len(top) + 1:] for n, _ in members]
    return {"recipe_readme": "recipes/piper_readme.md.j2", "binaries": binaries,
            "sample": next((n for n in names if n.endswith(".wav")), None),
            "sample_text": next((n for n in names if n.startswith("sample/") and n.endswith(".txt")), None),
            "recipe_sample_row": "a sentence and the WAV these binaries said it as (HTP emulator), for a smoke test"}
