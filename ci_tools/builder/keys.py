"""A target's content-addressed key, and the finished target it names (in ``out`` or the store)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..compile.ran import RAN_VERSION
from ..compile.records import CACHED, OK, TargetRecord, read_target
from ..compile.target_job import COMPILE_VERSION, copy_atomic, put_in_store
from ..compile.verify import JUDGE_VERSION
from ..matrix.plan import Target
from ..matrix.schema import Model
from ..prepare.graph import Prepared, generated_inputs_note
from ..prepare.quantize import QUANT_VERSION, weight_scales
from ..recipes import recipe_for
from ..sources.samples import SampleSet


def _compile_spec(t: Target, prepared: Prepared, backend: str, sdk: str, calib: str | None) -> dict:
    """Everything the compile of ``t`` depends on. The target's identity too: a renamed model, or another model
    with the same graph, is its own target (its record names it), never the old one served under the new name."""
    spec = {"v": COMPILE_VERSION, "target": [t.id, t.model.name, t.graph], "prepared": prepared.sha256,
            "backend": backend, "sdk": sdk,
            "soc": [t.soc.name, t.soc.soc_model, t.soc.htp_arch, t.soc.vtcm_mb], "precision": t.precision,
            "options": t.model.options.model_dump(mode="json"), "calibration": calib}
    if calib:
        spec["weight_scales"] = weight_scales(t.model.calibration.per_channel)
        spec["quantizer"] = QUANT_VERSION
    return spec


def _digest(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def target_key(t: Target, prepared: Prepared, backend: str, sdk: str, calib: str | None,
               verify: str | None = None) -> str:
    """``verify``: a digest of what the target is verified on (its real samples, or how its inputs are
    generated): new samples re-verify it, never "cached" on the old inputs."""
    return _digest({**_compile_spec(t, prepared, backend, sdk, calib), "verify": verify, "judge": JUDGE_VERSION,
                    "ran": RAN_VERSION})


def compile_key(t: Target, prepared: Prepared, backend: str, sdk: str, calib: str | None) -> str:
    """What the compile alone depends on: the target's key without what it is verified on and how it is judged
    (``options.verify``), so a new threshold or new samples judge the same binaries again, never compile them
    again (a 3-layer LSTM compiles for half an hour)."""
    spec = _compile_spec(t, prepared, backend, sdk, calib)
    for judging in ("verify", "where", "constant_outputs"):
        spec["options"].pop(judging, None)
    return _digest(spec)


def _finished(folder: Path, key: str) -> TargetRecord | None:
    record = read_target(folder)
    if record is None or record.key != key or record.status != OK:
        return None
    if not all((folder / f["name"]).is_file() for f in record.files or []):
        return None
    return record


def cached(out: Path, store: Path, t: Target, key: str, recipe_check: bool = False) -> TargetRecord | None:
    """The target as already built, in ``out`` or in the content-addressed store (then copied to ``out``).

    ``recipe_check``: the model's recipe verifies a chip's graphs together; the store holds the compile and
    ``out`` the judged target, so neither is copied to the other here (``recipe_checks`` writes ``out``)."""
    record = _finished(out / t.id, key)
    if record is None:
        record = _finished(store / key, key)
        if record is None:
            return None
        if not recipe_check:
            copy_atomic(store / key, out / t.id)
    elif not recipe_check:
        put_in_store(out / t.id, store / key)
    return record.with_(status=CACHED)


def verify_digest(m: Model, prep: Prepared, ss: SampleSet | None, recipe_inputs: str | None = None) -> str:
    """What the target is verified on and how: its real samples or generated inputs, and for a model with a
    recipe the recipe's own check (its settings in the matrix and its version), whose verdict the target's
    record carries: a tightened limit, new clips or sentences (``recipe_inputs``: the export's key and the recipe's
    own inputs' digest) judge the chip again, never "cached" on the old verdict."""
    recipe = recipe_for(m)
    own = None if recipe is None or m.verify is None else {
        "recipe": recipe.kind, "check": recipe.check_version, "verify": m.verify.model_dump(mode="json"),
        "inputs": recipe_inputs}
    if ss is not None and own is None:
        return ss.digest
    return hashlib.sha256(json.dumps({"generated": generated_inputs_note(prep.input_ranges),
                                      "seed": m.calibration.seed, "samples": ss.digest if ss else None,
                                      **({"recipe": own} if own else {})}, sort_keys=True).encode()).hexdigest()
