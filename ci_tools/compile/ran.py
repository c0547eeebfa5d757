"""What a target's verification ran, kept in its folder (``ran.npz``): the inputs the HTP emulator ran (a stream's
steps as CPU fed them) and what ONNX Runtime on CPU answered for them, written once when the target is built.

Later stages copy from it and compute nothing: ``package`` takes the archive's ``sample/`` (the first input whose
expected outputs say something), ``device-numbers`` the inputs a device runs and the answers it is judged against.
A target that was not run on an emulator (a route without one here, or a recipe's graph, which its recipe checks
with the chip's other graphs) keeps a generated input and CPU's answer, said as such (``emulator`` false).
A recipe's graph also has the recipe's own inputs kept beside its prepared graph in the same form
(``builder/recipe_inputs.py``), the ones a device runs it on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..util.files import write_atomic
from ..util.metrics import nonfinite

RAN_FILE = "ran.npz"
RAN_VERSION = 1  # in the targets' key: a target built before its folder kept ran.npz is verified again
MAX_ENTRIES = 64  # inputs kept per target: enough for a device's judgement, spread evenly over the samples
MAX_BYTES = 64 << 20  # and at most this much of them (each chip's folder keeps its own copy)
DEVICE_MAX_BYTES = 256 << 20  # a device's inputs of a recipe's graph, once per graph (a speech decoder's step with
# its caches is ~50 MB: a handful of them); also the most a device job takes
SAMPLE_TRIES = 4  # generated inputs tried for one whose expected outputs say something


@dataclass(frozen=True)
class Ran:
    names: list[str]  # one per entry: "arctic_a0007.wav step 12", "generated sample 0"
    feeds: list[dict[str, np.ndarray]]
    outputs: list[list[np.ndarray]]  # CPU's answers, per entry, in ``output_names`` order
    output_names: list[str]
    emulator: bool  # the HTP emulator ran these (False: no emulator here, or a recipe's graph: CPU only)
    real: bool = False  # the model's real samples (False: generated inputs)
    streams: bool = False  # a stateful graph's steps, each fed the state CPU carried into it
    total: int = 0  # entries before they were thinned to MAX_ENTRIES and MAX_BYTES
    note: str = ""  # what they are, in words, when the target's record does not say it (a recipe's inputs)


def keep_spread(sizes: list[int], max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> list[int]:
    """The entries kept of those of ``sizes`` (bytes each): at most ``max_entries`` and ``max_bytes``, spread evenly
    so every sample is seen."""
    count = len(sizes)
    keep = min(count, max_entries, max(1, max_bytes // max(1, max(sizes, default=1))))
    if keep >= count:
        return list(range(count))
    return sorted(set(np.linspace(0, count - 1, keep).round().astype(int).tolist()))


def write_ran(folder: Path, ran: Ran, max_bytes: int | None = MAX_BYTES) -> None:
    """``ran.npz`` in a target's folder (the folder is still private to its job: written before it is finished),
    thinned to ``max_bytes`` of inputs and answers (None: as it is, thinned by its writer)."""
    import io

    sizes = [sum(np.asarray(a).nbytes for a in f.values()) + sum(np.asarray(o).nbytes for o in outs)
             for f, outs in zip(ran.feeds, ran.outputs)]  # inputs and CPU's answers: what the file holds
    pick = keep_spread(sizes, max_bytes=max_bytes) if max_bytes is not None else list(range(len(sizes)))
    arrays: dict[str, np.ndarray] = {"names": np.array([ran.names[i] for i in pick]),
                                     "output_names": np.array(ran.output_names), "emulator": np.array(ran.emulator),
                                     "real": np.array(ran.real), "streams": np.array(ran.streams),
                                     "total": np.array(ran.total or len(ran.feeds)), "note": np.array(ran.note)}
    for j, i in enumerate(pick):
        arrays.update({f"in/{j}/{k}": np.asarray(v) for k, v in ran.feeds[i].items()})
        arrays.update({f"out/{j}/{n}": np.asarray(o) for n, o in enumerate(ran.outputs[i])})
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    write_atomic(folder / RAN_FILE, buf.getvalue())


def read_ran(folder: Path) -> Ran | None:
    """A target folder's ``ran.npz``; None when it has none (built by an older qnn-release)."""
    path = folder / RAN_FILE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        names = [str(n) for n in z["names"]]
        output_names = [str(n) for n in z["output_names"]]
        feeds: list[dict[str, np.ndarray]] = [{} for _ in names]
        outputs: list[list[np.ndarray]] = [[np.empty(0)] * len(output_names) for _ in names]
        for key in z.files:
            side, _, rest = key.partition("/")
            if side in ("in", "out"):
                i, _, name = rest.partition("/")
                if side == "in":
                    feeds[int(i)][name] = z[key]
                else:
                    outputs[int(i)][int(name)] = z[key]
        return Ran(names=names, feeds=feeds, outputs=outputs, output_names=output_names, emulator=bool(z["emulator"]),
                   real=bool(z["real"]), streams=bool(z["streams"]), total=int(z["total"]),
                   note=str(z["note"]) if "note" in z.files else "")


def no_expectation(output_names: list[str], expected: list[np.ndarray], constant_ok: list[str]) -> str | None:
    """Why CPU's outputs are no expectation to compare a binary with: NaN/Inf, or a float output that is one
    constant everywhere (an integer output, labels, may be; so may an output declared constant)."""
    for name, arr in zip(output_names, expected):
        a = np.asarray(arr)
        bad = nonfinite(a) if a.dtype.kind == "f" else 0
        if bad:
            return f"'{name}' would be {bad} NaN/Inf value(s)"
        if a.dtype.kind == "f" and a.size > 1 and name not in constant_ok and float(a.min()) == float(a.max()):
            return f"'{name}' would be the constant {float(a.flat[0]):g} everywhere"
    return None
