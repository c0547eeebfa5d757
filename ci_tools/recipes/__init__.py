"""Model recipes: what a model family adds to the generic stages, behind one Protocol and a registry.

A matrix model names its recipe by its check (``verify.kind``); a model without one is a plain graph set,
verified graph by graph against CPU. A recipe may export its graphs (``python -m ci_tools.recipes.<name>...``
in the matrix's ``export`` command), calibrate and check them on inputs of its own, verify a chip's graphs
together once they are all built (its verdict is in the targets' records before they are written), put files
of its own in an archive, give a device job its inputs, and add CLI verbs. Adding a family is adding a folder
here and a line to ``RECIPES``: the stages above call the methods, never a recipe by name.

A recipe's data is its own too. Where a generic record holds a recipe's part (the matrix's ``verify``, a
target's and an archive's ``recipe`` result, a device's ``on_device.recipe`` figures), it is one field tagged
with the recipe's kind, validated by the recipe's model (``verify_model``, ``result_model``, ``device_model``),
and shown through its methods (``page_rows``, ``device_text``, ``measures``).

This module is the registry: it imports no stage at run time (a recipe is imported by its path in ``RECIPES``
when asked for), so every stage may call it, the matrix's validation included.

A recipe depends on the stages below it (``sources``, ``prepare``, ``compile``, ``errors``), never on
``builder`` or ``cli``; those call into it.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

if TYPE_CHECKING:
    import argparse

    import numpy as np

    from ..compile.records import BuildReport, TargetRecord
    from ..compile.settings import BuildSettings
    from ..matrix.schema import LoadedMatrix, Model

Member = tuple[str, "Path | bytes"]  # (name in the archive, file or bytes)


@dataclass(frozen=True, kw_only=True)
class ChipCheck:
    """What a recipe's check of one model gets: every chip build whose graphs are all built, as records."""

    loaded: LoadedMatrix
    model: Model
    export: Path  # the model's export folder (its exported graphs, tokenizer ...)
    groups: dict[tuple[str, str], list[TargetRecord]]  # (soc, precision) -> one record per graph
    folders: dict[str, Path]  # target id -> the folder holding its files
    settings: BuildSettings  # the build's, whole: its jobs, isolate (every chip's check in a worker process, -j 1
    # too), from_store (nothing runs on an emulator: results come from the cache or not at all), force
    cache: Path  # the build's cache (its settings' cache, or the default one)
    progress: Any = None

    jobs = property(lambda self: self.settings.jobs)
    isolate = property(lambda self: self.settings.isolate)
    from_store = property(lambda self: self.settings.from_store)
    force = property(lambda self: self.settings.force)


@dataclass(frozen=True, kw_only=True)
class ArchivePart:
    """What one chip's archive needs from the recipe (``package``)."""

    report: BuildReport
    model: Model
    soc: Any  # catalog Soc
    records: list[TargetRecord]
    stem: str  # the archive's top folder
    root: Path  # the repository (the matrix's folder's parent)
    binaries: list[str]


@dataclass(frozen=True, kw_only=True)
class ArchiveExtras:
    members: list[Member] = field(default_factory=list)
    result: dict[str, Any] | None = None  # metadata.json's ``recipe`` (the recipe's ``result_model``, without kind)
    readme: dict[str, Any] = field(default_factory=dict)  # the archive README template's recipe section


@dataclass(frozen=True, kw_only=True)
class TwinPart:
    """What a recipe's twin (``builder/twin.py``) is made of: the graphs its binaries of a precision were compiled
    from (float: the fp16 binaries'; a quantized precision: its QDQ graphs)."""

    loaded: LoadedMatrix
    export: Path | None  # the model's export the build made and checked (its ``exports``), None when it has none
    model: Model
    graphs: dict[str, Path]  # graph -> its prepared float graph, or its QDQ graph for a quantized precision
    cache: Path
    precision: str = "float"  # float (the fp16 binaries' graphs), or w8a16/int8: the QDQ graphs those were built from


@dataclass(frozen=True, kw_only=True)
class TwinExtras:
    """A recipe's twin: its runtime run on the float graphs, on CPU or compiled for the HTP when loaded (``jit``)."""

    members: list[Member]  # relative to the twin's folder: the runtime, its configuration, the sample's input
    graph_files: dict[str, str]  # graph -> the file the runtime reads it from ("encoder.onnx")
    # ``python -m <check[0]> FOLDER SOC_MODEL HTP_ARCH OUT <check[1:]>``: the twin run both ways in a process of its
    # own; prints one JSON line (``builder/twin.py`` ``stage_recipe_twin``), writes the sample's CPU answer to OUT
    check: list[str]
    readme: str  # the twin README's template
    note: str  # what the twin is run on before release, in words
    context: dict[str, Any] = field(default_factory=dict)  # what the template needs beside the model and twin.json


@dataclass(frozen=True, kw_only=True)
class DeviceFeeds:
    names: list[str]
    feeds: list[dict[str, np.ndarray]]
    note: str
    real: bool  # recorded/real data (True) or synthetic


class Frozen(BaseModel):
    """A part of a recipe's records: frozen, no unknown keys (what a recipe's data models derive from)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Tagged(Frozen):
    """A recipe's part of a generic record: a mapping tagged with the recipe's ``kind``, validated by the model
    the recipe gives for it (the Recipe attribute ``part``). A recipe's model subclasses one of the bases below
    with ``kind: Literal["<its kind>"]``."""

    part: ClassVar[str] = ""
    kind: str

    @classmethod
    def variants(cls) -> dict[str, type[BaseModel]]:
        """kind -> the model each registered recipe gives for this part."""
        return {kind: m for kind in RECIPES if (m := getattr(get_recipe(kind), cls.part, None)) is not None}

    @classmethod
    def dispatch(cls, value: Any) -> Any:
        """The pydantic before-validator of a field holding this part: a mapping becomes its recipe's model (its
        errors keep their place); any other value is left to the base model to refuse."""
        if not isinstance(value, dict):
            return value
        variants = cls.variants()
        model = variants.get(value.get("kind"))  # type: ignore[arg-type]
        if model is None:  # no kind, or one no recipe has: the kinds there are, named
            raise ValidationError.from_exception_data(cls.__name__, [
                {"type": "literal_error", "loc": ("kind",), "input": value.get("kind"),
                 "ctx": {"expected": " or ".join(repr(k) for k in variants) or "(no recipe has one)"}}])
        return model.model_validate(value)


class RecipeVerify(Tagged):
    """The matrix's ``verify``: the recipe that checks a model's graphs together, with its settings."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as the rest of the matrix
    part: ClassVar[str] = "verify_model"
    GRAPHS: ClassVar[tuple[str, ...]] = ()  # the graphs the check runs together

    def problem(self) -> tuple[tuple[str | int, ...], str, str | None] | None:
        """What the settings get wrong beyond their types: (place under ``verify``, message, hint), or None."""
        return None


class RecipeResult(Tagged):
    """``metadata.json``'s ``recipe``: what the recipe's check measured for one archive's chip build."""

    part: ClassVar[str] = "result_model"


class RecipeFigures(Tagged):
    """``on_device.recipe``: the recipe's figures from its graphs' runs on a real device."""

    part: ClassVar[str] = "device_model"


def figures_text(figures: RecipeFigures) -> str:
    """A device's figures for a recipe's model, in the recipe's own words (the notes, the page)."""
    return get_recipe(figures.kind).device_text(figures.model_dump(mode="json"))


def lift_recipe_result(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record (target.json) or metadata.json as this version writes it: an earlier one kept a recipe's result
    under a key named after the recipe's kind (``"transcript": {...}``, the others ``null``); it is the tagged
    ``recipe`` now, so that an earlier build's verdict is neither lost nor judged again."""
    legacy = {k: v for k, v in values.items() if k in RECIPES and (v is None or isinstance(v, dict))}
    rest = {k: v for k, v in values.items() if k not in legacy}
    kind = next((k for k, v in legacy.items() if v is not None), None)
    if kind is None or "recipe" in values:
        return rest
    return {**rest, "recipe": {"kind": kind, **(legacy[kind] or {})}}


def tagged_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema whose tagged parts (``$defs`` RecipeVerify ...) are each the one-of its recipes' models."""
    defs = schema.setdefault("$defs", {})
    for base in (RecipeVerify, RecipeResult, RecipeFigures):
        if base.__name__ not in defs:
            continue
        refs = {}
        for kind, model in sorted(base.variants().items()):
            sub = model.model_json_schema(ref_template="#/$defs/{model}")
            for name, d in {**sub.pop("$defs", {}), model.__name__: sub}.items():
                if defs.get(name, d) != d:  # two recipes' models of one name: rename one
                    raise ValueError(f"the JSON Schema has two models named {name} ({kind}'s and another's)")
                defs[name] = d
            refs[kind] = f"#/$defs/{model.__name__}"
        defs[base.__name__] = {"description": (base.__doc__ or "").split("\n")[0], "oneOf": [
            {"$ref": r} for r in refs.values()], "discriminator": {"propertyName": "kind", "mapping": refs}}
    return schema


class Recipe(Protocol):
    """A model family. Every method has a default that does nothing (a plain graph's behaviour), so a
    recipe implements what it adds and nothing else."""

    kind: str  # the matrix's ``verify.kind`` that names it
    verify_model: type[RecipeVerify]  # the matrix's ``verify`` of a model it checks (``kind: Literal[kind]``)
    result_model: type[RecipeResult] | None = None  # metadata.json's ``recipe``: ``archive_extras().result``
    device_model: type[RecipeFigures] | None = None  # ``on_device.recipe``: ``device_summary()``
    check_version: int = 1  # bump when the recipe's check would judge a chip differently (part of the targets' key)
    pending_note: str = "verified by the recipe once every graph for this chip is built"
    inputs_note: str = "the recipe's own inputs"
    graph_samples: bool = True  # archives carry sample/<graph>/ inputs and outputs (False: the recipe ships its own)

    def check_inputs(self, loaded: LoadedMatrix, model: Model, export: Path | None = None) -> None:
        """Refuse, before any compile, inputs of the recipe's own that cannot be used (ConfigError); ``export``:
        the model's export folder, when it has one."""
        return None

    def inputs_digest(self, loaded: LoadedMatrix, model: Model) -> str | None:
        """A digest of the bytes of the recipe's own inputs (clips, sentences): part of the targets' key, so that
        changed inputs judge every chip again."""
        return None

    def calibration(self, loaded: LoadedMatrix, model: Model, graph: str, export: Path
                    ) -> list[dict[str, np.ndarray]] | None:
        """A quantized graph's calibration inputs (None: the generic samples or generated inputs)."""
        return None

    def check_chips(self, check: ChipCheck) -> list[TargetRecord]:
        """Every record of ``check.groups`` as the recipe judges it (verified, failed, or why not run)."""
        return [r for rs in check.groups.values() for r in rs]

    def verification(self, model: Model, record: TargetRecord) -> dict | None:
        """metadata.json's ``numbers.<graph>.verification`` for a target the recipe verified (None: generic)."""
        return None

    def archive_extras(self, part: ArchivePart) -> ArchiveExtras:
        return ArchiveExtras()

    def twin(self, part: TwinPart) -> TwinExtras | None:
        """The model's twin: what the recipe's runtime needs beside the float graphs (None: the model has none)."""
        return None

    def device_feeds(self, loaded: LoadedMatrix, export: Path, model: Model, graph: str, cache: Path
                     ) -> DeviceFeeds | None:
        """What a device runs the graph on (None: the generic samples or generated inputs), from the model's
        ``export`` the build made and checked; the build keeps them beside the graph with CPU's answers."""
        return None

    def device_summary(self, runs: dict[str, Any], result: dict[str, Any]) -> dict[str, Any] | None:
        """An archive's ``on_device.recipe`` figures (``device_model``, without kind) from its graphs' device runs
        and its ``recipe`` result (metadata.json's); None: none."""
        return None

    def page_rows(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        """The release page's rows for an archive's ``recipe`` result: (term, text), in words."""
        return []

    def device_text(self, figures: dict[str, Any]) -> str:
        """What the page adds to a device's latency for ``on_device.recipe`` ("real-time factor 0.021, ...")."""
        return ""

    def measures(self, result: dict[str, Any]) -> dict[str, float]:
        """The numbers ``compare`` judges between two releases, from an archive's ``recipe`` result: ``wer`` (held
        to the matrix's ``compare.wer_rise``) and ``<what>_snr_db`` (held to ``compare.snr_drop_db``)."""
        return {}

    def register_cli(self, sub: argparse._SubParsersAction) -> None:
        return None


RECIPES = {"transcript": "ci_tools.recipes.whisper.recipe:WhisperRecipe",
           "speech": "ci_tools.recipes.piper.recipe:PiperRecipe"}


def get_recipe(kind: str) -> Recipe:
    module, cls = RECIPES[kind].split(":")
    return getattr(importlib.import_module(module), cls)()


def recipe_for(model: Model) -> Recipe | None:
    """The model's recipe, or None for a plain graph set (verified graph by graph)."""
    return get_recipe(model.verify.kind) if model.verify is not None else None


def all_recipes() -> list[Recipe]:
    return [get_recipe(kind) for kind in RECIPES]


def code_digest(argv: list[str]) -> str | None:
    """A digest of the recipe an export command runs (``python -m ci_tools.recipes.<name>...``), so that a
    changed recipe exports again instead of reusing the cached graphs; None for other commands."""
    module = next((a for a in argv if a.startswith(f"{__name__}.")), None)
    if module is None:
        return None
    here = Path(__file__).resolve().parent
    folder = here / module[len(__name__) + 1:].split(".")[0]
    if not folder.is_dir():
        return None
    # the recipes it imports too (a voice's export exports its listener with the Whisper recipe)
    uses = {folder} | {here / m for f in folder.rglob("*.py")
                       for m in re.findall(r"^\s*from \.\.(\w+)", f.read_text(), re.M) if (here / m).is_dir()}
    h = hashlib.sha256()
    for f in sorted(f for d in uses for f in d.rglob("*.py")):
        h.update(f.relative_to(here).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()
