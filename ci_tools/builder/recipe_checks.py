"""After the compiles: each recipe model's chip builds judged together by its recipe, then written.

A model with a recipe check (``verify.kind``) has its compiles in the target store only; its targets'
folders in ``out`` are written here, once, with the recipe's verdict in ``target.json``: nothing rewrites
a finished record, and a folder that has one always says how it was verified.
"""

from __future__ import annotations

from pathlib import Path

from ..compile.records import FAILED, TARGET_FILE, TargetRecord
from ..compile.target_job import finalize
from ..recipes import ChipCheck, recipe_for


def recipe_checks(run, interrupted: bool) -> None:
    """Judge and write every recipe model's targets of ``run`` (its records replaced by the judged ones)."""
    for name, export in run.exports.items():
        model = run.loaded.matrix.model(name)
        recipe = recipe_for(model)
        if recipe is None:  # an export is kept for a recipe's model only
            continue
        mine = [r for r in run.records.values() if r.model == name and r.built]
        # judged: its folder in ``out`` carries the verdict already (an earlier build, or a downloaded chip job)
        judged = {r.id for r in mine if r.verify_kind == recipe.kind}
        if interrupted:
            for r in mine:
                if r.id not in judged:
                    run.records[r.id] = r.with_(status=FAILED, error="interrupted before its chip was verified",
                                                exit_code=130)
            continue
        groups: dict[tuple[str, str], list[TargetRecord]] = {}
        for r in mine:
            groups.setdefault((r.soc, r.precision), []).append(r)
        due = {k: rs for k, rs in groups.items()
               if len(rs) == len(model.graphs) and any(r.id not in judged for r in rs)}
        folders = {r.id: _files(run, r) for r in mine}
        if due:
            check = ChipCheck(loaded=run.loaded, model=model, export=export, groups=due, folders=folders,
                              settings=run.settings, cache=run.cache, progress=run.progress)
            for r in recipe.check_chips(check):
                run.records[r.id] = r
        # every target not judged before: as judged now, or as compiled when its chip's graphs are not all built
        rewrite = {r.id for rs in due.values() for r in rs} | {r.id for r in mine if r.id not in judged}
        for target_id in sorted(rewrite):
            finalize(folders[target_id], run.out / target_id, run.records[target_id])


def _files(run, r: TargetRecord) -> Path:
    """Where a target's files are: its compile in the store, else its folder in ``out``."""
    entry = run.cache / "targets" / r.key
    return entry if r.key and (entry / TARGET_FILE).is_file() else run.out / r.id
