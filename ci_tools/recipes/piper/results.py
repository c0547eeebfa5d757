"""The Piper recipe's data: its matrix ``verify`` settings, what its check records in an archive's
``metadata.json`` (``recipe``), and its figures on a real device (``on_device.recipe``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, cast

from pydantic import Field

from ...matrix.schema import Model
from ...util.precision import Precision
from .. import Frozen, RecipeFigures, RecipeResult, RecipeVerify

CHECK_VERSION = 1  # bump when a change to the check should verify every chip again


def speech_of(model: Model) -> SpeechVerify:
    """The model's ``verify``: a speech check (the recipe, and so this check, is chosen by ``verify.kind``)."""
    return cast("SpeechVerify", model.verify)


class SpeechVerify(RecipeVerify):
    """A voice's check (``verify: {kind: speech}``): a chip's graphs speak sentences, judged against CPU's audio
    chunk by chunk and by what a listener (Whisper base on CPU) hears."""

    GRAPHS: ClassVar[tuple[str, ...]] = ("decoder", "encoder")
    kind: Literal["speech"]
    sentences: str = Field(description="a sentences.yaml (a list `sentences` of texts), relative to the repository")
    per_chip: int = Field(default=3, ge=1, description="sentences each chip speaks on the HTP emulator (about 20 s "
                          "per decoder chunk of 3 s of audio): chips take turns through the list; CPU speaks all")
    min_snr_db: dict[Precision, float] = Field(
        default={}, description="smallest waveform SNR of a chip's audio against CPU's, per decoder chunk (default "
        "fp16 20 dB, w8a16 10 dB, int8 5 dB)")
    max_abs: dict[Precision, float] = Field(
        default={}, description="largest |HTP - CPU| of a decoder window's audio on the same input (default fp16 "
        "0.25, w8a16 0.5, int8 0.75; audio in [-1, 1])")
    max_wer: dict[Precision, Annotated[float, Field(ge=0, le=1)]] = Field(
        default={}, description="largest word error rate of what the listener hears in the chip's audio against "
        "what it hears in CPU's audio of the same sentences (default fp16 0.05, w8a16 0.15, int8 0.3)")
    listener: str = Field(default="listener", description="the export's folder holding the listener's graphs (a "
                          "speech recognizer export with a transcript recipe, run on CPU)")


class SpeechSentence(Frozen):
    text: str = Field(description="the sentence said")
    cpu_heard: str = Field(description="what the listener (a speech recognizer on CPU) hears in CPU's audio of it")
    htp_heard: str = Field(description="what the listener hears in this archive's binaries' audio (HTP emulator)")
    wer_vs_cpu: float
    wer: float = Field(description="word error rate of what is heard in the HTP audio against the sentence")
    audio_seconds: float
    pieces: int = Field(description="utterances the encoder ran on (a sentence longer than it takes is split)")
    decoder_runs: int
    worst_chunk_snr_db: float | None = Field(description="the worst decoder window's SNR against CPU on the same input")
    worst_chunk_max_abs: float | None


class SpeechNumbers(RecipeResult):
    """metadata.json's ``recipe`` of a voice: what these binaries said, against CPU and as heard by a listener."""

    kind: Literal["speech"]
    sentences: list[SpeechSentence]
    wer_vs_cpu: float = Field(description="word error rate of what is heard in the HTP audio against what is heard "
                              "in CPU's audio of the same sentences")
    max_wer: float = Field(description="the bound the round trip was held to")
    wer: float = Field(description="word error rate of what is heard in the HTP audio against the sentences")
    worst_chunk_snr_db: float = Field(description="the worst decoder window's waveform SNR against CPU (same input)")
    worst_chunk_max_abs: float
    min_snr_db: float = Field(description="the bound the waveform check was held to")
    max_abs: float | None = Field(default=None, description="the bound on a window's largest difference")
    cpu_wer: float | None = Field(default=None, description="word error rate of what is heard in CPU's audio against "
                                  "the sentences: the baseline the chip's audio is held to")
    passed_by: list[str] = Field(description="the checks that passed: waveform, round trip (a verified build passes "
                                 "both)")
    emulator_real_time_factor: float = Field(description="emulator seconds per second of audio, on the x86-64 HTP "
                                             "EMULATOR: what the check costs, not what a phone does")
    emulator_first_audio_seconds: float = Field(description="from the call to the first window's audio, on the "
                                                "EMULATOR")
    emulator_seconds_per_encoder_run: float
    emulator_seconds_per_decoder_run: float
    verify_seconds: float
    export_check: dict = Field(description="the cut graphs against the original on CPU: sentences, worst SNR")


class SpeechFigures(RecipeFigures):
    """A voice's device figures, from its encoder run and decoder window on the device and the runs its chip
    build took to say the verification sentences."""

    kind: Literal["speech"]

    real_time_factor: float = Field(description="(encoder runs x run + decoder windows x window) / audio seconds, "
                                    "over the sentences (the host's duration predictor not counted): below 1 is faster "
                                    "than real time")
    time_to_first_audio_ms: float = Field(description="one encoder run + one decoder window: the first 3 s of audio")
    sentences: int
    audio_seconds: float
    encoder_runs: int
    decoder_windows: int
