"""A Piper voice behind the recipe interface: what the generic stages call for a model with
``verify: {kind: speech}`` (encoder + decoder graphs, the duration predictor on the host, verified by what a
chip's graphs say: against CPU window by window, and as heard by a listener)."""

from __future__ import annotations

from .. import ArchiveExtras, ArchivePart, ChipCheck, Recipe
from .check import CHECK_VERSION


class PiperRecipe(Recipe):
    kind = "speech"
    check_version = CHECK_VERSION
    pending_note = "verified by what it says once both graphs for this chip are built"
    inputs_note = "the model's sentences (speech verification: waveform against CPU and a listener's round trip)"
    graph_samples = False  # the archive ships a sentence and what these binaries said

    def check_inputs(self, loaded, model) -> None:
        from .export import sentences_of

        sentences_of((loaded.root / model.verify.sentences).resolve())

    def check_chips(self, check: ChipCheck):
        from .check import check_speech

        return check_speech(check)

    def verification(self, model, record) -> dict | None:
        if not record.speech:
            return None
        from ...compile.records import verdict

        s = record.speech
        return {"inputs": "real", "verdict": verdict(record), "source": model.verify.sentences,
                "samples": len(s["sentences"]), "passed_by": None,
                "description": (f"sentences spoken on the emulator: every decoder window against CPU (worst "
                                f"{s['worst_chunk_snr_db']} dB), heard by Whisper base (WER {s['wer_vs_cpu']} "
                                "against CPU's audio)")}

    def archive_extras(self, part: ArchivePart) -> ArchiveExtras:
        from .package import archive_extras, readme_context

        members, speech = archive_extras(part.report, part.model, part.soc, part.records, part.stem)
        return ArchiveExtras(members=members, metadata={"speech": speech},
                             readme=readme_context(part.stem, members, part.binaries))

    def register_cli(self, sub) -> None:
        from . import cli

        cli.register(sub)
