"""The chip catalog (``matrix/socs.yaml``) and the resolver from any chip spelling to an entry.

A chip is an entry; chips that share a soc_model build once: ``build_as`` names the entry whose
build (and release archive) they use. ``lookup`` finds a chip's own entry, ``resolve`` its build
target. Spellings: part names, aliases, AI Hub chipset names (current and dropped), binned
``ro.soc.model`` variants, marketing names, kernel soc_ids (``soc_id:639``), and Qualcomm
codenames and Android platform names (which may name several chips: ambiguous ones are refused).
"""

from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ConfigError, UsageError
from ..paths import MATRIX_DATA
from ..util.validation import did_you_mean, validate
from ..util.yaml_lines import line_of, load_with_lines

DEFAULT_CATALOG = MATRIX_DATA / "socs.yaml"
HTP_ARCHS = (68, 69, 73, 75, 79, 81, 85)
KINDS = ("phone", "iot", "auto", "compute", "xr", "wear")
# spellings that name exactly one chip
UNIQUE_SPELLINGS = ("aliases", "aihub", "aihub_dropped", "ro_soc_model")
# spellings several chips may share (a codename covers a family; a board platform several bins)
SHARED_SPELLINGS = ("codenames", "platforms")
SOURCED = ("soc_model", "htp_arch", "vtcm_mb", "fp16", "qnn_min", "soc_ids", *UNIQUE_SPELLINGS, *SHARED_SPELLINGS)
SOC_ID = re.compile(r"^soc[-_]?id[\s:=-]*(\d+)$")


class UnknownSocError(ConfigError):
    """A chip spelling that no catalog entry, alias or group answers to."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Soc(_Frozen):
    name: str = Field(pattern=r"^[A-Z]{2,3}\d{4}[A-Z]*$", description="upper case Qualcomm part name, e.g. SM8750")
    marketing: str | None
    kind: Literal["phone", "iot", "auto", "compute", "xr", "wear"]
    soc_model: int = Field(gt=0, description="QNN soc_model id (not the Android /sys soc_id)")
    htp_arch: int = Field(description="Hexagon arch number, e.g. 79 for v79")
    vtcm_mb: int | None = Field(gt=0, description="null: no source gives it")
    fp16: bool | None = Field(description="HTP fp16; null: no source gives it")
    build_as: str | None = Field(default=None, description="the chip with the same soc_model whose build this one uses")
    qnn_min: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.\d+)*$",
                                description="the oldest QNN/QAIRT version known to compile this chip")
    aliases: list[str] = []
    aihub: list[str] = []
    aihub_dropped: list[str] = []
    codenames: list[str] = []
    platforms: list[str] = []
    ro_soc_model: list[str] = []
    soc_ids: list[int] = []
    sources: dict[str, list[str]] = {}
    disputed: dict[str, dict[str, int | bool | str]] = {}
    decision: str | None = None
    toolchain_notes: dict[str, str] = {}

    @field_validator("htp_arch")
    @classmethod
    def _known_arch(cls, v: int) -> int:
        if v not in HTP_ARCHS:
            raise ValueError(f"expected one of {', '.join(map(str, HTP_ARCHS))}, got {v}")
        return v

    @property
    def arch(self) -> str:
        return f"v{self.htp_arch}"

    def spellings(self) -> list[str]:
        """Every spelling that names this chip and no other (marketing name included)."""
        out = [self.name, *(s for f in UNIQUE_SPELLINGS for s in getattr(self, f))]
        return out + ([self.marketing] if self.marketing else [])

    def as_dict(self) -> dict:
        """As in the catalog table: htp_arch "v79" (the number stays in htp_arch_number).

        ``disputed`` keeps its old shape (source -> the soc_model it gives instead); ``disputes``
        has every field.
        """
        d = self.model_dump()
        d["htp_arch_number"] = self.htp_arch
        d["htp_arch"] = d["dsp_arch"] = self.arch
        d["disputes"] = d.pop("disputed")
        d["disputed"] = dict(self.disputed.get("soc_model", {}))
        return d


class Unbuilt(_Frozen):
    name: str = Field(pattern=r"^[A-Z]{2,3}\d{4}[A-Z]*$")
    marketing: str | None = None
    soc_model: int = Field(gt=0)
    sources: list[str] = Field(min_length=1)
    reason: str


class Catalog(_Frozen):
    version: Literal[1]
    sources: dict[str, str]
    groups: dict[str, list[str]] = {}
    unbuilt: list[Unbuilt] = []
    socs: list[Soc] = Field(min_length=1)

    @functools.cached_property
    def _index(self) -> dict[str, Soc]:
        return {_norm(key): soc for soc in self.socs for key in soc.spellings()}

    @functools.cached_property
    def _shared(self) -> dict[str, list[Soc]]:
        idx: dict[str, list[Soc]] = {}
        for soc in self.socs:
            for f in SHARED_SPELLINGS:
                for key in getattr(soc, f):
                    idx.setdefault(_norm(key), []).append(soc)
        return idx

    @functools.cached_property
    def _soc_ids(self) -> dict[int, Soc]:
        return {i: soc for soc in self.socs for i in soc.soc_ids}

    def names(self) -> list[str]:
        return [s.name for s in self.socs]

    def get(self, name: str) -> Soc:
        for s in self.socs:
            if s.name == name:
                return s
        raise UnknownSocError(f"unknown chip '{name}'")

    def target(self, soc: Soc) -> Soc:
        """The chip whose build ``soc`` uses (itself, or its ``build_as``)."""
        return self.get(soc.build_as) if soc.build_as else soc

    def targets(self) -> list[Soc]:
        """Every build target, in catalog order."""
        return [s for s in self.socs if s.build_as is None]

    def sharing(self, soc: Soc) -> list[Soc]:
        """The chips that build as ``soc`` (a build target), itself first."""
        return [soc, *(s for s in self.socs if s.build_as == soc.name)]

    def hub_chipsets(self, soc: Soc) -> list[tuple[str, Soc]]:
        """The AI Hub chipset attributes whose devices run ``soc``'s build, each with the chip it names: its
        own (``aihub``, then ``aihub_dropped``), then those of the chips that build as it (the same soc_model
        and HTP arch: the same binary; QCS9100 has no Hub device, its twin QCS9075 has the IQ-9075 EVK)."""
        return [(c, s) for s in self.sharing(self.target(soc)) for c in (*s.aihub, *s.aihub_dropped)]

    def lookup(self, spelling: str) -> Soc:
        """A chip's own entry from any of its spellings (see the module docstring)."""
        key = _norm(spelling)
        if not key:
            raise UnknownSocError("empty chip name", hint="pass a part name such as SM8750")
        if key in self._index:
            return self._index[key]
        m = SOC_ID.match(key)
        if m:
            soc_id = int(m.group(1))
            if soc_id in self._soc_ids:
                return self._soc_ids[soc_id]
            raise UnknownSocError(f"unknown kernel soc_id {soc_id}",
                                  hint="the catalog knows the soc_id of some chips only; pass the part name "
                                  "(`adb shell getprop ro.soc.model`)")
        if key in self._shared:
            chips = self._shared[key]
            targets = {self.target(s).name for s in chips}
            if len(targets) == 1:
                return self.target(chips[0])
            raise UnknownSocError(f"'{spelling.strip()}' names several chips: "
                                  + ", ".join(f"{s.name} (soc_model {s.soc_model})" for s in chips),
                                  hint="pass the part name (`adb shell getprop ro.soc.model`)")
        # Binned variants of one die (SM8550-AB, SM8750-AC...) share the HTP of the base part.
        base = re.match(r"^([a-z]{2,3}\d{4}[a-z]*)(-[a-z0-9]+)+$", key)
        if base and base.group(1) in self._index:
            return self._index[base.group(1)]
        for u in self.unbuilt:
            if key in (_norm(u.name), _norm(u.marketing or "")):
                raise UnknownSocError(f"{u.name} (soc_model {u.soc_model}) is known but not built: {u.reason}",
                                      hint="add it to matrix/socs.yaml when a source gives its HTP arch")
        match = sorted(difflib.get_close_matches(key, list(self._index), n=5, cutoff=0.6),
                       key=lambda c: (-difflib.SequenceMatcher(None, key, c).ratio(), -_common_prefix(key, c)))
        hint = f"did you mean {self._index[match[0]].name}?" if match else (
            "run `qnn-release socs` for the known chips, or add it to matrix/socs.yaml")
        raise UnknownSocError(f"unknown chip '{spelling.strip()}'", hint=hint)

    def resolve(self, spelling: str) -> Soc:
        """The build target for any spelling: SM8750, sm8750-ac, qualcomm-snapdragon-8-elite-for-galaxy,
        `getprop ro.soc.model` output, soc_id:639, QCS9075 (-> QCS9100, the same soc_model)."""
        return self.target(self.lookup(spelling))

    def group(self, spelling: str) -> list[str] | None:
        for g, members in self.groups.items():
            if _norm(g) == _norm(spelling):
                return members
        return None

    def expand(self, spelling: str) -> list[Soc]:
        """A chip name, alias, or group name -> build targets (each once, in order)."""
        members = self.group(spelling)
        socs = [self.target(self.get(m)) for m in members] if members is not None else [self.resolve(spelling)]
        return list({s.name: s for s in socs}.values())


def select(cat: Catalog, kind: str | None = None, arch: str | int | None = None) -> list[Soc]:
    """The chips of one kind and/or HTP arch (``v79`` or ``79``), in catalog order."""
    number = None
    if arch is not None:
        m = re.fullmatch(r"[vV]?(\d+)", str(arch).strip())
        number = int(m.group(1)) if m else None
        if number not in HTP_ARCHS:
            raise UsageError(f"--arch {arch}: expected an HTP arch",
                             hint=f"one of {', '.join(f'v{a}' for a in HTP_ARCHS)}")
    return [s for s in cat.socs if (kind is None or s.kind == kind) and (number is None or s.htp_arch == number)]


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _norm(s: str) -> str:
    return re.sub(r"[\s_]+", "-", str(s).strip().lower())


def _err(path: Path, lines: dict, loc: tuple, text: str, hint: str | None = None) -> ConfigError:
    return ConfigError(f"{path}:{line_of(lines, loc)}: {text}", hint=hint)


def _check_semantics(cat: Catalog, path: Path, lines: dict) -> None:
    err = functools.partial(_err, path, lines)
    seen: dict[str, str] = {}  # every spelling (normalised) -> its chip
    ids: dict[int, str] = {}
    by_name: dict[str, Soc] = {}  # the chips so far: build_as names one listed before it
    for i, soc in enumerate(cat.socs):
        if soc.name in by_name:
            raise err(("socs", i, "name"), f"{soc.name} is listed twice", "keep one entry per chip")
        by_name[soc.name] = soc
        _check_spellings(err, soc, i, seen, ids)
        _check_sources(err, cat, soc, i)
        if soc.build_as is not None:
            _check_build_as(err, soc, soc.build_as, i, by_name)
    first: dict[int, Soc] = {}
    for i, soc in enumerate(cat.socs):
        if soc.build_as is None:
            if soc.soc_model in first:
                raise err(("socs", i, "soc_model"),
                          f"{soc.name}: soc_model {soc.soc_model} is also {first[soc.soc_model].name}'s",
                          f"one soc_model is one build: add `build_as: {first[soc.soc_model].name}`")
            first[soc.soc_model] = soc
    for j, u in enumerate(cat.unbuilt):
        if _norm(u.name) in seen:
            raise err(("unbuilt", j, "name"), f"{u.name} is both a chip and unbuilt", "keep it in one place")
        for src in u.sources:
            if src not in cat.sources:
                raise err(("unbuilt", j, "sources"), f"unbuilt[{j}]: unknown source '{src}'")
    for g, members in cat.groups.items():
        for j, m in enumerate(members):
            if m not in by_name:
                raise err(("groups", g, j), f"groups.{g}: unknown chip '{m}'",
                          did_you_mean(m, by_name) or "list chips by their catalog name")


def _check_spellings(err, soc: Soc, i: int, seen: dict[str, str], ids: dict[int, str]) -> None:
    """A name, alias, marketing name or kernel soc_id points to one chip."""
    keys: list[tuple[str, tuple[str | int, ...]]] = [(soc.name, ("socs", i, "name"))]
    keys += [(k, ("socs", i, f, j)) for f in UNIQUE_SPELLINGS for j, k in enumerate(getattr(soc, f))]
    if soc.marketing:
        keys.append((soc.marketing, ("socs", i, "marketing")))
    for key, loc in keys:
        k = _norm(key)
        if k in seen and seen[k] != soc.name:
            raise err(loc, f"'{key}' names both {seen[k]} and {soc.name}", "a name or alias must point to one chip")
        seen[k] = soc.name
    for j, soc_id in enumerate(soc.soc_ids):
        if soc_id in ids and ids[soc_id] != soc.name:
            raise err(("socs", i, "soc_ids", j), f"soc_id {soc_id} names both {ids[soc_id]} and {soc.name}",
                      "a kernel soc_id identifies one chip")
        ids[soc_id] = soc.name


def _check_sources(err, cat: Catalog, soc: Soc, i: int) -> None:
    """Every number has a source, and every source is declared."""
    for field, srcs in soc.sources.items():
        if field not in SOURCED:
            raise err(("socs", i, "sources", field), f"socs[{i}].sources: unknown field '{field}'",
                      did_you_mean(field, SOURCED) or f"one of {', '.join(SOURCED)}")
        for src in srcs:
            if src not in cat.sources:
                raise err(("socs", i, "sources", field), f"socs[{i}].sources.{field}: unknown source '{src}'",
                          f"declare it under 'sources:' ({', '.join(cat.sources)})")
    for field in ("soc_model", "htp_arch", "vtcm_mb", "fp16", "qnn_min"):
        if getattr(soc, field) is not None and not soc.sources.get(field):
            raise err(("socs", i, field), f"{soc.name}.{field}: a number without a source",
                      f"add sources: {{{field}: [...]}} (keys from 'sources:'), or write null")
    for field, claims in soc.disputed.items():
        for src in claims:
            if src not in cat.sources:
                raise err(("socs", i, "disputed", field), f"socs[{i}].disputed.{field}: unknown source '{src}'",
                          f"declare it under 'sources:' ({', '.join(cat.sources)})")


def _check_build_as(err, soc: Soc, build_as: str, i: int, by_name: dict[str, Soc]) -> None:
    """A chip that builds as another (``build_as``, its setting) shares its soc_model, arch, VTCM and fp16."""
    target = by_name.get(build_as)
    if target is None or target.build_as is not None or target is soc:
        raise err(("socs", i, "build_as"), f"{soc.name}.build_as: '{build_as}' is not a build target",
                  did_you_mean(build_as, by_name) or "name a chip without build_as")
    for field in ("soc_model", "htp_arch", "vtcm_mb", "fp16"):
        mine, theirs = getattr(soc, field), getattr(target, field)
        if mine != theirs and not (field in ("vtcm_mb", "fp16") and mine is None):
            raise err(("socs", i, field), f"{soc.name} builds as {target.name} but its {field} is {mine}, not {theirs}",
                      "chips that share one build share its soc_model, arch, VTCM and fp16")


@functools.lru_cache(maxsize=8)
def load_catalog(path: Path = DEFAULT_CATALOG) -> Catalog:
    data, lines = load_with_lines(Path(path), "chip catalog")
    cat = validate(Catalog, data, lines, Path(path))
    _check_semantics(cat, Path(path), lines)
    return cat
