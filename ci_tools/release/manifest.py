"""``manifest.json``: the contract between a release and every client that picks an archive from it.

``package`` writes it (validated against this model), ``fetch``, ``qnn-fetch.sh`` and the Java
resolver read it. The JSON Schema is generated from this model into ``ci_tools/schemas/`` and
checked for staleness (``qnn-release schema --check``); docs/app-developers.md's "Choosing an archive" section
describes, in words, how a client picks an asset.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..device.numbers import OnDevice
from ..errors import PackageError, QnnReleaseError
from ..paths import PACKAGE
from ..recipes import tagged_schema
from ..util.precision import PRECISIONS, Precision

SCHEMA_FILE = PACKAGE / "schemas" / "manifest.schema.json"
MANIFEST_VERSION = 1
# what a client tries first when the release has several precisions for one model and chip
PRECISION_ORDER = PRECISIONS

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the asset's bytes, lower-case hex")]
AssetName = Annotated[str, Field(pattern=r"^[^/\\]+$", description="the release asset's file name (no folders)")]


class Piece(BaseModel):
    """One uploaded piece of an asset too large for one release asset: ``<name>.001``, ``<name>.002`` ..."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: AssetName
    size: int = Field(ge=0, description="bytes")
    sha256: Sha256


class _A(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: AssetName
    size: int = Field(ge=0, description="bytes (of the whole file, when it is uploaded in pieces)")
    sha256: Sha256 = Field(description="sha256 of the whole file, lower-case hex (its pieces joined in order)")
    release: str | None = Field(default=None, description="the tag of the release that holds it, when that is not "
                                "this manifest's tag (one of `parts`): a release holds at most 1,000 assets")
    pieces: list[Piece] | None = Field(default=None, description="the pieces it is uploaded as, in order, when the "
                                       "file is over the size a release asset may have (under 2 GiB): download each "
                                       "(checked against its sha256), join them, check the whole file's sha256")


class ModelAsset(_A):
    """One model compiled for one chip at one precision: ``<model>-<soc>-<precision>-qnn<sdk>.tar.bz2``."""

    kind: Literal["model"]
    model: str = Field(description="the model's name in the matrix")
    soc: str = Field(description="the chip it was compiled for: an upper-case part name (SM8750)")
    soc_aliases: list[str] = Field(description="lower-case spellings of that chip this archive answers to "
                                   "(the part name first); a client matches the chip it resolved against "
                                   "`soc` or, lower-cased, against these")
    precision: Precision
    sdk_version: str = Field(description="the QNN version the binaries were compiled with; the runtime "
                             "libraries shipped beside them must be of this version")
    qnn_runtime: str | None = Field(default=None, pattern=r"^\d+\.\d+\.\d+$", description="the oldest QNN runtime "
                                    "(major.minor.patch) that loads these binaries: the QNN that built them. A binary "
                                    "of a newer QNN fails on an older runtime (QNN_CONTEXT_ERROR_INVALID_ARGUMENT, "
                                    "measured with onnxruntime-qnn 2.6.0 = QNN 2.50.40 and 2.7.0 = QNN 2.51.0), one of "
                                    "an older QNN loads on a newer one; clients given the app's runtime refuse a "
                                    "binary that needs a newer one (exit 12)")
    graphs: list[str] = Field(min_length=1, description="the model's graphs, each a context binary in the archive")
    soc_model: int | None = Field(default=None, description="QNN soc_model id of the chip")
    htp_arch: str | None = Field(default=None, pattern=r"^v\d+$", description="Hexagon arch, e.g. v79")
    qnn_libs: str | None = Field(default=None, description="the qnn-libs asset of the same SDK version, if shipped")
    verified: bool | None = Field(default=None, description="every graph was run on the HTP emulator "
                                  "and matched ONNX Runtime on CPU")
    verified_on: Literal["real-samples", "generated-inputs", "not-verified"] | None = Field(
        default=None, description="the verdict of the least verified graph: verified on real samples, on "
        "generated inputs only, or not verified")
    cosine: float | None = Field(default=None, description="the lowest cosine similarity vs CPU over the graphs")
    compile_seconds: float | None = Field(default=None, description="compile time of all graphs together")
    device: OnDevice | None = Field(default=None, description="measured on a real device of the chip (AI Hub or "
                                    "adb): NPU latency, speedup vs the device's CPU, status; null: not measured")


class LibsAsset(_A):
    """The QNN runtime libraries (``qnn-libs-<version>.tar.bz2``) or headers (``qnn-include-...``)."""

    kind: Literal["qnn-libs", "qnn-include"]
    sdk_version: str
    htp_archs: list[str] = Field(description="the Hexagon archs whose skel libraries are included")


class OnDeviceCompile(BaseModel):
    """A twin run through ONNX Runtime's QNN EP compiling it at session creation (no context cache), as an app on a
    chip without a binary does, on this machine's HTP emulator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    soc: str = Field(description="the chip it was compiled for (the model's most capable chip in the release)")
    qnn_version: str
    first_load_seconds: float = Field(description="session creation: the compile (emulator machine, not a device)")
    peak_memory_mb: float = Field(description="the process's peak resident memory after the first load")
    verified: bool = Field(description="its answer agreed with CPU on the sample, by the fp16 bars")


class TwinAsset(_A):
    """A model's prepared float graphs (``<model>-float-onnx.tar.bz2``): its CPU model, and what the QNN EP compiles
    for any HTP at session creation; and per quantized precision of the ort route its QDQ graphs
    (``<model>-w8a16-onnx.tar.bz2``). Clients return one for a chip the release has no binary for: ``jit`` where the
    catalog knows the chip to have an HTP, ``cpu`` otherwise (the float twin)."""

    kind: Literal["twin"]
    model: str
    precision: Literal["float", "w8a16", "int8"] = Field(
        description="float: the graphs fp16 binaries and CPU run; w8a16/int8: the QDQ graphs those binaries were "
                    "compiled from")
    graphs: list[str] = Field(min_length=1)
    on_device_compile: list[OnDeviceCompile] = Field(default=[], description="per graph, as measured before release")


Asset = Annotated[ModelAsset | LibsAsset | TwinAsset, Field(discriminator="kind")]


class Manifest(BaseModel):
    """Every asset of one release with its sha256, and for each model archive the chip and precision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    manifest_version: Literal[1, 2] = Field(description="changes only when a client would read it differently: 2 "
                                            "when assets sit in linked `parts` or are uploaded in `pieces`, 1 "
                                            "otherwise (a client of version 1 reads it as before)")
    tag: str | None = Field(description="the release tag, or null when packaged without one")
    toolkit: str = Field(description="the qnn-release version that packaged it")
    sdk_versions: list[str] = Field(description="every QNN version of the release's assets")
    images: list[str] = Field(default=[], description="the container images (name:tag@sha256:...) the "
                              "binaries were compiled in, when built in CI")
    skipped: list[str] = Field(default=[], description="model/chip/precision combinations not released "
                               "(some graph failed), with the reason")
    warnings: list[str] = Field(default=[], description="what a user must know, e.g. binaries compiled with "
                                "another QNN version than the matrix pins")
    device_numbers: str | None = Field(default=None, description="how the device figures were measured, or why "
                                       "there are none (\"no device numbers: ...\")")
    parts: list[str] = Field(default=[], description="the tags of the linked releases that hold the assets this "
                             "release cannot (GitHub: 1,000 assets per release), in order; this manifest, in the "
                             "release of `tag`, says which asset is in which (an asset's `release`)")
    assets: list[Asset] = Field(description="sorted by name")


def manifest_json(manifest: Manifest) -> dict:
    """The manifest as written: a release within one GitHub release and without pieces reads as version 1 did
    (no `parts`, no `release` or `pieces` on its assets)."""
    data = manifest.model_dump(mode="json")
    if not data["parts"]:
        del data["parts"]
    for a in data["assets"]:
        for key in ("release", "pieces"):
            if a[key] is None:
                del a[key]
    return data


def validate_manifest(data: dict) -> Manifest:
    return Manifest.model_validate(data)


def json_schema() -> str:
    schema = tagged_schema(Manifest.model_json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "qnn-release manifest.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def read_manifest(path: Path, error: type[QnnReleaseError] = PackageError) -> Manifest:
    """A packaged release's manifest.json, read by its model; anything else is one line naming the key, raised as
    the caller's ``error`` (package: PackageError, publish: PublishError)."""
    import pydantic

    from ..util.validation import first_error

    try:
        return Manifest.model_validate_json(path.read_bytes())
    except OSError as e:
        raise error(f"{path}: cannot read it: {e.strerror or e}") from None
    except pydantic.ValidationError as e:
        where, msg = first_error(e)
        raise error(f"{path}: not a manifest this version reads (at {where or '(top level)'}: {msg})",
                    hint="package the release again with this qnn-release; never edit a packaged release") from None
