"""The archive's ``sample/``: one input per graph and what ONNX Runtime on CPU answers for it, for an app's smoke
test on a device (every model archive and the twin carry the same)."""

from __future__ import annotations

import numpy as np

from ..errors import PackageError
from ..prepare.graph import Prepared, generate_inputs, run_cpu
from ..util.metrics import nonfinite

SAMPLE_TRIES = 4


def _no_expectation(prep: Prepared, expected: list, constant_ok: list[str]) -> str | None:
    """Why CPU's outputs are no expectation to compare a binary with: NaN/Inf, or a float output that is one
    constant everywhere (an integer output, labels, may be)."""
    for t, arr in zip(prep.outputs, expected):
        a = np.asarray(arr)
        bad = nonfinite(a) if a.dtype.kind == "f" else 0
        if bad:
            return f"'{t.name}' would be {bad} NaN/Inf value(s)"
        if a.dtype.kind == "f" and a.size > 1 and t.name not in constant_ok and float(a.min()) == float(a.max()):
            return f"'{t.name}' would be the constant {float(a.flat[0]):g} everywhere"
    return None


def sample_members(top: str, prep: Prepared, seed: int, constant_ok: list[str]) -> list[tuple[str, bytes]]:
    """The archive's ``sample/``: inputs and the outputs CPU gives for them, which an app's smoke test on a phone
    compares with. Checked as a verification is before it is written: an expected output that is NaN, or one
    constant everywhere (an all-zero binary would match it), is no expectation."""
    import io

    fault = None
    for attempt in range(SAMPLE_TRIES):  # the first generated input whose expected outputs say something
        feeds = generate_inputs(prep.inputs, count=1, seed=seed + 7 + attempt, ranges=prep.input_ranges)
        (expected,) = run_cpu(prep.path, feeds)
        fault = _no_expectation(prep, expected, constant_ok)
        if fault is None:
            break
    if fault is not None:
        raise PackageError(f"{prep.model}/{prep.graph}: the archive's expected output {fault} (CPU on {SAMPLE_TRIES} "
                           "generated sample inputs): an app's smoke test would pass any binary on it",
                           hint="the model needs inputs in its range (`inputs.<name>.range` in the matrix), or "
                           "declare the output in options.constant_outputs if it is constant by design")
    members = []
    for kind, names, arrays in (("inputs", [t.name for t in prep.inputs], [feeds[0][t.name] for t in prep.inputs]),
                                ("outputs", [t.name for t in prep.outputs], expected)):
        for name, arr in zip(names, arrays):
            buf = io.BytesIO()
            np.save(buf, np.asarray(arr), allow_pickle=False)
            safe = name.replace("/", "_")
            members.append((f"{top}/sample/{prep.graph}/{kind}/{safe}.npy", buf.getvalue()))
    return members
