"""A Piper voice behind the recipe interface: what the generic stages call for a model with
``verify: {kind: speech}`` (encoder + decoder graphs, the duration predictor on the host, verified by what a
chip's graphs say: against CPU window by window, and as heard by a listener)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import ArchiveExtras, ArchivePart, ChipCheck, DeviceFeeds, Recipe, TwinExtras, TwinPart
from .results import CHECK_VERSION, SpeechFigures, SpeechNumbers, SpeechVerify, speech_of

if TYPE_CHECKING:
    import argparse

    import numpy as np

    from ...compile.records import TargetRecord
    from ...matrix.schema import LoadedMatrix, Model


class PiperRecipe(Recipe):
    kind = "speech"
    verify_model = SpeechVerify
    result_model = SpeechNumbers
    device_model = SpeechFigures
    check_version = CHECK_VERSION
    pending_note = "verified by what it says once both graphs for this chip are built"
    inputs_note = "the model's sentences (speech verification: waveform against CPU and a listener's round trip)"
    graph_samples = False  # the archive ships a sentence and what these binaries said

    def check_inputs(self, loaded: LoadedMatrix, model: Model, export: Path | None = None) -> None:
        """The sentences, each one the voice can say (its phonemes, its words' lengths), and the listener, before
        any chip compiles."""
        from ...errors import ConfigError
        from .export import sentences_of
        from .runtime import VoiceInputError, read_voice, text_to_ids

        path = (loaded.root / speech_of(model).sentences).resolve()
        sentences = sentences_of(path)
        if export is None:
            return
        try:
            voice = read_voice(export)
            for text in sentences:
                text_to_ids(text, voice)
        except VoiceInputError as e:
            raise ConfigError(f"{model.name}: verify.sentences: {path.name}: {e}") from None
        listener = export / speech_of(model).listener
        if not (listener / "whisper.json").is_file():
            raise ConfigError(f"{model.name}: verify.listener: the export has no {speech_of(model).listener}/ with a "
                              "speech recognizer's graphs", hint="export one with `--listener WHISPER_FOLDER`")

    def inputs_digest(self, loaded: LoadedMatrix, model: Model) -> str | None:
        import hashlib

        return hashlib.sha256((loaded.root / speech_of(model).sentences).resolve().read_bytes()).hexdigest()

    def check_chips(self, check: ChipCheck) -> list[TargetRecord]:
        from .check import check_speech

        return check_speech(check)

    def verification(self, model: Model, record: TargetRecord) -> dict | None:
        if not record.recipe:
            return None
        from ...compile.records import verdict

        s = record.recipe
        return {"inputs": "real", "verdict": verdict(record), "source": speech_of(model).sentences,
                "samples": len(s["sentences"]), "passed_by": None,
                "description": (f"sentences spoken on the emulator: every decoder window against CPU (worst "
                                f"{s['worst_chunk_snr_db']} dB), heard by Whisper base (WER {s['wer_vs_cpu']} "
                                "against CPU's audio)")}

    def archive_extras(self, part: ArchivePart) -> ArchiveExtras:
        from .package import archive_extras, readme_context

        members, speech = archive_extras(part.report, part.model, part.soc, part.records, part.stem)
        return ArchiveExtras(members=members, result=speech,
                             readme=readme_context(part.stem, members, part.binaries))

    def calibration(self, loaded: LoadedMatrix, model: Model, graph: str, export: Path
                    ) -> list[dict[str, np.ndarray]] | None:
        """A quantized graph calibrates on the model's sentences as CPU says them."""
        return _feeds(loaded, model, graph, export)[1]

    def device_feeds(self, loaded: LoadedMatrix, export: Path, model: Model, graph: str, cache: Path
                     ) -> DeviceFeeds | None:
        """The graph's inputs as CPU says the model's sentences: the encoder's ids, the decoder's windows."""
        from .. import DeviceFeeds

        sentences, feeds = _feeds(loaded, model, graph, export)
        return DeviceFeeds(names=[f"{graph} input {i}" for i in range(len(feeds))], feeds=feeds, real=True,
                           note=f"{sentences} sentences of the model ({graph} inputs as CPU says them)")

    def device_summary(self, runs: dict[str, Any], result: dict[str, Any]) -> dict[str, Any] | None:
        """Real-time factor and time to first audio from the encoder run and decoder window on the device and
        the runs the chip build took on its sentences."""
        if not {"encoder", "decoder"} <= runs.keys():
            return None
        said = result["sentences"]
        enc, dec = runs["encoder"].latency.median_ms, runs["decoder"].latency.median_ms
        audio = sum(s["audio_seconds"] for s in said)
        n_enc, n_dec = sum(s["pieces"] for s in said), sum(s["decoder_runs"] for s in said)
        if not audio:
            return None
        return {"real_time_factor": round((n_enc * enc + n_dec * dec) / (audio * 1000.0), 4),
                "time_to_first_audio_ms": round(enc + dec, 3), "sentences": len(said),
                "audio_seconds": round(audio, 3), "encoder_runs": n_enc, "decoder_windows": n_dec}

    def page_rows(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        s = SpeechNumbers.model_validate(result)
        return [("speech", f"{len(s.sentences)} sentences: every decoder window at {s.worst_chunk_snr_db:.1f} dB SNR "
                           f"or more against CPU (bound {s.min_snr_db:.0f} dB); heard by the listener: WER vs CPU's "
                           f"audio {s.wer_vs_cpu:.2f}, vs the sentences {s.wer:.2f}"),
                ("emulator", f"{s.emulator_seconds_per_decoder_run:.1f} s per decoder window, real-time factor "
                             f"{s.emulator_real_time_factor:.1f}, first audio after "
                             f"{s.emulator_first_audio_seconds:.1f} s (x86-64 HTP emulator, not a device)")]

    def device_text(self, figures: dict[str, Any]) -> str:
        return (f"real-time factor {figures['real_time_factor']:.3f}, first audio "
                f"{figures['time_to_first_audio_ms']:.1f} ms")

    def measures(self, result: dict[str, Any]) -> dict[str, float]:
        out = {name: float(result[key]) for key, name in (("wer", "wer"), ("worst_chunk_snr_db", "voice_snr_db"))
               if isinstance(result.get(key), (int, float))}
        return out

    def twin(self, part: TwinPart) -> TwinExtras | None:
        from .twin import twin_extras

        return twin_extras(part)

    def register_cli(self, sub: argparse._SubParsersAction) -> None:
        from . import cli

        cli.register(sub)


def _feeds(loaded: LoadedMatrix, model: Model, graph: str, export: Path) -> tuple[int, list[dict]]:
    """(sentences, the graph's inputs as CPU says them): ids for the encoder, latent windows for the decoder."""
    import numpy as np

    from .export import sentences_of
    from .runtime import Voice

    voice = Voice(export, device="cpu")
    feeds: list[dict] = []

    def keep(kind: str, feed: dict, _outputs: object) -> None:
        if kind == graph:  # the prepared graph takes int32 where the export takes int64
            feeds.append({k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in feed.items()})

    sentences = sentences_of((loaded.root / speech_of(model).sentences).resolve())
    for text in sentences:
        voice.speak(text, observe=keep)
    return len(sentences), feeds
