"""The chip catalog (``matrix/socs.yaml``) and the resolver from any chip spelling to an entry."""

from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import ConfigError
from .paths import REPO_ROOT
from .validation import did_you_mean, validate
from .yaml_lines import line_of, load_with_lines

DEFAULT_CATALOG = REPO_ROOT / "matrix" / "socs.yaml"
HTP_ARCHS = (68, 69, 73, 75, 79, 81)


class UnknownSocError(ConfigError):
    """A chip spelling that no catalog entry, alias or group answers to."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Soc(_Frozen):
    name: str = Field(pattern=r"^[A-Z]{2,3}\d{4}[A-Z]*$", description="upper case Qualcomm part name, e.g. SM8750")
    marketing: str
    kind: Literal["phone", "iot", "auto", "compute"]
    soc_model: int = Field(gt=0, description="QNN soc_model id (not the Android /sys soc_id)")
    htp_arch: int = Field(description="Hexagon arch number, e.g. 79 for v79")
    vtcm_mb: int | None = Field(default=None, gt=0)
    fp16: bool
    aliases: list[str] = []
    sources: dict[str, list[str]] = {}
    disputed: dict[str, int] = {}
    decision: str | None = None

    @field_validator("htp_arch")
    @classmethod
    def _known_arch(cls, v: int) -> int:
        if v not in HTP_ARCHS:
            raise ValueError(f"expected one of {', '.join(map(str, HTP_ARCHS))}, got {v}")
        return v

    @property
    def arch(self) -> str:
        return f"v{self.htp_arch}"

    def as_dict(self) -> dict:
        """As in the catalog table: htp_arch "v79" (the number stays in htp_arch_number)."""
        d = self.model_dump()
        d["htp_arch_number"] = self.htp_arch
        d["htp_arch"] = d["dsp_arch"] = self.arch
        return d


class Catalog(_Frozen):
    version: Literal[1]
    sources: dict[str, str]
    groups: dict[str, list[str]] = {}
    socs: list[Soc] = Field(min_length=1)

    @functools.cached_property
    def _index(self) -> dict[str, Soc]:
        idx: dict[str, Soc] = {}
        for soc in self.socs:
            for key in (soc.name, *soc.aliases, soc.marketing):
                idx[_norm(key)] = soc
        return idx

    def names(self) -> list[str]:
        return [s.name for s in self.socs]

    def get(self, name: str) -> Soc:
        for s in self.socs:
            if s.name == name:
                return s
        raise UnknownSocError(f"unknown chip '{name}'")

    def resolve(self, spelling: str) -> Soc:
        """SM8750, sm8750, SM8750-AC, qualcomm-snapdragon-8-elite, `getprop ro.soc.model` output."""
        key = _norm(spelling)
        if not key:
            raise UnknownSocError("empty chip name", hint="pass a part name such as SM8750")
        if key in self._index:
            return self._index[key]
        # Binned variants of one die (SM8550-AB, SM8750-AC...) share the HTP of the base part.
        base = re.match(r"^([a-z]{2,3}\d{4}[a-z]*)(-[a-z0-9]+)+$", key)
        if base and base.group(1) in self._index:
            return self._index[base.group(1)]
        match = difflib.get_close_matches(key, list(self._index), n=1, cutoff=0.6)
        hint = f"did you mean {self._index[match[0]].name}?" if match else (
            "run `qnn-release socs` for the known chips, or add it to matrix/socs.yaml")
        raise UnknownSocError(f"unknown chip '{spelling.strip()}'", hint=hint)

    def expand(self, spelling: str) -> list[Soc]:
        """A chip name, alias, or group name -> chips."""
        for g, members in self.groups.items():
            if _norm(g) == _norm(spelling):
                return [self.get(m) for m in members]
        return [self.resolve(spelling)]


def _norm(s: str) -> str:
    return re.sub(r"[\s_]+", "-", str(s).strip().lower())


def _check_semantics(cat: Catalog, path: Path, lines: dict) -> None:
    seen: dict[str, str] = {}
    for i, soc in enumerate(cat.socs):
        for j, key in enumerate((soc.name, *soc.aliases)):
            k = _norm(key)
            if k in seen and seen[k] != soc.name:
                loc = ("socs", i, "name") if j == 0 else ("socs", i, "aliases", j - 1)
                raise ConfigError(f"{path}:{line_of(lines, loc)}: '{key}' names both {seen[k]} and {soc.name}",
                                  hint="a name or alias must point to one chip")
            seen[k] = soc.name
        for field, srcs in soc.sources.items():
            for src in srcs:
                if src not in cat.sources:
                    raise ConfigError(f"{path}:{line_of(lines, ('socs', i, 'sources', field))}: "
                                      f"socs[{i}].sources.{field}: unknown source '{src}'",
                                      hint=f"declare it under 'sources:' ({', '.join(cat.sources)})")
    names = {s.name for s in cat.socs}
    for g, members in cat.groups.items():
        for j, m in enumerate(members):
            if m not in names:
                raise ConfigError(f"{path}:{line_of(lines, ('groups', g, j))}: groups.{g}: unknown chip '{m}'",
                                  hint=did_you_mean(m, names) or "list chips by their catalog name")


@functools.lru_cache(maxsize=8)
def load_catalog(path: Path = DEFAULT_CATALOG) -> Catalog:
    data, lines = load_with_lines(Path(path), "chip catalog")
    cat = validate(Catalog, data, lines, Path(path))
    _check_semantics(cat, Path(path), lines)
    return cat
