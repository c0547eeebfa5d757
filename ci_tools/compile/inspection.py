"""``qnn-release inspect MODEL.onnx``: what a new model needs before it goes into the matrix.

Inputs and outputs with dtypes and dynamic dimensions, a ``graphs[]`` entry the matrix accepts as
is (static shapes, int64 inputs read as int32), the op histogram, and per HTP arch what HTP takes
and what it rejects with the reason and the fix (one trial compile per chip, after the same
preparation ``build`` does).
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from ..errors import QnnReleaseError, UsageError
from ..util.text import clip

BATCH = re.compile(r"batch|^n$|^b$|^bs$", re.IGNORECASE)


def _dims(v) -> list:
    t = v.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in t.shape.dim]


LENGTHS = (16, 32, 64, 320, 640)  # tried in turn for dynamic lengths: 16 first, then what strided nets accept


def parse_inputs(specs: list[str] | None, inputs: list[dict]) -> dict[str, list[int]]:
    """``--input x=1,3,640,640`` (repeatable) -> {x: [1, 3, 640, 640]}, checked against the model's inputs."""
    out = {}
    names = [i["name"] for i in inputs]
    for spec in specs or []:
        name, _, dims = spec.partition("=")
        try:
            shape = [int(d) for d in dims.replace("x", ",").split(",")]
        except ValueError:
            shape = []
        if name not in names:
            raise UsageError(f"--input {spec}: the model has no input '{name}'", hint=f"its inputs: {', '.join(names)}")
        rank = len(next(i for i in inputs if i["name"] == name)["dims"])
        if len(shape) != rank or any(d <= 0 for d in shape):
            raise UsageError(f"--input {spec}: expected {rank} positive lengths, as NAME=1,3,640,640",
                             hint=f"'{name}' has {rank} dimensions")
        out[name] = shape
    return out


def suggest_source(path: Path) -> tuple[dict, str]:
    """The source block and the graphs[].file that paste into the matrix as they are: a file of an installed
    wheel is ``kind: pip`` with its member path; any other file a ``kind: path`` of its own."""
    import os
    from importlib import metadata

    from ..sources.store import sha256_file

    resolved, sha = path.resolve(), sha256_file(path)
    for dist in metadata.distributions():
        for f in dist.files or []:
            if f.name == path.name and Path(str(dist.locate_file(f))).resolve() == resolved:
                member = f.as_posix()
                return ({"kind": "pip", "package": f"{dist.metadata['Name']}=={dist.version}",
                         "files": {member: sha}}, member)
    rel = os.path.relpath(resolved, Path.cwd())
    return {"kind": "path", "path": rel if not rel.startswith("..") else str(resolved), "sha256": sha}, path.name


def suggest_graph(path: Path, inputs: list[dict], given: dict[str, list[int]] | None = None, length: int = 16,
                  file: str | None = None, ranges: dict[str, list[float]] | None = None) -> dict:
    """A graphs[] entry: a static shape for every input with a dynamic dimension (1 for a batch, ``length``
    for other lengths: change it to what the app feeds), int32 for int64 inputs (HTP has no int64);
    shapes ``given`` (``--input``) as they are; the value ``ranges`` given (``--range``) with them."""
    name = re.sub(r"[^a-z0-9._-]+", "-", path.stem.lower()).strip("-._") or "main"
    if not name[0].isalnum():
        name = "g" + name
    entry: dict = {"name": name[:64], "file": file or path.name}  # a name: the matrix's limit
    specs: dict[str, dict] = {}
    shapes = given or {}
    for i in inputs:
        dynamic = any(not isinstance(d, int) for d in i["dims"])
        if i["name"] in shapes:
            specs[i["name"]] = {"shape": shapes[i["name"]], **({"dtype": "int32"} if i["dtype"] == "int64" else {})}
        elif dynamic or i["dtype"] == "int64":
            shape = [d if isinstance(d, int) else (1 if k == 0 or BATCH.search(str(d)) else length)
                     for k, d in enumerate(i["dims"])]
            spec: dict = {"shape": shape}
            if i["dtype"] == "int64":
                spec["dtype"] = "int32"
            specs[i["name"]] = spec
    for name, lo_hi in (ranges or {}).items():
        dims = next(i["dims"] for i in inputs if i["name"] == name)
        specs.setdefault(name, {"shape": [d if isinstance(d, int) else 1 for d in dims]})["range"] = lo_hi
    if specs:
        entry["inputs"] = specs
    return entry


def parse_ranges(specs: list[str] | None, inputs: list[dict]) -> dict[str, list[float]]:
    """``--range ids=0,4`` (repeatable) -> {ids: [0.0, 4.0]}: the [low, high) generated values of an input take."""
    out = {}
    names = [i["name"] for i in inputs]
    for spec in specs or []:
        name, _, bounds = spec.partition("=")
        if name not in names:
            raise UsageError(f"--range {spec}: the model has no input '{name}'", hint=f"its inputs: {', '.join(names)}")
        try:
            lo, hi = (float(b) for b in bounds.split(","))
        except ValueError:
            lo = hi = float("nan")
        if not lo < hi:
            raise UsageError(f"--range {spec}: expected two numbers low < high, as NAME=0,4",
                             hint="the values generated for the input lie in [low, high), e.g. valid indices")
        out[name] = [lo, hi]
    return out


def sample_shapes(feeds: dict[str, dict], inputs: list[dict], given: dict[str, list[int]]) -> dict[str, list[int]]:
    """The shapes real samples give the inputs not ``given`` a shape: the first sample's arrays."""
    first = next(iter(feeds.values()), {})
    return {i["name"]: list(first[i["name"]].shape) for i in inputs
            if i["name"] not in given and i["name"] in first and len(first[i["name"]].shape) == len(i["dims"])}


def control_flow(m, entry: dict) -> list[dict]:
    """Each If (nested ones too), what its condition is computed from, and the way out: an If decided by
    constants or by shapes folds once the shapes are static; one decided by small inputs only (a sample
    rate, a mode flag) folds once they are `graphs[].constants`; one decided by the data does not, and
    the graph has to be split or rewritten there."""
    inputs = {v.name: v for v in m.graph.input}
    producer: dict[str, Any] = {}
    ifs: list = []
    _index(m.graph, producer, ifs)
    found = []
    for node in ifs:
        sources, shaped = _condition_sources(node, producer, inputs)
        small = {x for x in sources if (n := _elements(inputs[x], entry)) is not None and n <= 1}
        if sources and small == sources:
            moved = [x for x in sorted(sources) if x in entry.get("inputs", {})]
            fix = (("replace inputs." + ", inputs.".join(moved) + " with " if moved else "")
                   + "graphs[].constants: {" + ", ".join(f"{x}: <the value your app feeds>" for x in sorted(sources))
                   + "}: prepare then folds the branch away")
        elif sources:
            fix = "decided by the data: split the graph before it, or write the branch without If"
        elif shaped:
            fix = "decided by a shape: the static shapes prepare sets fold it"
        else:
            fix = "decided by constants only: prepare folds it"
        found.append({"node": node.name or "If", "condition_from": sorted(sources), "fix": fix})
    return found


def _subgraphs(n):
    from onnx import AttributeProto

    for a in n.attribute:
        yield from ([a.g] if a.type == AttributeProto.GRAPH else a.graphs)


def _index(g, producer: dict, ifs: list) -> None:
    """Every value's producing node, and every If, subgraphs included."""
    for n in g.node:
        producer.update({o: n for o in n.output})
        if n.op_type == "If":
            ifs.append(n)
        for sg in _subgraphs(n):
            _index(sg, producer, ifs)


def _reads(n) -> list[str]:
    """What a node reads: its inputs, and the outer values its subgraphs use."""
    names = [i for i in n.input if i]
    for sg in _subgraphs(n):
        inner = {o for x in sg.node for o in x.output} | {i.name for i in sg.input} | {i.name for i in sg.initializer}
        names += [i for x in sg.node for i in _reads(x) if i not in inner]
    return names


def _condition_sources(node, producer: dict, inputs: dict) -> tuple[set[str], bool]:
    """The graph inputs an If's condition is computed from, and whether a shape is on the way."""
    seen, todo, sources, shaped = set(), [node.input[0]], set(), False
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        n = producer.get(name)
        if name in inputs and n is None:
            sources.add(name)
        elif n is not None and n.op_type in ("Shape", "Size"):
            shaped = True  # a shape, static once prepared
        elif n is not None:
            todo += _reads(n)
    return sources, shaped


def _elements(v, entry: dict) -> int | None:
    """How many elements an input has; None if unknown. A rank-1 input with a symbolic dimension counts
    with the length the suggested entry gives it (a flag `[batch]` is one value; data has more dims)."""
    t = v.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = _dims(v)
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    spec = entry.get("inputs", {}).get(v.name)
    return math.prod(spec["shape"]) if spec is not None and len(dims) == 1 else None


def inspect(path: Path, socs, samples: Path | None = None, given: list[str] | None = None,
            ranges: list[str] | None = None) -> dict:
    """What a new model is and what HTP takes of it. Real ``samples`` (a folder of .npz) shape the inputs they
    give, drive prepare's check against the original and the fp16 range scan; ``ranges`` bound the generated
    values of an input (valid indices) where there are none."""
    import onnx

    from ..prepare.graph import _dtype_name
    from .doctor import source_kind

    try:
        m = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise UsageError(f"{path}: not a readable ONNX model: {clip(str(e), 200)}") from None
    init = {i.name for i in m.graph.initializer}
    inputs = [{"name": v.name, "dtype": _dtype_name(v.type.tensor_type.elem_type), "dims": _dims(v)}
              for v in m.graph.input if v.name not in init]
    outputs = [{"name": v.name, "dtype": _dtype_name(v.type.tensor_type.elem_type), "dims": _dims(v)}
               for v in m.graph.output]
    ops = Counter(n.op_type for n in m.graph.node)
    given_shapes = parse_inputs(given, inputs)
    value_ranges = parse_ranges(ranges, inputs)
    feeds = load_npz_folder(samples) if samples is not None else None
    if feeds:  # an array the model has no input for is not fed (an .npz may carry labels beside the inputs)
        feeds = {n: {k: v for k, v in f.items() if k in {i["name"] for i in inputs}} for n, f in feeds.items()}
    given_shapes.update(sample_shapes(feeds or {}, inputs, given_shapes))
    source, member = suggest_source(path)
    entry = suggest_graph(path, inputs, given_shapes, file=member, ranges=value_ranges)
    report: dict[str, Any] = {
        "model": str(path), "opset": {o.domain or "ai.onnx": o.version for o in m.opset_import},
        "inputs": inputs, "outputs": outputs, "nodes": len(m.graph.node),
        "ops": dict(ops.most_common()), "suggested_source": source, "suggested_graph": entry,
        "control_flow": control_flow(m, entry), "prepare": None, "htp": [], "notes": [],
        "source_kind": source_kind(m)}
    with tempfile.TemporaryDirectory() as tmp:
        prepared, entry = _prepare_at_lengths(path, inputs, (given_shapes, value_ranges, feeds), member, Path(tmp),
                                              report)
        report["suggested_graph"] = entry
        if prepared is None:
            return report
        report["notes"] += [n.removeprefix("warning: ") for n in prepared.notes if n.startswith("warning:")]
        report["prepare"] = {"ok": True, "notes": prepared.notes, "outputs": [o.__dict__ for o in prepared.outputs],
                             "parameters": prepared.parameters}
        if feeds is not None:
            report["fp16_range"] = _fp16_range(path, feeds)
        report["htp"] = [_htp_row(prepared, soc) for soc in socs]
    return report


def _prepare_at_lengths(path: Path, inputs: list[dict], given: tuple, member, tmp: Path, report: dict):
    """Prepare the model at the suggested lengths (16 first; strided nets need multiples of 32): the prepared
    graph (None when no length works, the error in ``report``) and the entry that worked. ``given``: the shapes
    and value ranges given, and the real samples (by file) prepare's check runs on, or None."""
    given_shapes, value_ranges, feeds = given
    from ..matrix.schema import Graph, InputSpec, Model, Options
    from ..prepare.graph import CheckInputs, prepare

    model = cast(Model, SimpleNamespace(name="inspect", options=Options()))  # prepare reads these two only
    defaulted = any(i["name"] not in given_shapes and any(not isinstance(d, int) for d in i["dims"][1:])
                    for i in inputs)
    first_error, prepared = None, None
    for length in LENGTHS if defaulted else LENGTHS[:1]:
        entry = suggest_graph(path, inputs, given_shapes, length, file=member, ranges=value_ranges)
        graph = Graph(name=entry["name"], file=path.name,
                      inputs={k: InputSpec(**v) for k, v in entry.get("inputs", {}).items()})
        try:
            prepared = prepare(model, graph, path.parent, tmp / str(length), "inspect",
                               CheckInputs(samples=_cast_to(feeds)))
            break
        except QnnReleaseError as e:
            first_error = first_error or e
            if "do not line up" not in str(e):
                break
    if first_error is not None and prepared is not None:
        said = str(first_error).split(" (hint:")[0]
        report["notes"].append(f"at length {LENGTHS[0]}: {said.split(': ', 1)[-1]}; the lengths "
                               f"now suggested work ({length}): the app's sizes must be multiples of the "
                               "network's stride")
    if prepared is None:
        report["prepare"] = {"ok": False, "error": str(first_error)}
    return prepared, entry


def _htp_row(prepared, soc) -> dict:
    """What a trial compile for ``soc`` says of the prepared graph."""
    from .doctor import trial_compile

    row = {"soc": soc.name, "htp_arch": soc.arch, "fp16": bool(soc.fp16)}
    if not soc.fp16:
        row.update(ok=False, error="no fp16 on this HTP: inspect with a chip that has it; build this one "
                                   "as w8a16 or int8")
        return row
    d = trial_compile(prepared.path, soc.soc_model, soc.htp_arch, fp16=True)
    if d is None:
        row.update(ok=False, error="the trial compile failed for another reason: see `build --verbose`")
    else:
        row.update(ok=not d.rejected, htp_nodes=sum(prepared.op_counts.values()) - len(d.rejected), **d.as_dict())
    return row


def load_npz_folder(folder: Path) -> dict[str, dict]:
    """``--samples``: one .npz per sample, one array per input, by file name."""
    import numpy as np

    files = sorted(folder.glob("*.npz")) if folder.is_dir() else []
    if not files:
        raise UsageError(f"--samples: {folder} has no .npz files", hint="one .npz per sample, one array per input")
    feeds = {}
    for f in files:
        try:
            with np.load(f, allow_pickle=False) as z:
                feeds[f.name] = {k: z[k] for k in z.files}
        except (OSError, ValueError) as e:
            raise UsageError(f"--samples: {f}: not a readable .npz: {clip(str(e), 200)}") from None
    return feeds


def _cast_to(feeds: dict[str, dict] | None):
    """The samples as prepare's check takes them: each array cast to the prepared input's dtype (int64 ids become
    the int32 the prepared graph takes)."""
    if not feeds:
        return None

    def cast(inputs, outputs):  # only the samples shaped as the prepared inputs (the first sample's lengths)
        by = {t.name: t for t in inputs}
        fits = {name: f for name, f in feeds.items()
                if all(k not in f or list(f[k].shape) == list(t.shape) for k, t in by.items())}
        return {name: {k: v.astype(by[k].dtype) for k, v in f.items() if k in by} for name, f in fits.items()}

    return cast


def _fp16_range(path: Path, feeds: dict[str, dict]) -> dict:
    """The model on CPU over real samples (a folder of .npz, one array per input), every intermediate
    recorded: the nodes whose values leave fp16's range (what `build` refuses fp16 for)."""
    from ..prepare.fp16_range import scan

    names = list(feeds)
    try:
        findings = scan(path, list(feeds.values()), names)
    except Exception as e:
        raise UsageError(f"--samples: the model does not run on CPU with {names[0]}: "
                         f"{clip(str(e), 200)}", hint="the arrays must be named and shaped as the inputs") \
            from None
    return {"samples": len(names), "findings": [f.as_dict() | {"line": f.line()} for f in findings]}


def render_text(report: dict) -> str:
    import yaml

    from ..util.table import table

    lines = [f"{report['model']}: {report['nodes']} nodes, opset "
             + ", ".join(f"{k} {v}" for k, v in report["opset"].items()), ""]
    rows = [("input", i["name"], i["dtype"], str(i["dims"])) for i in report["inputs"]]
    rows += [("output", o["name"], o["dtype"], str(o["dims"])) for o in report["outputs"]]
    lines += [table(["", "name", "dtype", "dims"], rows), ""]
    lines.append("ops: " + ", ".join(f"{k} x{v}" for k, v in report["ops"].items()))
    for k in report.get("source_kind", []):
        lines.append(f"this graph is {k['kind']} (" + ", ".join(f"{o} x{n}" for o, n in k["ops"].items())
                     + f"): {k['means']}")
    lines += ["", "suggested source (pastes into the model's entry as it is):",
              yaml.safe_dump({"source": report["suggested_source"]}, sort_keys=False).rstrip(),
              "suggested graphs[] entry (check the lengths: they are what your app will feed):",
              yaml.safe_dump([report["suggested_graph"]], sort_keys=False, default_flow_style=None).rstrip()]
    lines += [f"note: {n}" for n in report.get("notes", [])]
    for c in report.get("control_flow", []):
        what = ", ".join(c["condition_from"]) or "constants"
        lines.append(f"If {c['node']}: its condition comes from {what}; fix: {c['fix']}")
    if report.get("fp16_range") is not None:
        r = report["fp16_range"]
        lines.append(f"fp16 range on {r['samples']} sample(s): "
                     + ("every value fits" if not r["findings"] else f"{len(r['findings'])} node(s) leave it"))
        lines += [f"  {f['line']}" for f in r["findings"]]
    prep = report["prepare"]
    if prep and not prep["ok"]:
        lines += ["", f"prepare: {prep['error']}"]
        return "\n".join(lines)
    for row in report["htp"]:
        head = f"{row['soc']} ({row['htp_arch']}{', fp16' if row['fp16'] else ', no fp16'}): "
        if row["ok"]:
            lines.append(head + f"HTP takes all {row['htp_nodes']} nodes")
        elif "causes" not in row:
            lines.append(head + row["error"])
        else:
            lines.append(head + f"HTP rejects {row['rejected_nodes']} node(s)")
            for c in row["causes"]:
                lines.append(f"  {c['op']} x{c['count']} ({', '.join(c['nodes'][:3])}): {c['reason']}")
                lines.append(f"    fix: {c['fix']}")
    return "\n".join(lines)
