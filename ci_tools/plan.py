"""Expand the matrix into targets: one (model, graph, chip, precision) each, with a stable id."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError
from .matrix import LoadedMatrix, Model
from .socs import Soc, UnknownSocError
from .validation import did_you_mean


@dataclass(frozen=True, kw_only=True)
class Target:
    model: Model
    graph: str
    soc: Soc
    precision: str

    @property
    def id(self) -> str:
        return f"{self.model.name}.{self.graph}.{self.soc.name.lower()}.{self.precision}"

    def as_dict(self) -> dict:
        return {"id": self.id, "model": self.model.name, "graph": self.graph, "soc": self.soc.name,
                "soc_model": self.soc.soc_model, "htp_arch": self.soc.arch, "precision": self.precision}


Filter = str | list[str] | tuple[str, ...] | None


def _many(value: Filter) -> list[str] | None:
    """A filter given once or several times (``--soc A --soc B``): every value adds targets."""
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def plan(loaded: LoadedMatrix, model: Filter = None, soc: Filter = None,
         precision: Filter = None, graph: Filter = None) -> list[Target]:
    matrix, catalog = loaded.matrix, loaded.catalog
    models = matrix.models
    model_names, soc_names, precisions, graphs = _many(model), _many(soc), _many(precision), _many(graph)
    if model_names is not None:
        for name in model_names:
            if not any(m.name == name for m in matrix.models):
                raise UsageError(f"--model {name}: no such model in {loaded.path}",
                                 hint=did_you_mean(name, [m.name for m in matrix.models]) or
                                 f"models: {', '.join(m.name for m in matrix.models)}")
        models = [m for m in models if m.name in model_names]
    wanted: set[str] | None = None
    if soc_names is not None:
        wanted = set()
        for name in soc_names:
            try:
                wanted |= {s.name for s in catalog.expand(name)}
            except UnknownSocError as e:
                raise UsageError(f"--soc {name}: {e.message}", hint=e.hint) from None
    if graphs is not None:
        known = {g.name for m in models for g in m.graphs}
        for name in graphs:
            if name not in known:
                raise UsageError(f"--graph {name}: no such graph",
                                 hint=did_you_mean(name, known) or f"graphs: {', '.join(sorted(known))}")
    targets: dict[str, Target] = {}
    for m in models:
        socs = {s.name: s for chip in m.chips for s in catalog.expand(chip)}
        for s in socs.values():
            if wanted is not None and s.name not in wanted:
                continue
            for g in m.graphs:
                if graphs is not None and g.name not in graphs:
                    continue
                for p in m.precisions:
                    if precisions is not None and p not in precisions:
                        continue
                    if m.excluded(s.name, p, g.name):
                        continue
                    t = Target(model=m, graph=g.name, soc=s, precision=p)
                    targets[t.id] = t
    return [targets[k] for k in sorted(targets)]
