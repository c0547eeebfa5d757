"""Whisper behind the recipe interface: what the generic stages call for a model with
``verify: {kind: transcript}`` (encoder + decoder graphs, verified by what a chip's graphs transcribe)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import ArchiveExtras, ArchivePart, ChipCheck, DeviceFeeds, Recipe, TwinExtras, TwinPart
from .results import CHECK_VERSION, TranscriptFigures, TranscriptNumbers, TranscriptVerify, transcript_of

if TYPE_CHECKING:
    import argparse

    import numpy as np

    from ...compile.records import TargetRecord
    from ...matrix.schema import LoadedMatrix, Model

PROMPT_STEPS = 4  # the multilingual prompt: <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>


class WhisperRecipe(Recipe):
    kind = "transcript"
    verify_model = TranscriptVerify
    result_model = TranscriptNumbers
    device_model = TranscriptFigures
    check_version = CHECK_VERSION
    pending_note = "verified by transcript once every graph for this chip is built"
    inputs_note = "the model's clips (transcript verification)"
    graph_samples = False  # the archive ships a clip and what the chip transcribed from it

    def check_inputs(self, loaded: LoadedMatrix, model: Model, export: Path | None = None) -> None:
        from .check import load_clips

        load_clips(loaded.root, transcript_of(model).clips)

    def inputs_digest(self, loaded: LoadedMatrix, model: Model) -> str | None:
        """The clips by content (each clip's sha256 and text); the recordings are pinned in the matrix."""
        import hashlib
        import json

        from .check import load_clips

        clips = [[c.name, c.sha256, c.text] for c in load_clips(loaded.root, transcript_of(model).clips)]
        return hashlib.sha256(json.dumps(clips).encode()).hexdigest()

    def calibration(self, loaded: LoadedMatrix, model: Model, graph: str, export: Path
                    ) -> list[dict[str, np.ndarray]] | None:
        """A speech model calibrates on its clips, decoded on CPU: the encoder on their features, the decoder
        on every prompt step and text steps spread over them."""
        from .check import calibration, load_clips

        settings = transcript_of(model)
        return calibration(export, load_clips(loaded.root, settings.clips), graph, model.calibration.samples,
                           settings.language, settings.max_tokens)

    def check_chips(self, check: ChipCheck) -> list[TargetRecord]:
        from .check import check_transcripts

        return check_transcripts(check)

    def verification(self, model: Model, record: TargetRecord) -> dict | None:
        """Verified by what the chip's graphs transcribe from the model's clips (or its recordings)."""
        if not record.recipe:
            return None
        from ...compile.records import REAL, verdict

        v = verdict(record)
        rec = transcript_of(model).recordings
        return {"inputs": "real" if v == REAL else "generated", "verdict": v,
                "source": rec.description if rec else transcript_of(model).clips,
                "samples": len(record.recipe["clips"]), "passed_by": None,
                "description": ("recorded speech (transcript against CPU and the references)" if rec
                                else "espeak-ng speech clips (transcript against CPU)")}

    def archive_extras(self, part: ArchivePart) -> ArchiveExtras:
        from .package import archive_extras, readme_context

        members, transcript = archive_extras(part.report, part.model, part.soc, part.records, part.stem, part.root)
        return ArchiveExtras(members=members, result=transcript,
                             readme=readme_context(part.stem, members, part.binaries))

    def device_feeds(self, loaded: LoadedMatrix, export: Path, model: Model, graph: str, cache: Path
                     ) -> DeviceFeeds | None:
        """The encoder on each recording's mel features, the decoder on the steps CPU decodes them with
        (every prompt step, text steps spread over them)."""
        from .check import calibration, verify_clips

        clips, recorded = verify_clips(loaded, model, cache)
        feeds = calibration(export, clips, graph, model.calibration.samples,
                            transcript_of(model).language, transcript_of(model).max_tokens)
        what = "recordings" if recorded else "synthetic clips"
        return DeviceFeeds(names=[f"{graph} input {i}" for i in range(len(feeds))], feeds=feeds,
                           note=f"{len(clips)} {what} of the model ({graph} inputs as CPU decodes them)", real=recorded)

    def device_summary(self, runs: dict[str, Any], result: dict[str, Any]) -> dict[str, Any] | None:
        """The real-time factor and time to first token from the encoder run and decoder step on the device and
        the steps the chip build took on its verification clips."""
        if not {"encoder", "decoder"} <= runs.keys():
            return None
        clips = [c for c in result.get("clips") or [] if c.get("audio_seconds")]
        if not clips:
            return None
        enc, dec = runs["encoder"].latency.median_ms, runs["decoder"].latency.median_ms
        audio = sum(c["audio_seconds"] for c in clips)
        steps = sum(int(c["decoder_steps"]) for c in clips)
        busy_ms = len(clips) * enc + steps * dec
        return {"real_time_factor": round(busy_ms / (audio * 1000.0), 4),
                "time_to_first_token_ms": round(enc + PROMPT_STEPS * dec, 3), "clips": len(clips),
                "audio_seconds": round(audio, 3), "decoder_steps": steps}

    def page_rows(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        from .results import TranscriptNumbers

        return page_rows(TranscriptNumbers.model_validate(result))

    def device_text(self, figures: dict[str, Any]) -> str:
        return (f"real-time factor {figures['real_time_factor']:.3f}, first token "
                f"{figures['time_to_first_token_ms']:.1f} ms")

    def measures(self, result: dict[str, Any]) -> dict[str, float]:
        wer = result.get("wer")
        return {"wer": float(wer)} if isinstance(wer, (int, float)) else {}

    def twin(self, part: TwinPart) -> TwinExtras | None:
        from .twin import twin_extras

        return twin_extras(part)

    def register_cli(self, sub: argparse._SubParsersAction) -> None:
        from . import cli

        cli.register(sub)


def page_rows(t: TranscriptNumbers) -> list[tuple[str, str]]:
    """The release page's rows: HTP transcripts against CPU's and the clips, what the emulator took."""
    line = (f"{t.agree}/{len(t.clips)} equal to CPU (WER vs CPU {t.wer_vs_cpu:.2f}, vs the clips {t.wer:.2f}"
            + (f"; the export on CPU: WER {t.cpu_wer_all:.2f} over {t.cpu_clips_all} recordings"
               if t.cpu_wer_all is not None else "")
            + (f"; differs only by near-ties: {', '.join(f'{n.cpu.strip()}/{n.htp.strip()}' for n in t.near_ties)}"
               if t.near_ties else "") + ")")
    rtf = (f", real-time factor {t.emulator_real_time_factor:.1f}"
           if t.emulator_real_time_factor is not None else "")
    return [("transcripts", line),
            ("emulator", f"{t.emulator_seconds_per_encoder_run:.1f} s per encoder run, "
                         f"{t.emulator_seconds_per_decoder_step:.2f} s per decoder step{rtf} (x86-64 HTP emulator, "
                         "not a device)")]
