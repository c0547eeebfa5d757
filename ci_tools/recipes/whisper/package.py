"""What a Whisper archive carries beside the binaries: the tokenizer, the mel filter bank, the decoding
configuration, the reference decoder as ``transcribe.py``, a sample clip with its transcript, and the numbers
of the transcript verification for ``metadata.json``."""

from __future__ import annotations

import json
from pathlib import Path

from ...compile.records import BuildReport, TargetRecord
from ...errors import PackageError
from . import runtime
from .check import window_audio

FILES = ("tokenizer.json", "mel_filters.npy")


def archive_extras(report: BuildReport, model, soc, records: list[TargetRecord], top: str,
                   root: Path) -> tuple[list[tuple[str, Path | bytes]], dict | None]:
    """(archive members, ``transcript`` numbers) for one chip's Whisper archive."""
    found = report.exports.get(model.name)
    if found is None or not all((Path(found) / f).is_file() for f in (*FILES, "whisper.json")):
        raise PackageError(f"{model.name}: the export (tokenizer.json, mel_filters.npy, whisper.json) is gone "
                           "from the cache", hint="run `qnn-release build` again (nothing recompiles)")
    export = Path(found)
    config = json.loads((export / "whisper.json").read_text())
    config["chip"] = {"name": soc.name, "soc_model": soc.soc_model, "htp_arch": soc.htp_arch}
    config["max_tokens"] = model.verify.max_tokens  # as the sample transcript was made
    members: list[tuple[str, Path | bytes]] = [(f"{top}/{f}", export / f) for f in FILES]
    members += [(f"{top}/whisper.json", (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()),
                (f"{top}/transcribe.py", Path(runtime.__file__).read_bytes())]
    transcript = records[0].recipe
    if not transcript:
        return members, None
    first = transcript["clips"][0]
    members += _sample(top, first, (root / model.verify.clips).resolve().parent)
    numbers = {k: transcript[k] for k in ("agree", "wer_vs_cpu", "max_wer_vs_cpu", "wer",
                                          "emulator_seconds_per_encoder_run", "emulator_seconds_per_decoder_step")}
    numbers["verify_seconds"] = transcript["seconds"]
    numbers["emulator_seconds_load"] = transcript.get("emulator_seconds_load")
    audio = sum(c.get("audio_seconds") or 0 for c in transcript["clips"])
    busy = sum(c["encoder_seconds"] + c["decoder_seconds"] for c in transcript["clips"])
    numbers["emulator_real_time_factor"] = round(busy / audio, 3) if audio else None
    numbers.update({k: transcript.get(k) for k in ("cpu_wer_all", "cpu_clips_all", "near_ties", "near_tie_nats")})
    numbers["recorded"] = model.verify.recordings is not None
    keys = ("file", "reference", "cpu", "htp", "wer_vs_cpu", "wer", "encoder_seconds", "decoder_steps",
            "decoder_seconds")
    numbers["clips"] = [{k: c[k] for k in keys} | {"audio_seconds": c.get("audio_seconds")}
                        for c in transcript["clips"]]
    check = transcript.get("export_check") or {}
    numbers["export_check"] = {"tool": check.get("tool"), "equal": check.get("equal", 0),
                               "total": check.get("total", 0), "skipped": check.get("skipped")}
    return members, numbers


def _sample(top: str, window: dict, folder: Path) -> list[tuple[str, Path | bytes]]:
    """A smoke test on a device: the first window this chip transcribed (a clip, or clips packed into one
    window as the check ran them) and what its binaries said."""
    names = window.get("files") or [window["file"]]
    paths = [folder / n for n in names]
    if not all(p.is_file() for p in paths):
        return []
    stem = Path(names[0]).stem + (f"-and-{len(names) - 1}-more" if len(names) > 1 else "")
    wav: Path | bytes = paths[0] if len(paths) == 1 else _wav_bytes(window_audio([str(p) for p in paths]))
    return [(f"{top}/sample/{stem}.wav", wav), (f"{top}/sample/{stem}.txt", (window["htp"] + "\n").encode())]


def _wav_bytes(audio) -> bytes:
    import io
    import wave

    import numpy as np

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(runtime.SAMPLE_RATE)
        w.writeframes((np.clip(audio, -1, 1) * 32767).round().astype("<i2").tobytes())
    return buf.getvalue()


def readme_context(top: str, members: list[tuple[str, Path | bytes]], binaries: list[str]) -> dict:
    """The archive README's Whisper section (its template), the sample clip and the binaries."""
    names = [n[len(top) + 1:] for n, _ in members]
    sample = next((n for n in names if n.startswith("sample/") and n.endswith(".wav")), None)
    text = next((n for n in names if n.startswith("sample/") and n.endswith(".txt")), None)
    return {"recipe_readme": "recipes/whisper_readme.md.j2", "sample": sample, "sample_text": text,
            "binaries": binaries,
            "recipe_sample_row": "a clip and what these binaries transcribed from it, for a smoke test on a device"}
