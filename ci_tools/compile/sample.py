"""The archive's ``sample/``: one input per graph and what ONNX Runtime on CPU answers for it, for an app's smoke
test on a device (every model archive and the twin carry the same). Copied from what the target's verification
ran (``compile/ran.py``): the first input the HTP emulator ran whose expected outputs say something, or, for a
target no emulator ran, the generated input its build kept. Nothing is computed here."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ..compile.ran import SAMPLE_TRIES, Ran, no_expectation, read_ran
from ..errors import PackageError
from ..prepare.graph import Prepared


def ran_of(folder: Path, target_id: str) -> Ran:
    """The target folder's record of what its verification ran; refused when it has none."""
    ran = read_ran(folder)
    if ran is None:
        raise PackageError(f"{target_id}: no ran.npz in {folder} (what the verification ran: written by this "
                           "qnn-release's build)", hint="run `qnn-release build` again: it verifies the targets "
                                                        "again and keeps their compiles (nothing recompiles)")
    return ran


def sample_entry(ran: Ran, prep: Prepared, constant_ok: list[str]) -> int:
    """The entry an archive's ``sample/`` takes: the first whose CPU answer is an expectation (not NaN, not one
    constant everywhere: an all-zero binary would match it)."""
    fault = None
    for i, expected in enumerate(ran.outputs):
        fault = no_expectation(ran.output_names, expected, constant_ok)
        if fault is None:
            return i
    where = "the inputs its verification ran" if ran.emulator else f"{SAMPLE_TRIES} generated sample inputs"
    raise PackageError(f"{prep.model}/{prep.graph}: the archive's expected output {fault} (CPU on {where}): an "
                       "app's smoke test would pass any binary on it",
                       hint="the model needs inputs in its range (`inputs.<name>.range` in the matrix), or "
                       "declare the output in options.constant_outputs if it is constant by design")


def sample_members(top: str, prep: Prepared, ran: Ran, constant_ok: list[str]) -> list[tuple[str, bytes]]:
    """The archive's ``sample/<graph>/``: the sample entry's inputs and CPU's outputs, as .npy files."""
    i = sample_entry(ran, prep, constant_ok)
    members = []
    for kind, names, arrays in (("inputs", [t.name for t in prep.inputs], [ran.feeds[i][t.name] for t in prep.inputs]),
                                ("outputs", ran.output_names, ran.outputs[i])):
        for name, arr in zip(names, arrays):
            buf = io.BytesIO()
            np.save(buf, np.asarray(arr), allow_pickle=False)
            safe = name.replace("/", "_")
            members.append((f"{top}/sample/{prep.graph}/{kind}/{safe}.npy", buf.getvalue()))
    return members
