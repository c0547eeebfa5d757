"""Whisper behind the recipe interface: what the generic stages call for a model with
``verify: {kind: transcript}`` (encoder + decoder graphs, verified by what a chip's graphs transcribe)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import ArchiveExtras, ArchivePart, ChipCheck, DeviceFeeds, Recipe, TwinExtras, TwinPart
from .check import CHECK_VERSION

PROMPT_STEPS = 4  # the multilingual prompt: <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>


class WhisperRecipe(Recipe):
    kind = "transcript"
    check_version = CHECK_VERSION
    pending_note = "verified by transcript once every graph for this chip is built"
    inputs_note = "the model's clips (transcript verification)"
    graph_samples = False  # the archive ships a clip and what the chip transcribed from it

    def check_inputs(self, loaded, model, export=None) -> None:
        from .check import load_clips

        load_clips(loaded.root, model.verify.clips)

    def inputs_digest(self, loaded, model) -> str | None:
        """The clips by content (each clip's sha256 and text); the recordings are pinned in the matrix."""
        import hashlib
        import json

        from .check import load_clips

        clips = [[c.name, c.sha256, c.text] for c in load_clips(loaded.root, model.verify.clips)]
        return hashlib.sha256(json.dumps(clips).encode()).hexdigest()

    def calibration(self, loaded, model, graph: str, export: Path):
        """A speech model calibrates on its clips, decoded on CPU: the encoder on their features, the decoder
        on every prompt step and text steps spread over them."""
        from .check import calibration, load_clips

        return calibration(export, load_clips(loaded.root, model.verify.clips), graph, model.calibration.samples,
                           model.verify.language, model.verify.max_tokens)

    def check_chips(self, check: ChipCheck):
        from .check import check_transcripts

        return check_transcripts(check)

    def verification(self, model, record) -> dict | None:
        """Verified by what the chip's graphs transcribe from the model's clips (or its recordings)."""
        if not record.transcript:
            return None
        from ...compile.records import REAL, verdict

        v = verdict(record)
        rec = model.verify.recordings
        return {"inputs": "real" if v == REAL else "generated", "verdict": v,
                "source": rec.description if rec else model.verify.clips,
                "samples": len(record.transcript["clips"]), "passed_by": None,
                "description": ("recorded speech (transcript against CPU and the references)" if rec
                                else "espeak-ng speech clips (transcript against CPU)")}

    def archive_extras(self, part: ArchivePart) -> ArchiveExtras:
        from .package import archive_extras, readme_context

        members, transcript = archive_extras(part.report, part.model, part.soc, part.records, part.stem, part.root)
        return ArchiveExtras(members=members, metadata={"transcript": transcript},
                             readme=readme_context(part.stem, members, part.binaries))

    def device_feeds(self, loaded, report, model, graph: str, cache: Path) -> DeviceFeeds | None:
        """The encoder on each recording's mel features, the decoder on the steps CPU decodes them with
        (every prompt step, text steps spread over them)."""
        if model.name not in report.exports:
            return None
        from .check import calibration, verify_clips

        clips, recorded = verify_clips(loaded, model, cache)
        feeds = calibration(Path(report.exports[model.name]), clips, graph, model.calibration.samples,
                            model.verify.language, model.verify.max_tokens)
        what = "recordings" if recorded else "synthetic clips"
        return DeviceFeeds(names=[f"{graph} input {i}" for i in range(len(feeds))], feeds=feeds,
                           note=f"{len(clips)} {what} of the model ({graph} inputs as CPU decodes them)", real=recorded)

    def device_summary(self, runs: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
        """The real-time factor and time to first token from the encoder run and decoder step on the device and
        the steps the chip build took on its verification clips."""
        transcript = metadata.get("transcript")
        if not transcript or not {"encoder", "decoder"} <= runs.keys():
            return {}
        clips = [c for c in transcript.get("clips") or [] if c.get("audio_seconds")]
        if not clips:
            return {}
        enc, dec = runs["encoder"].latency.median_ms, runs["decoder"].latency.median_ms
        audio = sum(c["audio_seconds"] for c in clips)
        steps = sum(int(c["decoder_steps"]) for c in clips)
        busy_ms = len(clips) * enc + steps * dec
        return {"speech": {"real_time_factor": round(busy_ms / (audio * 1000.0), 4),
                           "time_to_first_token_ms": round(enc + PROMPT_STEPS * dec, 3), "clips": len(clips),
                           "audio_seconds": round(audio, 3), "decoder_steps": steps}}

    def twin(self, part: TwinPart) -> TwinExtras | None:
        from .twin import twin_extras

        return twin_extras(part)

    def register_cli(self, sub) -> None:
        from . import cli

        cli.register(sub)
