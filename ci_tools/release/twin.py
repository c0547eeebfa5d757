"""A model's twin: its prepared float graphs, released beside the binaries.

The same graphs (static shapes, the same inputs and outputs) are the app's CPU model, and what ONNX Runtime's
QNN EP compiles for the phone's HTP when the session is created ("on-device compile", no context cache): the one
portable artifact for the long tail of chips a release has no binary for (k2-fsa/sherpa-onnx PR #3741 asked for
it). One archive per model, ``<model>-float-onnx.tar.bz2``, within the 1,000-asset budget. Before it is released it
is run both ways on its sample: on CPU, and through the EP compiling it at session creation on the HTP emulator
of the model's most capable chip, with that first load timed and the process's peak memory measured (this
machine's emulator, said so), in a process of its own.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..errors import PackageError
from ..sources.store import default_cache
from ..util import cmd
from ..util.files import write_json
from ..util.text import clip

TWIN_VERSION = 2  # in the measurement's cache key: a change here measures again


def twin_stem(model: str) -> str:
    return f"{model}-float-onnx"


def measure(graph: Path, soc, feeds: list[dict[str, np.ndarray]], names: list[str]) -> dict:
    """The twin run as an app runs it, in a fresh process (its peak memory is the first load's): CPU's answer, the
    QNN EP's compile at session creation for ``soc`` on the emulator, the answer it gives, judged as an fp16
    binary is. Cached by the graph's bytes, the chip and the EP's version."""
    from ..compile import qnn_ep
    from ..errors import BackendUnavailable
    from ..sources.store import sha256_file

    try:
        qnn_ep.qnn_version()
    except BackendUnavailable:  # the qairt route's image: the twin ships, never called verified
        return {"verified": False, "not_measured": "onnxruntime-qnn is not installed where this release was packaged",
                "soc": soc.name}
    key = hashlib.sha256(json.dumps([TWIN_VERSION, sha256_file(graph), soc.soc_model, soc.htp_arch,
                                     qnn_ep.qnn_version(), names], sort_keys=True).encode()).hexdigest()
    cached = default_cache() / "twins" / f"{key}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    with tempfile.TemporaryDirectory(prefix="qnn-release-twin.") as tmp:
        np.savez(Path(tmp) / "feeds.npz", **{f"{i}/{k}": v for i, f in enumerate(feeds) for k, v in f.items()})
        r = cmd.run([sys.executable, "-m", "ci_tools.release.twin_check", str(graph), str(soc.soc_model),
                     str(soc.htp_arch), str(Path(tmp) / "feeds.npz"), str(len(feeds)), str(Path(tmp) / "outputs.npz")],
                    capture_output=True, text=True, timeout=3600)
        lines = r.stdout.strip().splitlines()
        outputs = None
        if r.returncode == 0 and lines:
            with np.load(Path(tmp) / "outputs.npz", allow_pickle=False) as z:
                outputs = {k: z[k] for k in z.files}
    if r.returncode != 0 or not lines:
        raise PackageError(f"{graph.parent.name}: the twin could not be run through the QNN EP: "
                           f"{clip(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'no output', 300)}",
                           hint="run `qnn-release build` again; the prepared graph must compile for its chip")
    run = json.loads(lines[-1])
    from ..compile.verify import DEFAULT_THRESHOLDS, check
    from ..errors import VerifyError

    ref, got = ([[outputs[f"{side}/{i}/{k}"] for k in range(len(names))] for i in range(len(feeds))]
                for side in ("cpu", "htp"))
    try:
        v = check(graph.parent.name, names, ref, got, DEFAULT_THRESHOLDS["fp16"], None)
        verdict = {"verified": True, "cosine": round(v.parity.cosine, 6), "snr_db": round(v.parity.snr_db, 2),
                   "max_abs": float(f"{v.parity.max_abs:.4g}")}
    except VerifyError as e:
        verdict = {"verified": False, "failure": e.message}
    out = {**run, **verdict, "soc": soc.name, "soc_model": soc.soc_model, "htp_arch": soc.htp_arch,
           "qnn_version": qnn_ep.qnn_version(), "samples": len(feeds),
           "measured_on": "this machine's x86-64 HTP emulator, not a device"}
    write_json(cached, out)
    return out


def twin_archive(tmp: Path, model, preps: list, soc, seed: int, licence: bytes, constant_ok: list[str]):
    """``<model>-float-onnx.tar.bz2`` in ``tmp``: each prepared graph (``<graph>/graph.onnx``, its weights beside it
    when over 2 GB), the sample every archive of the model carries, ``twin.json`` (what it is and how it ran), a
    README with the load code, the licence. Returns (the archive, twin.json's values)."""
    from ..prepare.graph import generate_inputs
    from .archive import make_tar_bz2
    from .sample import sample_members
    from .templating import render

    stem = twin_stem(model.name)
    members: list[tuple[str, Path | bytes]] = []
    graphs = []
    for prep in preps:
        members.append((f"{stem}/{prep.graph}/graph.onnx", prep.path))
        if (prep.path.parent / "graph.onnx.data").is_file():
            members.append((f"{stem}/{prep.graph}/graph.onnx.data", prep.path.parent / "graph.onnx.data"))
        members += sample_members(stem, prep, seed, constant_ok)
        feeds = generate_inputs(prep.inputs, count=1, seed=seed + 7, ranges=prep.input_ranges)  # the sample's
        graphs.append({"name": prep.graph, "file": f"{prep.graph}/graph.onnx", "sha256": prep.sha256,
                       "inputs": [t.__dict__ for t in prep.inputs], "outputs": [t.__dict__ for t in prep.outputs],
                       "on_device_compile": measure(prep.path, soc, feeds, [o.name for o in prep.outputs])})
    values = {"twin_version": TWIN_VERSION, "model": model.name, "kind": "float",
              "what": "the prepared float graphs: the CPU model, and what ONNX Runtime's QNN EP compiles for the "
                      "device's HTP at session creation (on-device compile)", "graphs": graphs}
    members += [(f"{stem}/twin.json", (json.dumps(values, indent=2, sort_keys=True) + "\n").encode()),
                (f"{stem}/README.md", render("twin_readme.md.j2", model=model, twin=values).encode()),
                (f"{stem}/LICENSE", licence)]
    return make_tar_bz2(tmp / f"{stem}.tar.bz2", members), values
