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

from .errors import QnnReleaseError, UsageError

BATCH = re.compile(r"batch|^n$|^b$|^bs$", re.IGNORECASE)


def _dims(v) -> list:
    t = v.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in t.shape.dim]


def suggest_graph(path: Path, inputs: list[dict]) -> dict:
    """A graphs[] entry: a static shape for every input with a dynamic dimension (1 for a batch, 16 for
    other lengths: change it to what the app feeds), int32 for int64 inputs (HTP has no int64)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", path.stem.lower()).strip("-._") or "main"
    if not name[0].isalnum():
        name = "g" + name
    entry: dict = {"name": name[:64], "file": path.name}
    specs = {}
    for i in inputs:
        dynamic = any(not isinstance(d, int) for d in i["dims"])
        if dynamic or i["dtype"] == "int64":
            shape = [d if isinstance(d, int) else (1 if k == 0 or BATCH.search(str(d)) else 16)
                     for k, d in enumerate(i["dims"])]
            spec: dict = {"shape": shape}
            if i["dtype"] == "int64":
                spec["dtype"] = "int32"
            specs[i["name"]] = spec
    if specs:
        entry["inputs"] = specs
    return entry


def control_flow(m, entry: dict) -> list[dict]:
    """Each If (nested ones too), what its condition is computed from, and the way out: an If decided by
    constants or by shapes folds once the shapes are static; one decided by small inputs only (a sample
    rate, a mode flag) folds once they are `graphs[].constants`; one decided by the data does not, and
    the graph has to be split or rewritten there."""
    from onnx import AttributeProto

    inputs = {v.name: v for v in m.graph.input}
    producer, ifs = {}, []

    def subgraphs(n):
        for a in n.attribute:
            yield from ([a.g] if a.type == AttributeProto.GRAPH else a.graphs)

    def walk(g):
        for n in g.node:
            producer.update({o: n for o in n.output})
            if n.op_type == "If":
                ifs.append(n)
            for sg in subgraphs(n):
                walk(sg)

    def reads(n) -> list[str]:
        """What a node reads: its inputs, and the outer values its subgraphs use."""
        names = [i for i in n.input if i]
        for sg in subgraphs(n):
            inner = {o for x in sg.node for o in x.output} | {i.name for i in sg.input} | {
                i.name for i in sg.initializer}
            names += [i for x in sg.node for i in reads(x) if i not in inner]
        return names

    walk(m.graph)
    found = []
    for node in ifs:
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
                todo += reads(n)
        small = {x for x in sources if _elements(inputs[x], entry) is not None and _elements(inputs[x], entry) <= 1}
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


def inspect(path: Path, socs, samples: Path | None = None) -> dict:
    import onnx

    from .matrix import Graph, InputSpec, Options
    from .prepare import _dtype_name, prepare

    try:
        m = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise UsageError(f"{path}: not a readable ONNX model: {str(e).splitlines()[0][:200]}") from None
    init = {i.name for i in m.graph.initializer}
    inputs = [{"name": v.name, "dtype": _dtype_name(v.type.tensor_type.elem_type), "dims": _dims(v)}
              for v in m.graph.input if v.name not in init]
    outputs = [{"name": v.name, "dtype": _dtype_name(v.type.tensor_type.elem_type), "dims": _dims(v)}
               for v in m.graph.output]
    ops = Counter(n.op_type for n in m.graph.node)
    entry = suggest_graph(path, inputs)
    report = {"model": str(path), "opset": {o.domain or "ai.onnx": o.version for o in m.opset_import},
              "inputs": inputs, "outputs": outputs, "nodes": len(m.graph.node),
              "ops": dict(ops.most_common()), "suggested_graph": entry,
              "control_flow": control_flow(m, entry), "prepare": None, "htp": []}
    graph = Graph(name=entry["name"], file=entry["file"],
                  inputs={k: InputSpec(**v) for k, v in entry.get("inputs", {}).items()})
    with tempfile.TemporaryDirectory() as tmp:
        model = SimpleNamespace(name="inspect", options=Options())
        try:
            prepared = prepare(model, graph, path.parent, Path(tmp), "inspect")
        except QnnReleaseError as e:
            report["prepare"] = {"ok": False, "error": str(e)}
            return report
        report["prepare"] = {"ok": True, "notes": prepared.notes, "outputs": [o.__dict__ for o in prepared.outputs],
                             "parameters": prepared.parameters}
        if samples is not None:
            report["fp16_range"] = _fp16_range(path, samples)
        from .doctor import trial_compile

        for soc in socs:
            row = {"soc": soc.name, "htp_arch": soc.arch, "fp16": bool(soc.fp16)}
            if not soc.fp16:
                row.update(ok=False, error="no fp16 on this HTP: inspect with a chip that has it; build this one "
                                           "as w8a16 or int8")
                report["htp"].append(row)
                continue
            d = trial_compile(prepared.path, soc.soc_model, soc.htp_arch, fp16=True)
            if d is None:
                row.update(ok=False, error="the trial compile failed for another reason: see `build --verbose`")
            else:
                row.update(ok=not d.rejected, htp_nodes=sum(prepared.op_counts.values()) - len(d.rejected),
                           **d.as_dict())
            report["htp"].append(row)
    return report


def _fp16_range(path: Path, folder: Path) -> dict:
    """The model on CPU over real samples (a folder of .npz, one array per input), every intermediate
    recorded: the nodes whose values leave fp16's range (what `build` refuses fp16 for)."""
    import numpy as np

    from .fp16_range import scan

    files = sorted(folder.glob("*.npz")) if folder.is_dir() else []
    if not files:
        raise UsageError(f"--samples: {folder} has no .npz files", hint="one .npz per sample, one array per input")
    feeds = []
    for f in files:
        try:
            with np.load(f, allow_pickle=False) as z:
                feeds.append({k: z[k] for k in z.files})
        except (OSError, ValueError) as e:
            raise UsageError(f"--samples: {f}: not a readable .npz: {e}") from None
    try:
        findings = scan(path, feeds, [f.name for f in files])
    except Exception as e:
        raise UsageError(f"--samples: the model does not run on CPU with {files[0].name}: "
                         f"{str(e).splitlines()[0][:200]}", hint="the arrays must be named and shaped as the inputs") \
            from None
    return {"samples": len(files), "findings": [f.as_dict() | {"line": f.line()} for f in findings]}


def render_text(report: dict) -> str:
    import yaml

    from .report import table

    lines = [f"{report['model']}: {report['nodes']} nodes, opset "
             + ", ".join(f"{k} {v}" for k, v in report["opset"].items()), ""]
    rows = [("input", i["name"], i["dtype"], str(i["dims"])) for i in report["inputs"]]
    rows += [("output", o["name"], o["dtype"], str(o["dims"])) for o in report["outputs"]]
    lines += [table(["", "name", "dtype", "dims"], rows), ""]
    lines.append("ops: " + ", ".join(f"{k} x{v}" for k, v in report["ops"].items()))
    lines += ["", "suggested graphs[] entry (check the lengths: they are what your app will feed):",
              yaml.safe_dump([report["suggested_graph"]], sort_keys=False, default_flow_style=None).rstrip()]
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
