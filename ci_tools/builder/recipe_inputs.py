"""After the recipe checks: what a device runs each recipe graph on, kept beside the build.

A recipe's graph is verified with its chip's other graphs by the recipe, so no target of it keeps the inputs it
ran; the recipe says what a device should run it on (``Recipe.device_feeds``: Whisper's decoded steps, a voice's
windows). The build keeps those, thinned and spread evenly, with what ONNX Runtime on CPU answers for them on the
prepared graph, as ``ran.npz`` beside the kept graph (``<out>/models/<model>/<graph>/``, ``compile/ran.py``'s
form): ``device-numbers`` runs nothing on CPU. Made once per content (the prepared graph, the recipe's export and
inputs) in the build's cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from ..compile.ran import DEVICE_MAX_BYTES, MAX_ENTRIES, RAN_FILE, Ran, keep_spread, write_ran
from ..errors import QnnReleaseError
from ..prepare.graph import Prepared, cpu_session
from ..recipes import code_digest, recipe_for
from ..util.files import link_or_copy
from .kept import is_current, kept_graph

INPUTS_VERSION = 1  # in the cache key: a change here makes them again


def drop_recipe_inputs(run) -> None:
    """The earlier build's recipe inputs beside this build's recipe graphs, removed before the report is written:
    a build stopped before ``keep_recipe_inputs`` leaves none, never stale ones (``device-numbers`` then refuses)."""
    for prep in run.prepared:
        if prep.model in run.exports:
            (kept_graph(run.out, prep).parent / RAN_FILE).unlink(missing_ok=True)


def keep_recipe_inputs(run) -> None:
    """Each built recipe graph's device inputs and CPU's answers, beside its kept graph (``run``: the build's
    ``_Run``; after ``drop_recipe_inputs`` and ``keep``). After a failure (a warning) or for a recipe that has
    none, there are none."""
    for name, export in sorted(run.exports.items()):
        model = run.loaded.matrix.model(name)
        recipe = recipe_for(model)
        built = {r.graph for r in run.records.values() if r.model == name and r.built}
        for prep in [p for p in run.prepared if p.model == name]:
            dest = kept_graph(run.out, prep).parent
            if recipe is None or prep.graph not in built or not is_current(run.out, prep):
                continue
            try:
                made = _made(run, recipe, export, prep)
            except Exception as e:  # a help for a later stage: never the build's failure
                what = e.message if isinstance(e, QnnReleaseError) else f"{type(e).__name__}: {e}".splitlines()[0]
                print(f"warning: {name}/{prep.graph}: the inputs a device runs it on could not be kept ({what}); "
                      "device-numbers will refuse it", file=sys.stderr)
                continue
            if made is not None:
                tmp = dest / f".{RAN_FILE}.{os.getpid()}"
                try:
                    link_or_copy(made, tmp)
                    os.replace(tmp, dest / RAN_FILE)
                finally:
                    tmp.unlink(missing_ok=True)


def _made(run, recipe, export: Path, prep: Prepared) -> Path | None:
    """The recipe's inputs for ``prep`` with CPU's answers, in the build's cache (None: the recipe has none)."""
    import onnxruntime

    model = run.loaded.matrix.model(prep.model)
    # what they are made of: the graph, the recipe's export and inputs, the model's settings, the runtime
    key = hashlib.sha256(json.dumps([INPUTS_VERSION, code_digest([type(recipe).__module__]), prep.sha256, prep.graph,
                                     run.recipe_digests.get(prep.model),
                                     model.verify.model_dump(mode="json") if model.verify else None,
                                     model.calibration.model_dump(mode="json"), onnxruntime.__version__,
                                     MAX_ENTRIES, DEVICE_MAX_BYTES], sort_keys=True).encode()).hexdigest()
    folder = run.cache / "recipe-inputs" / key
    if (folder / RAN_FILE).is_file():
        return folder / RAN_FILE
    own = recipe.device_feeds(run.loaded, export, model, prep.graph, run.cache)
    if own is None or not own.feeds:
        return None
    pick = keep_spread([sum(a.nbytes for a in f.values()) for f in own.feeds], MAX_ENTRIES, DEVICE_MAX_BYTES)
    feeds, names = [own.feeds[i] for i in pick], [own.names[i] for i in pick]
    sess = cpu_session(prep.path)
    folder.mkdir(parents=True, exist_ok=True)  # (the count kept is said by whoever reads it: ``total`` is here)
    write_ran(folder, Ran(names=names, feeds=feeds, outputs=[sess.run(None, f) for f in feeds],
                          output_names=[t.name for t in prep.outputs], emulator=False, real=own.real,
                          total=len(own.feeds), note=own.note), max_bytes=None)  # thinned once, by inputs
    return folder / RAN_FILE
