"""After the targets: each model's twins measured and kept beside the build (``builder/twin.py``).

A model whose every graph is built for some chip gets its float twin, and one per quantized precision whose QDQ
graphs the build compiled its binaries from, each measured through on-device compile for the most capable of those
chips. ``package`` finds the same twins by the same rules (``complete_groups``, ``twin_soc``, ``quantized_twins``)
and copies what is kept here. A twin that cannot be measured is a warning here and a refusal there.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ..compile.records import TargetRecord
from ..compile.sample import ran_of
from ..errors import QnnReleaseError
from ..matrix.schema import LoadedMatrix, Model
from ..prepare.graph import Prepared
from ..recipes import TwinPart, recipe_for
from ..util.text import clip
from .twin import (
    TWINS,
    GraphSamples,
    TwinInputs,
    TwinOf,
    failed_twin,
    no_twin,
    stage_recipe_twin,
    stage_twin,
    twin_stem,
)

if TYPE_CHECKING:
    from ..catalog.socs import Soc
    from ..sources.store import SourceStore

Group = tuple[str, str, str]  # (model, soc, precision): one archive
TWIN_STREAM_STEPS = 32  # a stateful twin is judged on each stream's first steps (the emulator's time)


def complete_groups(records: list[TargetRecord], loaded: LoadedMatrix
                    ) -> tuple[dict[Group, list[TargetRecord]], list[str]]:
    """The (model, chip, precision) whose every graph is built, and a line for each one that is not."""
    groups: dict[Group, list[TargetRecord]] = {}
    for r in records:
        groups.setdefault((r.model, r.soc, r.precision), []).append(r)
    complete, skipped = {}, []
    for key, rs in sorted(groups.items()):
        model = loaded.matrix.model(key[0])
        ok = [r for r in rs if r.built]
        if len(ok) != len(model.graphs):
            skipped.append(f"{key[0]}/{key[1]}/{key[2]} ({len(ok)} of {len(model.graphs)} graphs built)")
            continue
        complete[key] = ok
    return complete, skipped


def twin_soc(loaded: LoadedMatrix, complete: dict[Group, list[TargetRecord]], model: str) -> Soc:
    """The chip a model's twins are measured for: the most capable one it has every graph built for."""
    socs = [loaded.catalog.get(k[1]) for k in complete if k[0] == model]
    return max(socs, key=lambda s: (int(s.htp_arch or 0), s.soc_model or 0))


def quantized_twins(complete: dict[Group, list[TargetRecord]], name: str, preps: list[Prepared]
                    ) -> list[tuple[str, dict[str, Path]]]:
    """Per quantized precision of the model whose every graph's binaries were compiled from a QDQ graph the target
    records name (the ort route's, in the prepared graph's folder), those graphs; the records decide, not what is
    on disk (a missing one is the twin's failure, never a twin left out). The qairt route quantizes in its
    converter: no twin."""
    found: dict[str, dict] = {}
    for (model, _, precision), records in sorted(complete.items()):
        if model != name or precision == "fp16" or precision in found:
            continue
        by_graph = {r.graph: r.quantized_graph for r in records if r.quantized_graph}
        if all(p.graph in by_graph for p in preps):
            found[precision] = {p.graph: p.path.parent / by_graph[p.graph] for p in preps}
    return sorted(found.items())


def stage_twins(run, records: list[TargetRecord]) -> None:
    """Every twin of the build's models, measured one at a time (each in a process of its own: its first load's
    time and memory are its own) and kept in ``<out>/twins/`` (``run``: the build's ``_Run``); the twins of models
    this build did not make are removed. An interrupt stops here (the caller records the build as interrupted)."""
    try:
        complete, _ = complete_groups(records, run.loaded)
    except Exception as e:  # never the build's failure: package finds no twin and says so
        run.progress.info(f"warning: the twins could not be made: {_as_error(e, 'twins').message}")
        return
    kept: set[str] = set()
    for name in sorted({k[0] for k in complete}):
        try:
            due = _due(run, complete, name)
        except Exception as e:  # a model's twins never stop the build: package refuses them with this reason
            stem = twin_stem(name)
            kept.add(stem)
            soc = SimpleNamespace(name=None)
            failed_twin(TwinOf(run.loaded.matrix.model(name), soc, run.cache, run.out, run.when), stem,
                        error := _as_error(e, stem))
            run.progress.info(f"twin {stem} FAILED: {error.message}")
            continue
        for of, preps, quantized in due:
            stem = twin_stem(name, quantized[0] if quantized else "float")
            kept.add(stem)
            run.progress.info(_one(run, (of, stem), preps, complete, quantized))
    try:
        _prune(run.out / TWINS, kept)
    except OSError as e:  # what package never reads: left where it is
        run.progress.info(f"warning: {run.out / TWINS}: could not remove the twins of models not built ({e})")


def _due(run, complete: dict[Group, list[TargetRecord]], name: str) -> list[tuple[TwinOf, list[Prepared], Any]]:
    """A model's twins: (whose, its prepared graphs, None or (precision, its QDQ graphs)); none when a graph was
    not prepared."""
    model = run.loaded.matrix.model(name)
    mine = {p.graph: p for p in run.prepared if p.model == name}
    preps = [mine[g.name] for g in model.graphs if g.name in mine]
    if len(preps) != len(model.graphs):
        return []
    of = TwinOf(model, twin_soc(run.loaded, complete, name), run.cache, run.out, run.when)
    return [(of, preps, q) for q in [None, *quantized_twins(complete, name, preps)]]


def _one(run, twin: tuple[TwinOf, str], preps: list[Prepared], complete: dict, quantized: tuple[str, dict] | None
         ) -> str:
    """One twin (whose, its stem) measured and kept; what became of it, in a line."""
    of, stem = twin
    try:
        gone = [str(p) for p in (quantized[1].values() if quantized else ()) if not p.is_file()]
        if gone:
            raise QnnReleaseError(f"the QDQ graph {gone[0]} its binaries were compiled from is gone",
                                  hint="run `qnn-release build --force` (it quantizes again)")
        if recipe_for(of.model) is not None:
            record = _recipe_twin(run, twin, preps, quantized)
        else:
            record = stage_twin(of, preps, partial(_samples, run, of.model, _built(complete, of.model.name)),
                                quantized)
    except Exception as e:  # one twin's failure never stops the others, nor the build
        error = _as_error(e, stem)
        failed_twin(of, stem, error)
        return f"twin {stem} FAILED: {error.message} (package refuses the release until it is measured)"
    if record.get("none"):
        return f"twin {stem}: none (its recipe ships no twin)"
    runs = [g["on_device_compile"] for g in record["values"]["graphs"]]
    if any("not_measured" in r for r in runs):
        return f"twin {stem}: kept, not measured ({runs[0]['not_measured']})"
    verdict = "verified" if all(r.get("verified") for r in runs) else "NOT verified"
    return (f"twin {stem}: on-device compile for {of.soc.name} on the emulator, {verdict} "
            f"({clip(str(runs[0].get('inputs')), 100)})")


def _as_error(e: Exception, stem: str) -> QnnReleaseError:
    """A twin's failure in one line beginning with its name (once)."""
    if isinstance(e, QnnReleaseError):
        message, hint = e.message, e.hint
    else:
        message, hint = f"{type(e).__name__}: {e}", "an unexpected error (run with --verbose); please report it"
    model = stem.rsplit("-", 2)[0]
    for prefix in (f"{stem}: ", f"{model}: "):
        message = message.removeprefix(prefix)
    return QnnReleaseError(clip(f"{stem}: {message}".splitlines()[0], 400), hint=hint)


def _prune(folder: Path, kept: set[str]) -> None:
    """The twins of models this build did not make (its report does not name them: package never reads them)."""
    if not folder.is_dir():
        return
    for p in folder.iterdir():
        stem = p.name[:-len(".json")] if p.name.endswith(".json") else p.name
        if stem not in kept and not p.name.startswith("."):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def _built(complete: dict[Group, list[TargetRecord]], model: str) -> dict[str, str]:
    """Per graph, a built target of it (what its verification ran is the same on every chip)."""
    found: dict[str, str] = {}
    for key, records in sorted(complete.items()):
        if key[0] == model:
            for r in records:
                found.setdefault(r.graph, r.id)
    return found


def _samples(run, model: Model, built: dict[str, str], prep: Prepared) -> GraphSamples:
    """What a twin graph's sample and measurement come from: its binaries' verification, and its real samples."""
    target_id = built[prep.graph]
    return GraphSamples(ran=ran_of(run.out / target_id, target_id),
                        real=real_inputs(run.store, run.loaded, model, prep))


def _recipe_twin(run, twin: tuple[TwinOf, str], preps: list[Prepared],
                 quantized: tuple[str, dict[str, Path]] | None) -> dict:
    """A recipe's model's twin of a precision: its runtime beside the graphs (``Recipe.twin``); a record of none
    where the recipe has no twin. Returns the record."""
    of, stem = twin
    recipe = recipe_for(of.model)
    assert recipe is not None  # the caller asked
    graphs = {p.graph: p.path for p in preps}
    extras = recipe.twin(TwinPart(loaded=run.loaded, export=run.exports.get(of.model.name), model=of.model,
                                  graphs=quantized[1] if quantized else graphs, cache=run.cache,
                                  precision=quantized[0] if quantized else "float"))
    if extras is None:
        return no_twin(of, stem)
    return stage_recipe_twin(of, extras, graphs, quantized)


def real_inputs(store: SourceStore, loaded: LoadedMatrix, model: Model, prep: Prepared) -> TwinInputs | None:
    """A twin graph's real samples (8; a stream's first steps), as its binaries' verification reads them."""
    from ..prepare.graph import complete_feed
    from .inputs import samples_of

    ss = samples_of(store, loaded, model, prep.graph, prep.inputs, prep.outputs)
    if ss is None:
        return None
    streams = [(n, [complete_feed(f, prep.inputs) for f in steps[:TWIN_STREAM_STEPS]])  # a carried input left
               for n, steps in ss.streams[:8] if steps]  # out: zeros first
    return TwinInputs(feeds=[f for _, steps in streams for f in steps], names=[n for n, _ in streams],
                      note=ss.note + (f" (the first {TWIN_STREAM_STEPS} steps of each stream)" if ss.stream else ""),
                      argmax=ss.argmax if ss.stream is None else None, stream=ss.stream,
                      steps=[len(s) for _, s in streams] if ss.stream is not None else None)
