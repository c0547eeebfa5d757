"""What a Whisper archive carries beside the binaries: the tokenizer, the mel filter bank, the decoding
configuration, the reference decoder as ``transcribe.py``, a sample clip with its transcript, and the numbers
of the transcript verification for ``metadata.json``."""

from __future__ import annotations

import json
from pathlib import Path

from ...compile.records import BuildReport, TargetRecord
from ...errors import PackageError
from . import runtime

FILES = ("tokenizer.json", "mel_filters.npy")


def archive_extras(report: BuildReport, model, soc, records: list[TargetRecord], top: str,
                   root: Path) -> tuple[list[tuple[str, Path | bytes]], dict | None]:
    """(archive members, ``transcript`` numbers) for one chip's Whisper archive."""
    export = report.exports.get(model.name)
    if export is None or not all((Path(export) / f).is_file() for f in (*FILES, "whisper.json")):
        raise PackageError(f"{model.name}: the export (tokenizer.json, mel_filters.npy, whisper.json) is gone "
                           "from the cache", hint="run `qnn-release build` again (nothing recompiles)")
    export = Path(export)
    config = json.loads((export / "whisper.json").read_text())
    config["chip"] = {"name": soc.name, "soc_model": soc.soc_model, "htp_arch": soc.htp_arch}
    config["max_tokens"] = model.verify.max_tokens  # as the sample transcript was made
    members: list[tuple[str, Path | bytes]] = [(f"{top}/{f}", export / f) for f in FILES]
    members += [(f"{top}/whisper.json", (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()),
                (f"{top}/transcribe.py", Path(runtime.__file__).read_bytes())]
    transcript = records[0].transcript
    if not transcript:
        return members, None
    first = transcript["clips"][0]
    clips_file = (root / model.verify.clips).resolve()
    wav = clips_file.parent / first["file"]
    if wav.is_file():  # a smoke test on a device: this clip and what this chip's binaries said
        members += [(f"{top}/sample/{first['file']}", wav),
                    (f"{top}/sample/{Path(first['file']).stem}.txt", (first["htp"] + "\n").encode())]
    numbers = {k: transcript[k] for k in ("agree", "wer_vs_cpu", "max_wer_vs_cpu", "wer",
                                          "emulator_seconds_per_encoder_run", "emulator_seconds_per_decoder_step")}
    numbers["verify_seconds"] = transcript["seconds"]
    numbers.update({k: transcript.get(k) for k in ("cpu_wer_all", "cpu_clips_all")})
    numbers["recorded"] = model.verify.recordings is not None
    keys = ("file", "reference", "cpu", "htp", "wer_vs_cpu", "wer", "encoder_seconds", "decoder_steps",
            "decoder_seconds")
    numbers["clips"] = [{k: c[k] for k in keys} | {"audio_seconds": c.get("audio_seconds")}
                        for c in transcript["clips"]]
    check = transcript.get("export_check") or {}
    numbers["export_check"] = {"tool": check.get("tool"), "equal": check.get("equal", 0),
                               "total": check.get("total", 0), "skipped": check.get("skipped")}
    return members, numbers


def readme_context(top: str, members: list[tuple[str, Path | bytes]], binaries: list[str]) -> dict:
    """What the archive README's Whisper section shows: the sample clip and the binaries."""
    names = [n[len(top) + 1:] for n, _ in members]
    sample = next((n for n in names if n.startswith("sample/") and n.endswith(".wav")), None)
    text = next((n for n in names if n.startswith("sample/") and n.endswith(".txt")), None)
    return {"whisper": True, "sample": sample, "sample_text": text, "binaries": binaries}
