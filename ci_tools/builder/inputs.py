"""What a graph is verified and calibrated on: its real samples, its recipe's inputs, or generated inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import QnnReleaseError
from ..matrix.schema import LoadedMatrix, Model
from ..prepare.graph import Prepared, TensorInfo, generate_inputs
from ..prepare.quantize import load_calibration
from ..recipes import recipe_for
from ..sources.samples import SampleSet, calibration_feeds, make_samples
from ..sources.store import SourceStore, sha256_file


def sample_set(store: SourceStore, loaded: LoadedMatrix, m: Model, prep: Prepared) -> SampleSet | None:
    """The graph's real samples: the model's ``samples`` (pinned files, front end), or the older
    ``calibration.path`` folder of .npz files in the repository."""
    return samples_of(store, loaded, m, prep.graph, prep.inputs, prep.outputs)


def samples_of(store: SourceStore, loaded: LoadedMatrix, m: Model, graph: str, inputs: list[TensorInfo],
               outputs: list[TensorInfo]) -> SampleSet | None:
    """``sample_set`` for a graph's inputs and outputs (prepare's check runs on them before it is written)."""
    block = m.samples_for(graph, [t.name for t in inputs])
    if block is not None:
        files = store.fetch_source(m, block.source)
        return make_samples(m, graph, inputs, files, outputs)
    if m.samples is not None:
        return None  # the model's samples feed its other graphs
    if m.calibration.path and recipe_for(m) is None:
        folder = (loaded.root / m.calibration.path).resolve()
        feeds = load_calibration(folder, inputs)[:8]  # verify on 8 at most (the emulator's time)
        digests = {p.name: sha256_file(p) for p in sorted(folder.glob("*.npz"))[:8]}
        return SampleSet(streams=[(n, [f]) for n, f in zip(digests, feeds)], files=digests,
                         note=f"real samples: {len(feeds)} .npz files from calibration.path ({m.calibration.path})")
    return None


def calibration(loaded: LoadedMatrix, m: Model, prep: Prepared, src: Path, precision: str,
                 ss: SampleSet | None) -> list[dict[str, np.ndarray]] | None:
    """What a quantized precision is calibrated on: its recipe's inputs, or the model's real samples (a
    stream's steps with the state CPU carries into them)."""
    recipe = recipe_for(m)
    feeds = recipe.calibration(loaded, m, prep.graph, src) if recipe is not None else None
    if feeds is not None:
        return feeds
    if ss is None:
        return None
    from ..prepare.graph import cpu_session

    sess = cpu_session(prep.path)
    return calibration_feeds(ss, lambda f: sess.run(None, f), [o.name for o in prep.outputs])


def generated(m: Model, prep: Prepared) -> list[dict[str, np.ndarray]]:
    return generate_inputs(prep.inputs, count=m.calibration.samples, seed=m.calibration.seed,
                           ranges=prep.input_ranges)


def check_samples(store: SourceStore, loaded: LoadedMatrix, m: Model, graph: str):
    """What prepare checks a graph against its original on: a function of the prepared inputs and outputs giving
    the first step of each real sample (None without them), and a digest of what the samples are (None without
    them; the prepare key holds it). A recipe's model is checked by its recipe, on generated inputs here."""
    if recipe_for(m) is not None or (not m.sample_blocks() and not m.calibration.path):
        return None, None
    import hashlib
    import json

    pins = {"samples": [b.model_dump(mode="json") for b in m.sample_blocks()],
            "calibration": m.calibration.path and sorted(
                sha256_file(p) for p in (loaded.root / m.calibration.path).glob("*.npz"))}

    def first_steps(inputs: list[TensorInfo], outputs: list[TensorInfo]) -> dict[str, dict[str, np.ndarray]] | None:
        try:
            ss = samples_of(store, loaded, m, graph, inputs, outputs)
        except QnnReleaseError:  # a sample mistake is the samples' one-line error on the model's targets, later
            return None
        return {name: steps[0] for name, steps in ss.streams if steps} if ss is not None else None

    return first_steps, hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()
