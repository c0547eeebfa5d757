"""Expand the matrix into targets: one (model, graph, chip, precision) each, with a stable id.

Some (chip, precision) pairs are refused here, with the reason, instead of failing in a compile
job: fp16 on a chip without fp16 HTP (or whose fp16 support no source gives), and chips the
compile route cannot target (an HTP arch its front end rejects, a QNN older than the chip).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import UsageError
from .matrix import LoadedMatrix, Model, fp16_refusal
from .routes import Route
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


def plan(loaded: LoadedMatrix, model: str | None = None, soc: str | None = None,
         precision: str | None = None, graph: str | None = None, route: Route | None = None) -> list[Target]:
    return make_plan(loaded, model=model, soc=soc, precision=precision, graph=graph, route=route).targets


def make_plan(loaded: LoadedMatrix, model: str | None = None, soc: str | None = None,
              precision: str | None = None, graph: str | None = None, route: Route | None = None) -> Plan:
    """The targets and the refusals. ``route``: refuse what that compile route cannot target (None: no check)."""
    matrix, catalog = loaded.matrix, loaded.catalog
    models = matrix.models
    if model is not None:
        models = [m for m in models if m.name == model]
        if not models:
            raise UsageError(f"--model {model}: no such model in {loaded.path}",
                             hint=did_you_mean(model, [m.name for m in matrix.models]) or
                             f"models: {', '.join(m.name for m in matrix.models)}")
    wanted: dict[str, Soc] | None = None
    if soc is not None:
        try:
            wanted = {s.name: s for s in catalog.expand(soc)}
        except UnknownSocError as e:
            raise UsageError(f"--soc {soc}: {e.message}", hint=e.hint) from None
    targets: dict[str, Target] = {}
    refused: dict[tuple[str, str, str], Refusal] = {}
    for m in models:
        socs = {s.name: s for chip in m.chips for s in catalog.expand(chip)}
        for s in socs.values():
            if wanted is not None and s.name not in wanted:
                continue
            route_says = route.refusal(s) if route is not None else None
            for p in m.precisions:
                if precision is not None and p != precision:
                    continue
                graphs = [g.name for g in m.graphs if (graph is None or g.name == graph)
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
    if graph is not None and not targets and not any(g.name == graph for m in models for g in m.graphs):
        raise UsageError(f"--graph {graph}: no such graph",
                         hint=did_you_mean(graph, {g.name for m in models for g in m.graphs}) or None)
    if soc is not None and not targets and route is not None and wanted:
        reasons = [r for r in (route.refusal(s) for s in wanted.values()) if r]
        if reasons and len(reasons) == len(wanted):
            raise UsageError(f"--soc {soc}: {reasons[0]}", hint=route.hint)
    return Plan([targets[k] for k in sorted(targets)], [refused[k] for k in sorted(refused)])
