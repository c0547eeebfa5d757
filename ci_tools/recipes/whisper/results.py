"""The Whisper recipe's data: its matrix ``verify`` settings, what its check records in an archive's
``metadata.json`` (``recipe``), and its figures on a real device (``on_device.recipe``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from ...matrix.schema import Model, Source, source_files
from ...util.precision import Precision
from ...util.validation import did_you_mean
from .. import Frozen, RecipeFigures, RecipeResult, RecipeVerify

CHECK_VERSION = 4  # bump when a change to the check should verify every chip again (3: clips packed into windows;
# 4: where HTP leaves CPU, CPU decodes along HTP's tokens: near-ties)


def transcript_of(model: Model) -> TranscriptVerify:
    """The model's ``verify``: a transcript check (the recipe, and so this check, is chosen by ``verify.kind``)."""
    return cast("TranscriptVerify", model.verify)


class Recordings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as the rest of the matrix

    description: str = Field(description="what the recordings are, e.g. 'LibriVox readers, CMU ARCTIC speakers'")
    license: str = Field(description="their licence, with where it is stated")
    source: Source = Field(description="the pinned files (WAV, 16 kHz mono PCM)")
    texts: dict[str, str] = Field(min_length=1, description="file of the source -> what it says (the reference)")


class TranscriptVerify(RecipeVerify):
    """A speech recognizer's check (``verify: {kind: transcript}``): a chip's graphs transcribe clips."""

    GRAPHS: ClassVar[tuple[str, ...]] = ("decoder", "encoder")  # the graphs the check runs together
    kind: Literal["transcript"]
    clips: str = Field(description="a clips.yaml (a list `clips` of {file, text}: 16 kHz mono WAVs beside it and "
                       "what they say), relative to the repository")
    per_chip: int = Field(default=2, ge=1, description="clips each chip transcribes on the HTP emulator (minutes "
                          "per clip): chips take turns through the list, so together they cover it")
    pack: bool = Field(default=True, description="a chip's clips packed into the encoder's 30-second windows, half a "
                       "second of silence between them: one encoder run (the emulator's minutes) per window instead "
                       "of per clip; HTP and CPU transcribe the same window (false: one clip per window). Where the "
                       "transcripts differ only by near-ties (docs/model-authors.md), the check says so and passes")
    max_wer_vs_cpu: dict[Precision, Annotated[float, Field(ge=0, le=1)]] = Field(
        default={}, description="largest word error rate of the emulator transcript against the CPU transcript "
        "(default fp16 0, w8a16 0.1, int8 0.25)")
    language: str = Field(default="en", pattern=r"^[a-z]{2,3}$")
    max_tokens: int = Field(default=128, ge=1, le=440, description="tokens a clip's transcript may have")
    recordings: Recordings | None = Field(
        default=None, description="recorded human speech with reference texts, pinned: when given, the chips "
        "transcribe these (taking turns) instead of the clips, CPU transcribes all of them, and the targets "
        "count as verified on real samples; the clips still calibrate and check the export")

    def problem(self) -> tuple[tuple[str | int, ...], str, str | None] | None:
        if self.recordings is None:
            return None
        source = self.recordings.source
        files = set(source_files(source)) | set(getattr(source, "join", {}))
        for name in self.recordings.texts:
            if name not in files:
                return (("recordings", "texts", name), f"'{name}' is not one of the recordings' source files",
                        did_you_mean(name, files) or "list it under source.files with its sha256")
        return None


class TranscriptClip(Frozen):
    file: str
    reference: str = Field(description="what the clip says")
    cpu: str = Field(description="the transcript with the exported graphs on CPU (ONNX Runtime)")
    htp: str = Field(description="the transcript with this archive's binaries on the HTP emulator")
    wer_vs_cpu: float
    wer: float = Field(description="word error rate of the HTP transcript against what the clip says")
    encoder_seconds: float
    decoder_steps: int
    decoder_seconds: float
    audio_seconds: float | None = Field(default=None, description="the clip's length")


class ExportCheck(Frozen):
    tool: str | None = Field(description="the independent implementation the export was compared with")
    equal: int = Field(description="clips it transcribed exactly as the exported graphs on CPU")
    total: int
    skipped: str | None = None


class NearTie(Frozen):
    file: str = Field(description="the clip or packed window")
    offset: int = Field(description="the decoder step (position in the token sequence)")
    cpu: str = Field(description="the token CPU rates best at that step, decoding along HTP's tokens")
    htp: str = Field(description="the token HTP picked")
    gap: float = Field(description="CPU's log-probability of its token minus HTP's (natural log; 0 is a tie)")
    htp_gap: float | None = Field(default=None, description="HTP's log-probability of its token minus CPU's, from "
                                  "its own logits at that step")


class TranscriptNumbers(RecipeResult):
    """metadata.json's ``recipe`` of a speech recognizer: the transcript verification of these binaries."""

    kind: Literal["transcript"]
    agree: int = Field(description="clips whose HTP transcript equals the CPU transcript")
    wer_vs_cpu: float
    max_wer_vs_cpu: float = Field(description="the bound the verification held it to")
    wer: float = Field(description="word error rate of the HTP transcripts against what the clips say")
    cpu_wer_all: float | None = Field(default=None, description="word error rate of the CPU transcripts of every "
                                      "clip or recording of the model against what they say")
    cpu_clips_all: int | None = Field(default=None, description="how many clips or recordings CPU transcribed")
    recorded: bool | None = Field(default=None, description="true: recorded human speech (verify.recordings); "
                                  "false: synthetic clips")
    emulator_seconds_per_encoder_run: float = Field(description="on the x86-64 HTP EMULATOR, not a device")
    emulator_seconds_per_decoder_step: float = Field(description="on the x86-64 HTP EMULATOR, not a device")
    verify_seconds: float = Field(description="what the transcript verification of this chip cost")
    emulator_seconds_load: float | None = Field(default=None, description="loading both binaries on the x86-64 HTP "
                                                "EMULATOR (once per chip: every clip runs in that session)")
    emulator_real_time_factor: float | None = Field(
        default=None, description="emulator seconds (encoder runs and decoder steps) per second of audio, on the "
        "x86-64 HTP EMULATOR: what the check costs, not what a phone does")
    clips: list[TranscriptClip]
    export_check: ExportCheck
    near_ties: list[NearTie] | None = Field(
        default=None, description="where the HTP transcript differs from CPU's only through near-ties: each step "
        "where the two pick other tokens on the same inputs, CPU's gap within near_tie_nats (passes the check)")
    near_tie_nats: float | None = Field(default=None, description="the bound on CPU's gap for a near-tie")


class TranscriptFigures(RecipeFigures):
    """A speech recognizer's device figures, from its encoder run and decoder step on the device and the steps its
    chip build took on the verification clips."""

    kind: Literal["transcript"]

    real_time_factor: float = Field(description="(encoder run + decoder steps x step) / audio seconds, over the "
                                    "clips: below 1 is faster than real time")
    time_to_first_token_ms: float = Field(description="encoder run + the prompt's decoder steps (start, language, "
                                          "task, no timestamps), the last of which gives the first text token")
    clips: int
    audio_seconds: float
    decoder_steps: int
