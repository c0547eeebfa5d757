"""What a device runs a graph on, and what CPU says it should give: the same real samples the emulator
verified the target on (the model's ``samples``, or its recipe's own inputs), else generated inputs.

A device job runs every input on its own, so a stateful graph (``samples.stream``) runs each step with the
state ONNX Runtime on CPU carries into it, as calibration does; the judge is then per step. The reference
is the prepared graph on CPU (ONNX Runtime, on this machine), the graph the binary was compiled from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from ..builder.inputs import generated, sample_set
from ..compile.records import BuildReport
from ..matrix.schema import LoadedMatrix, Model
from ..prepare.graph import Prepared, cpu_session
from ..recipes import recipe_for
from ..sources.samples import run_stream
from ..sources.store import SourceStore

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
                  max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> DeviceInputs:
    """The inputs of one graph for a device run, with the CPU reference (at most ``max_entries`` and
    ``max_bytes``, spread evenly over the samples so every recording is represented)."""
    names, feeds, note, real = _feeds(loaded, report, m, prep, cache)
    per = max(1, sum(a.nbytes for a in feeds[0].values())) if feeds else 1
    keep = min(len(feeds), max_entries, max(1, max_bytes // per))
    if keep < len(feeds):
        pick = sorted(set(np.linspace(0, len(feeds) - 1, keep).round().astype(int).tolist()))
        names, feeds = [names[i] for i in pick], [feeds[i] for i in pick]
        note += f"; {len(pick)} of them, spread evenly"
    sess = cpu_session(prep.path)
    reference = [sess.run(None, f) for f in feeds]
    argmax = {k: v for b in m.sample_blocks() for k, v in b.argmax.items()}
    return DeviceInputs(model=m.name, graph=prep.graph, names=names, feeds=feeds, reference=reference,
                        output_names=[t.name for t in prep.outputs], note=note,
                        verdict="real-samples" if real else "generated-inputs", argmax=argmax)


def _feeds(loaded: LoadedMatrix, report: BuildReport, m: Model, prep: Prepared, cache: Path
           ) -> tuple[list[str], list[dict[str, np.ndarray]], str, bool]:
    recipe = recipe_for(m)
    own = recipe.device_feeds(loaded, report, m, prep.graph, cache) if recipe is not None else None
    if own is not None:
        return own.names, own.feeds, own.note, own.real
    ss = sample_set(SourceStore(cache, loaded.root), loaded, m, prep)
    if ss is None:
        feeds = generated(m, prep)
        return [f"generated {i}" for i in range(len(feeds))], feeds, f"{len(feeds)} generated inputs (seed " \
            f"{m.calibration.seed})", False
    if ss.stream is None:
        return [n for n, steps in ss.streams for _ in steps], ss.feeds, ss.note, True
    sess = cpu_session(prep.path)
    out_names = [t.name for t in prep.outputs]
    names, feeds = [], []
    for name, steps in ss.streams:
        fed, _ = run_stream(lambda f: sess.run(None, f), steps, ss.stream.carry, out_names)
        names += [f"{name} step {i}" for i in range(len(fed))]
        feeds += fed
    return names, feeds, f"{ss.note}; each step with the state CPU carries into it", True
