"""Expand the matrix into targets: one (model, graph, chip, precision) each, with a stable id.

Some (chip, precision) pairs are refused here, with the reason, instead of failing in a compile
job: fp16 on a chip without fp16 HTP (or whose fp16 support no source gives), and chips the
compile route cannot target (an HTP arch its front end rejects, a QNN older than the chip).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalog.routes import Route
from ..catalog.socs import Soc, UnknownSocError
from ..errors import UsageError
from ..util.validation import did_you_mean
from .schema import LoadedMatrix, Model, fp16_refusal


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


@dataclass(frozen=True)
class Refusal:
    model: str
    soc: str
    precision: str
    reason: str

    def as_dict(self) -> dict:
        return {"model": self.model, "soc": self.soc, "precision": self.precision, "reason": self.reason}


@dataclass
class Plan:
    targets: list[Target]
    refused: list[Refusal] = field(default_factory=list)


def plan(loaded: LoadedMatrix, model: Filter = None, soc: Filter = None,
         precision: Filter = None, graph: Filter = None, route: Route | None = None) -> list[Target]:
    return make_plan(loaded, model=model, soc=soc, precision=precision, graph=graph, route=route).targets


def make_plan(loaded: LoadedMatrix, model: Filter = None, soc: Filter = None,
              precision: Filter = None, graph: Filter = None, route: Route | None = None) -> Plan:
    """The targets and the refusals. Each filter is a value or a list of values that add up.
    ``route``: refuse what that compile route cannot target (None: no check)."""
    matrix, catalog = loaded.matrix, loaded.catalog
    models = matrix.models
    model_names, soc_names, precisions, graph_names = _many(model), _many(soc), _many(precision), _many(graph)
    if model_names is not None:
        for name in model_names:
            if not any(m.name == name for m in matrix.models):
                raise UsageError(f"--model {name}: no such model in {loaded.path}",
                                 hint=did_you_mean(name, [m.name for m in matrix.models]) or
                                 f"models: {', '.join(m.name for m in matrix.models)}")
        models = [m for m in models if m.name in model_names]
    wanted: dict[str, Soc] | None = None
    if soc_names is not None:
        wanted = {}
        for name in soc_names:
            try:
                wanted.update({s.name: s for s in catalog.expand(name)})
            except UnknownSocError as e:
                raise UsageError(f"--soc {name}: {e.message}", hint=e.hint) from None
    if graph_names is not None:
        known = {g.name for m in models for g in m.graphs}
        for name in graph_names:
            if name not in known:
                raise UsageError(f"--graph {name}: no such graph",
                                 hint=did_you_mean(name, known) or f"graphs: {', '.join(sorted(known))}")
    targets: dict[str, Target] = {}
    refused: dict[tuple[str, str, str], Refusal] = {}
    for m in models:
        socs = {s.name: s for chip in m.chips for s in catalog.expand(chip)}
        for s in socs.values():
            if wanted is not None and s.name not in wanted:
                continue
            route_says = route.refusal(s) if route is not None else None
            for p in m.precisions:
                if precisions is not None and p not in precisions:
                    continue
                graphs = [g.name for g in m.graphs if (graph_names is None or g.name in graph_names)
                          and not m.excluded(s.name, p, g.name)]
                if not graphs:
                    continue
                reason = route_says or (fp16_refusal(m, s) if p == "fp16" else None)
                if reason:
                    refused[(m.name, s.name, p)] = Refusal(m.name, s.name, p, reason)
                    continue
                for g in graphs:
                    t = Target(model=m, graph=g, soc=s, precision=p)
                    targets[t.id] = t
    if soc_names is not None and not targets and route is not None and wanted:
        reasons = [r for r in (route.refusal(s) for s in wanted.values()) if r]
        if reasons and len(reasons) == len(wanted):
            raise UsageError(f"--soc {', '.join(soc_names)}: {reasons[0]}", hint=route.hint)
    return Plan([targets[k] for k in sorted(targets)], [refused[k] for k in sorted(refused)])
