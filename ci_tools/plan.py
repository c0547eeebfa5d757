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


def plan(loaded: LoadedMatrix, model: str | None = None, soc: str | None = None,
         precision: str | None = None, graph: str | None = None) -> list[Target]:
    matrix, catalog = loaded.matrix, loaded.catalog
    models = matrix.models
    if model is not None:
        models = [m for m in models if m.name == model]
        if not models:
            raise UsageError(f"--model {model}: no such model in {loaded.path}",
                             hint=did_you_mean(model, [m.name for m in matrix.models]) or
                             f"models: {', '.join(m.name for m in matrix.models)}")
    wanted: set[str] | None = None
    if soc is not None:
        try:
            wanted = {s.name for s in catalog.expand(soc)}
        except UnknownSocError as e:
            raise UsageError(f"--soc {soc}: {e.message}", hint=e.hint) from None
    targets: dict[str, Target] = {}
    for m in models:
        socs = {s.name: s for chip in m.chips for s in catalog.expand(chip)}
        for s in socs.values():
            if wanted is not None and s.name not in wanted:
                continue
            for g in m.graphs:
                if graph is not None and g.name != graph:
                    continue
                for p in m.precisions:
                    if precision is not None and p != precision:
                        continue
                    if m.excluded(s.name, p, g.name):
                        continue
                    t = Target(model=m, graph=g.name, soc=s, precision=p)
                    targets[t.id] = t
    if graph is not None and not targets and not any(g.name == graph for m in models for g in m.graphs):
        raise UsageError(f"--graph {graph}: no such graph",
                         hint=did_you_mean(graph, {g.name for m in models for g in m.graphs}) or None)
    return [targets[k] for k in sorted(targets)]
