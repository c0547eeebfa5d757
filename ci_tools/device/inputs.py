"""What a device runs a graph on, and what CPU says it should give: the inputs the emulator verified the target
on and CPU's answers for them, as the build kept them in the target's folder (``compile/ran.py``: the model's real
samples, else generated inputs), or its recipe's own inputs, which the build kept beside the graph.

A device job runs every input on its own, so a stateful graph (``samples.stream``) runs each step with the
state ONNX Runtime on CPU carried into it in the build; the judge is then per step. The reference is the prepared
graph on CPU (ONNX Runtime), the graph the binary was compiled from, as the build ran it: nothing runs here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..compile.ran import DEVICE_MAX_BYTES, MAX_ENTRIES, Ran, keep_spread, read_ran
from ..compile.records import BuildReport
from ..errors import PackageError
from ..matrix.schema import Model
from ..prepare.graph import Prepared
from ..recipes import recipe_for


@dataclass(frozen=True)
class DeviceInputs:
    model: str
    graph: str
    names: list[str]  # one per entry: "arctic_a0007.wav step 12"
    feeds: list[dict[str, np.ndarray]]
    reference: list[list[np.ndarray]]  # the prepared graph's outputs on CPU, per entry
    output_names: list[str]
    note: str
    verdict: Literal["real-samples", "generated-inputs"]
    argmax: dict[str, float] = field(default_factory=dict)

    @property
    def entries(self) -> dict[str, list[np.ndarray]]:
        """The dataset a device job takes: input name -> one array per entry."""
        return {k: [f[k] for f in self.feeds] for k in self.feeds[0]} if self.feeds else {}


def device_inputs(report: BuildReport, m: Model, prep: Prepared, max_entries: int = MAX_ENTRIES) -> DeviceInputs:
    """The inputs of one graph for a device run, with the CPU reference (at most ``max_entries``, spread evenly over
    the samples so every recording is represented), as the build kept them: nothing is computed here. A graph
    verified on its own takes what its verification ran (its targets' ``ran.npz``); a recipe's graph the recipe's
    inputs, kept beside the prepared graph (``builder/recipe_inputs.py``)."""
    ran, note = _kept(report, m, prep)
    names, feeds, reference = ran.names, ran.feeds, ran.outputs
    pick = keep_spread([sum(a.nbytes for a in f.values()) for f in feeds], max_entries, DEVICE_MAX_BYTES)
    if ran.total > len(pick):
        note += f"; {len(pick)} of them, spread evenly"
    if len(pick) < len(feeds):
        names, feeds, reference = [names[i] for i in pick], [feeds[i] for i in pick], [reference[i] for i in pick]
    argmax = {k: v for b in m.sample_blocks() for k, v in b.argmax.items()}
    return DeviceInputs(model=m.name, graph=prep.graph, names=names, feeds=feeds, reference=reference,
                        output_names=[t.name for t in prep.outputs], note=note,
                        verdict="real-samples" if ran.real else "generated-inputs", argmax=argmax)


def _kept(report: BuildReport, m: Model, prep: Prepared) -> tuple[Ran, str]:
    """What the build kept for the graph (a recipe's inputs beside the kept graph first), and what it is, in
    words."""
    own = read_ran(prep.path.parent) if recipe_for(m) is not None else None  # beside the graph the build kept
    if own is not None:
        return own, own.note or "the recipe's inputs"
    for r in report.records:
        if r.model == m.name and r.graph == prep.graph and r.built:
            ran = read_ran(report.path.parent / r.id)
            if ran is not None:
                what = (r.verify_inputs or "real samples") if ran.real else f"{ran.total} generated inputs"
                return ran, what + ("; each step with the state CPU carries into it" if ran.streams else "")
    raise PackageError(f"{m.name}/{prep.graph}: the build kept no inputs for a device to run it on (ran.npz in a "
                       "target's folder, or beside the graph in models/ for a recipe's graph)",
                       hint="run `qnn-release build` again: it verifies the targets again and keeps their compiles")
