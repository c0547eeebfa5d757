"""What a device runs a graph on, and what CPU says it should give: the inputs the emulator verified the target
on and CPU's answers for them, as the build kept them in the target's folder (``compile/ran.py``: the model's real
samples, else generated inputs), or its recipe's own inputs.

A device job runs every input on its own, so a stateful graph (``samples.stream``) runs each step with the
state ONNX Runtime on CPU carried into it in the build; the judge is then per step. The reference is the prepared
graph on CPU (ONNX Runtime), the graph the binary was compiled from: for a recipe's inputs it is run here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from ..compile.ran import keep_spread, read_ran
from ..compile.records import BuildReport
from ..errors import PackageError
from ..matrix.schema import LoadedMatrix, Model
from ..prepare.graph import Prepared, cpu_session
from ..recipes import recipe_for

MAX_ENTRIES = 64  # inputs per graph: enough to judge, few enough for a device job's dataset
MAX_BYTES = 256 << 20  # a speech decoder's step with its caches is ~50 MB: a handful of them


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


def device_inputs(loaded: LoadedMatrix, report: BuildReport, m: Model, prep: Prepared, cache: Path,
                  max_entries: int = MAX_ENTRIES) -> DeviceInputs:
    """The inputs of one graph for a device run, with the CPU reference (at most ``max_entries`` and
    ``MAX_BYTES``, spread evenly over the samples so every recording is represented). A graph verified on its own
    takes what its verification ran (``ran.npz``, CPU's answers beside it: nothing is computed again); a recipe's
    graph takes the recipe's inputs."""
    names, feeds, reference, note, real = _feeds(loaded, report, m, prep, cache)
    pick = keep_spread([sum(a.nbytes for a in f.values()) for f in feeds], max_entries, MAX_BYTES)
    if len(pick) < len(feeds):
        names, feeds = [names[i] for i in pick], [feeds[i] for i in pick]
        reference = [reference[i] for i in pick] if reference is not None else None
        note += f"; {len(pick)} of them, spread evenly"
    if reference is None:
        sess = cpu_session(prep.path)
        reference = [sess.run(None, f) for f in feeds]
    argmax = {k: v for b in m.sample_blocks() for k, v in b.argmax.items()}
    return DeviceInputs(model=m.name, graph=prep.graph, names=names, feeds=feeds, reference=reference,
                        output_names=[t.name for t in prep.outputs], note=note,
                        verdict="real-samples" if real else "generated-inputs", argmax=argmax)


def _feeds(loaded: LoadedMatrix, report: BuildReport, m: Model, prep: Prepared, cache: Path
           ) -> tuple[list[str], list[dict[str, np.ndarray]], list[list[np.ndarray]] | None, str, bool]:
    """(names, feeds, CPU's answers for them when recorded, what they are, whether they are real samples)."""
    recipe = recipe_for(m)
    own = recipe.device_feeds(loaded, report, m, prep.graph, cache) if recipe is not None else None
    if own is not None:
        return own.names, own.feeds, None, own.note, own.real
    for r in report.records:
        if r.model == m.name and r.graph == prep.graph and r.built:
            ran = read_ran(report.path.parent / r.id)
            if ran is not None:
                what = (r.verify_inputs or "real samples") if ran.real else f"{ran.total} generated inputs"
                how = "; each step with the state CPU carries into it" if ran.streams else ""
                kept = f"; {len(ran.feeds)} of them, spread evenly" if ran.total > len(ran.feeds) else ""
                return ran.names, ran.feeds, ran.outputs, f"{what}{how}{kept}", ran.real
    raise PackageError(f"{m.name}/{prep.graph}: no target of the build keeps what its verification ran (ran.npz)",
                       hint="run `qnn-release build` again: it verifies the targets again and keeps their compiles")
