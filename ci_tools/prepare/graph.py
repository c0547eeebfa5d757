"""Prepare one graph for QNN, once (it does not depend on the chip).

fixed constants -> static input shapes -> int64 inputs become int32 (a Cast inside the
graph) -> onnxsim -> no dynamic dimension left -> parity with the original on CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import PrepareError
from ..matrix.schema import Graph, Model
from ..util.files import as_if_created, write_json
from ..util.metrics import Parity, compare, nonfinite, worst
from ..util.text import clip
from .recurrent import conv_padding_warning, padding_warning

if TYPE_CHECKING:
    from onnx import ModelProto

SKIPPED_ONNXSIM_PASSES = ["fuse_qkv"]  # see _simplify
PREPARE_VERSION = 7  # bump when the preparation changes what it writes (6: the padded-recurrent warning; 7: the
# padded-convolution warning, fixes erf and float64, a NaN original named)
PROTOBUF_LIMIT = 2**31 - 1
EXTERNAL_DATA_ABOVE = 1_800_000_000  # leave room below protobuf's 2 GB for the graph itself


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: list[int]
    dtype: str


@dataclass
class Prepared:
    model: str
    graph: str
    path: Path
    sha256: str
    source_sha256: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    parity: dict
    seconds: float
    notes: list[str] = field(default_factory=list)
    input_ranges: dict[str, list[float]] = field(default_factory=dict)  # graphs[].inputs[].range
    op_counts: dict[str, int] = field(default_factory=dict)  # the prepared graph's op histogram
    parameters: int = 0  # weight values (initializer elements): bytes per parameter of a binary
    source_parameters: int = 0  # the same in the source graph (unique initializers)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        return d

    @classmethod
    def load(cls, path: Path) -> Prepared:
        return cls.load_dict(json.loads(path.read_text()))

    @classmethod
    def load_dict(cls, d: dict) -> Prepared:
        d = dict(d)
        d["path"] = Path(d["path"])
        d["inputs"] = [TensorInfo(**t) for t in d["inputs"]]
        d["outputs"] = [TensorInfo(**t) for t in d["outputs"]]
        return cls(**d)


def _np_dtype(elem_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _dtype_name(elem_type: int) -> str:
    return str(_np_dtype(elem_type)) if elem_type else "undefined"


def prepare_key(model: Model, graph: Graph, source_sha: str, checked_on: str | None = None) -> str:
    """``checked_on``: what the check against the original runs on where that is not generated inputs (a digest
    of the model's real samples' pins): new samples check the graph again."""
    spec = {"v": PREPARE_VERSION, "src": source_sha, "graph": graph.model_dump(mode="json"),
            "min_cosine": model.options.prepare_min_cosine, **({"checked_on": checked_on} if checked_on else {})}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class _Job:
    """One graph being prepared: what it is, where it comes from and goes, what it is checked on."""

    model: Model
    graph: Graph
    src: Path  # the source graph file
    work: Path
    final: Path  # the prepared folder, moved into place whole
    what: str  # "<model>/<graph>", as messages name it
    source_sha: str
    samples: Samples
    seed: int
    start: float


@dataclass(frozen=True)
class _Rewritten:
    """The rewritten graph and what the rewrites learnt of it."""

    m: ModelProto
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    source_parameters: int
    cast_inputs: list[str]


# what prepare's check against the original runs on, where there are real samples: their feeds, or a function of
# the prepared graph's inputs and outputs that makes them (samples are made for the prepared inputs), with a
# digest of what they are for the key
SampleFeeds = dict[str, dict[str, np.ndarray]]  # sample name -> its feed
Samples = SampleFeeds | Callable[[list[TensorInfo], list[TensorInfo]], SampleFeeds | None] | None
CHECK_SAMPLES = 8  # real samples the check runs at most


@dataclass(frozen=True, kw_only=True)
class CheckInputs:
    """What prepare's check against the original runs on: real ``samples`` where given (``digest`` saying what they
    are, for the prepare key), else inputs generated from ``seed`` (which also seeds the runs that pin the outputs'
    shapes)."""

    samples: Samples = None
    digest: str | None = None
    seed: int = 0


def prepare(model: Model, graph: Graph, src_dir: Path, work: Path, source_sha: str,
            check: CheckInputs | None = None) -> Prepared:
    """Write ``<work>/<key>/graph.onnx`` and ``prepared.json``; reuse them when already there. The check against
    the original runs on ``check.samples`` (real ones, ``check.digest`` saying what they are) where given, else on
    generated inputs (``check.seed``); no ``check``: generated inputs, seed 0."""
    check = check or CheckInputs()
    key = prepare_key(model, graph, source_sha, check.digest)
    final = work / model.name / graph.name / key
    if (final / "prepared.json").exists():
        return Prepared.load(final / "prepared.json")
    import onnx

    start = time.monotonic()
    what = f"{model.name}/{graph.name}"
    src = src_dir / graph.file
    if not src.is_file():
        raise PrepareError(f"{what}: graph file {graph.file} not found in the source",
                           hint="graphs[].file is relative to the source (or to the export outputs)")
    try:
        m = onnx.load(str(src))
    except Exception as e:
        raise PrepareError(f"{what}: {graph.file} is not a readable ONNX model: "
                           f"{clip(str(e), 200)}") from None
    notes: list[str] = []
    job = _Job(model=model, graph=graph, src=src, work=work, final=final, what=what, source_sha=source_sha,
               samples=check.samples, seed=check.seed, start=start)
    try:
        return _write(job, _rewrite(m, job, notes), notes)
    except Exception as e:  # ONNX Runtime's shape inference on the fixed shapes: say why, name the node
        explained = _explained(e, graph, what)
        if explained is e:
            raise
        raise explained from None


SHAPE_ERROR = re.compile(r"Node \(([^)]*)\) Op \((\w+)\) \[ShapeInferenceError\][^\n]*|"
                         r"\[ShapeInferenceError\][^\n]*|Incompatible dimensions[^\n]*")


def _explained(e: Exception, graph: Graph, what: str) -> Exception:
    """ONNX Runtime's shape-inference failure at the graph's fixed input shapes, as a cause and a fix."""
    m = SHAPE_ERROR.search(str(e))
    if m is None or not graph.inputs:  # only where the matrix (or inspect) chose input sizes
        return e
    node = f"node '{m[1]}' ({m[2]})" if m[1] is not None else "a node"
    sizes = ", ".join(f"{k} {v.shape}" for k, v in graph.inputs.items()) or "the model's own input shapes"
    return PrepareError(f"{what}: the input shapes ({sizes}) give maps that do not line up at {node}: "
                        f"{clip(m[0].split('] ', 1)[-1], 160)}",
                        hint="a strided network (a detector, a segmenter) needs H and W that are multiples of its "
                        "total stride, usually 32: set graphs[].inputs to such a size, e.g. [1, 3, 640, 640]; "
                        "`qnn-release inspect model.onnx --input x=1,3,640,640` tries one")


def _rewrite(m, job: _Job, notes: list[str]) -> _Rewritten:
    """The graph rewrites, in order (each adds what it did to ``notes``)."""
    model, graph, work, what, seed = job.model, job.graph, job.work, job.what, job.seed
    source_parameters = _parameters(m)
    _fold_constants(m, graph, what)
    constants = _constants_to_initializers(m)  # before the fixes, which read constants as initializers
    _apply_fixes(m, graph, notes)
    padded = padding_warning(m, graph) or conv_padding_warning(m, graph)  # before the shapes are fixed
    _fix_shapes(m, graph, what)
    if padded:
        notes.append(padded)
    _apply_shaped_fixes(m, graph, notes)
    _forget_dynamic_output_shapes(m)
    cast_inputs = _int64_inputs_to_int32(m, graph)
    if cast_inputs:
        notes.append(f"int64 inputs now int32 (Cast inside the graph): {', '.join(cast_inputs)}")
    m = _simplify(m, what, notes, work / model.name / graph.name)
    constants += _constants_to_initializers(m)  # and after onnxsim, which writes folded values as Constant nodes
    if constants:
        notes.append(f"{constants} Constant node(s) now initializers (a quantizer takes a Constant's output for "
                     "an activation: a Resize's scales quantized with a scale of 1e-9 failed to compile, 7004)")
    powers = _integer_pow_to_mul(m)
    if powers:
        notes.append(f"Pow(x, n) with n in 1..4 now multiplications: {powers} node(s) (exact on CPU; HTP's Pow of "
                     "-0 gives -4 for n=2, which turned silero-vad's speech probability into -98304)")
    if graph.prescale:
        from .prescale import apply as prescale

        notes.extend(prescale(m, graph.prescale, what))
    if _parameters(m) > 1.05 * source_parameters > 0:
        notes.append(f"the prepared graph holds {_parameters(m):,} weight values, the source {source_parameters:,}: "
                     "constant folding made copies (e.g. a transpose of a weight shared by two ops); the binary "
                     "grows with them")
    if m.ByteSize() < EXTERNAL_DATA_ABOVE:
        _pin_output_shapes(m, what, notes, seed)
    inputs, outputs = _static_io(m, what)
    return _Rewritten(m, inputs, outputs, source_parameters, cast_inputs)


def _write(job: _Job, done: _Rewritten, notes: list[str]) -> Prepared:
    """Save the prepared graph, check it against the original on CPU, and move it into place whole."""
    import onnx

    m, inputs, outputs, source_parameters, cast_inputs = (done.m, done.inputs, done.outputs, done.source_parameters,
                                                          done.cast_inputs)
    model, graph, work, final = job.model, job.graph, job.work, job.final
    samples, seed, start, source_sha = job.samples, job.seed, job.start, job.source_sha
    work.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{model.name}.{graph.name}.", dir=work))
    try:
        out = tmp / "graph.onnx"
        if m.ByteSize() > EXTERNAL_DATA_ABOVE:
            onnx.save_model(m, str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                            location="graph.onnx.data", size_threshold=1024)
            notes.append("weights stored as external data (graph.onnx.data): the graph is over 2 GB")
        else:
            onnx.save_model(m, str(out))
        ranges = {n: list(spec.range) for n, spec in graph.inputs.items() if spec.range is not None}
        real = samples(inputs, outputs) if callable(samples) else samples
        real = {k: complete_feed(f, inputs) for k, f in list(real.items())[:CHECK_SAMPLES]} if real else None
        on = CheckedOn(feeds=list(real.values()), names=list(real), note=f"{len(real)} real sample(s)", real=True) \
            if real else CheckedOn(feeds=generate_inputs(inputs, count=2, seed=seed, ranges=ranges), names=None,
                                   note=generated_inputs_note(ranges), real=False)
        parity = _parity_with_original(job, out, on, cast_inputs)
        from ..sources.store import sha256_file

        final.parent.mkdir(parents=True, exist_ok=True)
        prepared = Prepared(model=model.name, graph=graph.name, path=final / "graph.onnx",
                            sha256=sha256_file(out), source_sha256=source_sha, inputs=inputs, outputs=outputs,
                            parity=parity.as_dict(), seconds=round(time.monotonic() - start, 3), notes=notes,
                            input_ranges=ranges, op_counts=_op_counts(m), parameters=_parameters(m),
                            source_parameters=source_parameters)
        write_json(tmp / "prepared.json", prepared.as_dict())
        if final.exists():
            shutil.rmtree(final)
        as_if_created(tmp)
        os.replace(tmp, final)  # the folder appears whole, with prepared.json, or not at all
        return prepared
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fold_constants(m, graph: Graph, what: str) -> None:
    from onnx import numpy_helper

    by_name = {i.name: i for i in m.graph.input}
    for name, value in graph.constants.items():
        if name not in by_name:
            raise PrepareError(f"{what}: constants.{name}: the graph has no input '{name}'",
                               hint=f"inputs: {', '.join(by_name)}")
        inp = by_name[name]
        arr = np.asarray(value, dtype=_np_dtype(inp.type.tensor_type.elem_type))
        m.graph.input.remove(inp)
        m.graph.initializer.append(numpy_helper.from_array(arr, name))


def _op_counts(m) -> dict[str, int]:
    from collections import Counter

    return dict(sorted(Counter(n.op_type for n in m.graph.node).items()))


def _parameters(m) -> int:
    return int(sum(int(np.prod(t.dims)) if len(t.dims) else 1 for t in m.graph.initializer))


def _apply_fixes(m, graph: Graph, notes: list[str]) -> None:
    """graphs[].fixes: small rewrites the export cannot make (each checked by the parity test below)."""
    if "clip-to-max-min" in graph.fixes:
        n = _clip_to_max_min(m)
        notes.append(f"fix clip-to-max-min: {n} Clip node(s) with run-time or infinite bounds now Max/Min")
    if "dequantize" in graph.fixes:
        from .dequantize import (
            dequantize,
            dequantize_dynamic,
            dequantize_gathers,
            dequantize_lstm,
            dequantize_through_layout,
        )

        laid = dequantize_through_layout(m)  # first: what it leaves constant, dequantize folds
        folded, pairs = dequantize(m)
        embeddings, lstms, dynamic = dequantize_gathers(m) + laid, dequantize_lstm(m), dequantize_dynamic(m)
        notes.append(f"fix dequantize: {folded} quantized weight(s) now float, {pairs} activation Q/DQ pair(s) "
                     f"now a Clip at their saturation bounds, {dynamic} dynamically quantized MatMul(s) and Conv(s), "
                     f"{lstms} DynamicQuantizeLSTM(s) and {embeddings} int8 embedding(s) or tables read through "
                     "layout ops float again (the float graph the source was quantized from, up to its rounding)")
    if "float64" in graph.fixes:
        from .float64 import float64_as_float32

        notes.append(f"fix float64: {float64_as_float32(m)} float64 cast(s), constant(s), input(s) or output(s) now "
                     "float32 (HTP has no float64)")
    if "erf" in graph.fixes:
        from .erf import ERROR_BOUND, erf_as_ops

        notes.append(f"fix erf: {erf_as_ops(m)} Erf(s) now Abs/Exp and a polynomial (Abramowitz & Stegun 7.1.26, "
                     f"max error {ERROR_BOUND:g})")
    if "convtranspose-output-padding" in graph.fixes:
        from .convtranspose import output_padding_as_pads

        notes.append(f"fix convtranspose-output-padding: {output_padding_as_pads(m)} ConvTranspose(s) with "
                     "output_padding now cut by smaller end pads (or padded after), the same tensor")
    if "unfuse-contrib" in graph.fixes:
        from .unfuse import unfuse

        counts = unfuse(m, f"{graph.name}")
        notes.append("fix unfuse-contrib: " + (", ".join(f"{op} x{k}" for op, k in counts.items()) or "nothing to do")
                     + " rewritten as standard ONNX ops (their documented formulas)")


def _apply_shaped_fixes(m, graph: Graph, notes: list[str]) -> None:
    """The fixes that need every shape (after the inputs are fixed), and the warnings of what HTP is known to
    compute wrongly where its fix is not declared."""
    if "einsum" in graph.fixes:
        from .einsum import einsum_as_matmul

        done, left = einsum_as_matmul(m)
        notes.append(f"fix einsum: {done} Einsum(s) now Transpose/Reshape/MatMul"
                     + (f"; {left} left as they were (not a two-operand matrix product with known shapes)"
                        if left else ""))
    from .convtranspose import wrong_on_htp

    wrong = wrong_on_htp(m)
    if wrong:
        notes.append(f"warning: HTP computes a depthwise ConvTranspose with output_padding wrongly (probe "
                     f"depthwise-convtranspose-output-padding: cosine 0.007 against CPU): {', '.join(wrong[:3])}"
                     f"{' ...' if len(wrong) > 3 else ''}; declare `fixes: [convtranspose-output-padding]` on the "
                     "graph (the same tensor, written as end padding HTP computes right)")


def _clip_to_max_min(m) -> int:
    """Clip(x, lo, hi) = Min(Max(x, lo), hi); an infinite or absent bound is left out. HTP's Clip needs
    finite constant bounds; Max and Min take tensors."""
    from onnx import helper, numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    nodes, changed = [], 0
    for n in m.graph.node:
        if n.op_type != "Clip" or len(n.input) < 2:
            nodes.append(n)
            continue
        bounds = list(n.input[1:3]) + [""] * (3 - len(n.input))
        runtime = [b for b in bounds[:2] if b and b not in consts]
        infinite = [b for b in bounds[:2] if b in consts and not np.all(np.isfinite(consts[b]))]
        if not runtime and not infinite:
            nodes.append(n)
            continue
        cur, base = n.input[0], n.name or n.output[0]
        lo, hi = bounds[0], bounds[1]
        steps = [("Max", lo), ("Min", hi)]
        steps = [(op, b) for op, b in steps if b and not (b in consts and not np.all(np.isfinite(consts[b])))]
        if not steps:
            nodes.append(helper.make_node("Identity", [cur], [n.output[0]], name=f"{base}_identity"))
        for k, (op, b) in enumerate(steps):
            out = n.output[0] if k == len(steps) - 1 else f"{base}_{op.lower()}"
            nodes.append(helper.make_node(op, [cur, b], [out], name=f"{base}_{op.lower()}"))
            cur = out
        changed += 1
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return changed


def _constants_to_initializers(m) -> int:
    """Top-level ``Constant`` nodes (a tensor ``value``) -> initializers of the same name. Exact; what
    exporters such as Paddle2ONNX leave by the hundred after simplification."""
    from onnx import numpy_helper

    keep, moved = [], 0
    for n in m.graph.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value" and n.output[0]:
            t = numpy_helper.from_array(numpy_helper.to_array(n.attribute[0].t), n.output[0])
            m.graph.initializer.append(t)
            moved += 1
        else:
            keep.append(n)
    if moved:
        del m.graph.node[:]
        m.graph.node.extend(keep)
    return moved


def _integer_pow_to_mul(m) -> int:
    """Pow(x, n) for a constant n in {1, 2, 3, 4} -> Identity / Mul chains, in every graph.

    Bit-identical on CPU. On HTP, ElementWisePower of fp16 -0 returns -4 (n=2), 16 (n=4) and 131008
    (n=1) where Mul(-0, -0) = +0 (measured on v73-v81, QNN 2.51: shared/audits/vad-htp-root-cause.md);
    any square of a value that can round to -0 (a variance, an STFT magnitude) is exposed.
    """
    from onnx import helper

    from .prescale import constants

    consts = constants(m)
    nodes, changed = [], 0
    for n in m.graph.node:
        e = consts.get(n.input[1]) if n.op_type == "Pow" and len(n.input) == 2 else None
        k = float(np.asarray(e).ravel()[0]) if e is not None and np.asarray(e).size == 1 else None
        if k not in (1.0, 2.0, 3.0, 4.0):
            nodes.append(n)
            continue
        x, y, base = n.input[0], n.output[0], n.name or n.output[0]
        if k == 1.0:
            nodes.append(helper.make_node("Identity", [x], [y], name=f"{base}_pow1"))
        elif k == 2.0:
            nodes.append(helper.make_node("Mul", [x, x], [y], name=f"{base}_sq"))
        elif k == 3.0:
            nodes.append(helper.make_node("Mul", [x, x], [f"{base}_sq"], name=f"{base}_sq"))
            nodes.append(helper.make_node("Mul", [f"{base}_sq", x], [y], name=f"{base}_cube"))
        else:
            nodes.append(helper.make_node("Mul", [x, x], [f"{base}_sq"], name=f"{base}_sq"))
            nodes.append(helper.make_node("Mul", [f"{base}_sq", f"{base}_sq"], [y], name=f"{base}_sq2"))
        changed += 1
    if changed:
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    return changed


def _fix_shapes(m, graph: Graph, what: str) -> None:
    by_name = {i.name: i for i in m.graph.input}
    init = {i.name for i in m.graph.initializer}
    for name, spec in graph.inputs.items():
        if name not in by_name:
            raise PrepareError(f"{what}: inputs.{name}: the graph has no input '{name}'",
                               hint=f"inputs: {', '.join(n for n in by_name if n not in init)}")
        dims = by_name[name].type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(spec.shape):
            raise PrepareError(f"{what}: inputs.{name}: shape {spec.shape} has rank {len(spec.shape)}, "
                               f"the graph's input has rank {len(dims)}",
                               hint=f"give {len(dims)} dimensions")
        for i, (d, v) in enumerate(zip(dims, spec.shape)):
            if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != v:
                raise PrepareError(f"{what}: inputs.{name}[{i}]: the graph fixes this dimension to {d.dim_value}, "
                                   f"the matrix says {v}", hint=f"use {d.dim_value}")
        shape = by_name[name].type.tensor_type.shape
        shape.ClearField("dim")
        for v in spec.shape:
            shape.dim.add().dim_value = v
        if spec.dtype is not None:
            from onnx import helper

            current = _dtype_name(by_name[name].type.tensor_type.elem_type)
            if spec.dtype != current and not (spec.dtype == "int32" and current == "int64"):
                raise PrepareError(f"{what}: inputs.{name}.dtype: only int64 -> int32 can be overridden, "
                                   f"the graph's input is {current}", hint="drop the dtype override")
            del helper  # dtype change itself happens in _int64_inputs_to_int32


def _forget_dynamic_output_shapes(m) -> None:
    """Exporters write -1 or names into output shapes: make those dimensions unknown (rank kept)."""
    for out in m.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if not d.HasField("dim_value") or d.dim_value <= 0:
                d.Clear()
    del m.graph.value_info[:]


# ops whose output size follows the values of their inputs, not their shapes
DATA_DEPENDENT = {"NonZero", "Unique", "NonMaxSuppression", "Compress", "TopK", "Loop", "If", "Scan", "Range",
                  "ConstantOfShape", "Expand", "Tile", "Resize", "Reshape", "Slice", "Pad", "OneHot"}


def _pin_output_shapes(m, what: str, notes: list[str], seed: int = 0) -> None:
    """Fix every graph output's shape from shape inference (ONNX's, then onnxruntime's symbolic one).

    An output whose length the inference cannot fix depends on the input data (NonZero-style, or a
    shape computed from values): that is refused, naming the output and the op. Only when no such op
    feeds it are two CPU runs on different inputs asked, and they must agree.
    """
    unknown = [o for o in m.graph.output
               if not o.type.tensor_type.HasField("shape")
               or any(not d.HasField("dim_value") for d in o.type.tensor_type.shape.dim)]
    if not unknown:
        return
    init = {i.name for i in m.graph.initializer}
    ins = [TensorInfo(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim],
                      _dtype_name(i.type.tensor_type.elem_type)) for i in m.graph.input if i.name not in init]
    if any(d <= 0 for t in ins for d in t.shape):
        return  # an input is still dynamic: _static_io names it
    inferred = _inferred_output_shapes(m)
    ran: dict[str, list[tuple]] | None = None
    for out in unknown:
        dims = inferred.get(out.name)
        if dims is None or not all(isinstance(d, int) and d > 0 for d in dims):
            culprit = _data_dependent_ancestor(m, out.name, dims)
            if culprit is not None:
                raise PrepareError(f"{what}: output '{out.name}''s length depends on the input data "
                                   f"({culprit[0]} '{culprit[1]}'): fix its length in the export "
                                   "(pad or split the graph)",
                                   hint="HTP runs graphs of fixed shapes only; post-process on CPU what varies")
            if ran is None:
                ran = _shapes_from_runs(m, ins, seed)
            shapes = ran.get(out.name, [])
            if len(set(shapes)) != 1:
                raise PrepareError(f"{what}: output '{out.name}''s length depends on the input data "
                                   f"(shapes {sorted(set(shapes))} on two inputs): fix its length in the export "
                                   "(pad or split the graph)")
            dims = list(shapes[0])
            notes.append(f"output {out.name}: shape {dims} from two CPU runs (shape inference could not tell)")
        shape = out.type.tensor_type.shape
        shape.ClearField("dim")
        for v in dims:
            shape.dim.add().dim_value = int(v)


def _inferred_output_shapes(m) -> dict[str, list | None]:
    import onnx

    found: dict[str, list | None] = {}
    try:
        inf = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
        for o in inf.graph.output:
            found[o.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                             for d in o.type.tensor_type.shape.dim] if o.type.tensor_type.HasField("shape") else None
    except Exception:  # noqa: S110 - inference is a helper; the symbolic pass or the check below decides
        pass
    if all(v is not None and all(isinstance(d, int) and d > 0 for d in v) for v in found.values()) and found:
        return found
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        sym = SymbolicShapeInference.infer_shapes(m, auto_merge=True)
        for o in sym.graph.output:
            if o.type.tensor_type.HasField("shape"):
                dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                        for d in o.type.tensor_type.shape.dim]
                known = found.get(o.name)
                if known is None or not all(isinstance(d, int) for d in known):
                    found[o.name] = dims
    except Exception:  # noqa: S110 - as above
        pass
    return found


def _data_dependent_ancestor(m, output: str, dims) -> tuple[str, str] | None:
    """The op that makes ``output``'s size follow the data: named by the symbolic inference's dim
    (``NonZero_1_o0__d1``), else the nearest such op upstream whose output has no fixed shape."""
    producers = {o: n for n in m.graph.node for o in n.output}
    for d in dims or []:
        if isinstance(d, str):
            for n in m.graph.node:
                if n.op_type in DATA_DEPENDENT and d.startswith(f"{n.op_type}_"):
                    return n.op_type, n.name or n.output[0]
    seen, stack = set(), [output]
    strict = {"NonZero", "Unique", "NonMaxSuppression", "Compress", "Loop", "If", "Scan"}
    while stack:
        name = stack.pop()
        node = producers.get(name)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type in strict:
            return node.op_type, node.name or node.output[0]
        stack.extend(i for i in node.input if i)
    return None


def _shapes_from_runs(m, ins: list[TensorInfo], seed: int) -> dict[str, list[tuple]]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), sess_options=so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    shapes: dict[str, list[tuple]] = {n: [] for n in names}
    for feed in generate_inputs(ins, 1, seed) + _other_inputs(ins, seed):
        for n, v in zip(names, sess.run(None, feed)):
            shapes[n].append(tuple(int(x) for x in np.shape(v)))
    return shapes


def _other_inputs(ins: list[TensorInfo], seed: int) -> list[dict[str, np.ndarray]]:
    """Inputs unlike the generated ones (another range, other integers): what a data-sized output shows."""
    rng = np.random.default_rng(seed + 7919)
    feed = {}
    for t in ins:
        dt = np.dtype(t.dtype)
        if dt.kind == "f":
            feed[t.name] = rng.uniform(0.25, 4.0, t.shape).astype(dt)
        elif dt.kind in "iu":
            feed[t.name] = rng.integers(0, 3, t.shape).astype(dt)
        else:
            feed[t.name] = np.ones(t.shape, dtype=dt)
    return [feed]


def _int64_inputs_to_int32(m, graph: Graph) -> list[str]:
    """Callers pass int32 (HTP has no int64); a Cast inside the graph restores int64 for its ops."""
    from onnx import TensorProto, helper

    changed = []
    for inp in m.graph.input:
        if inp.type.tensor_type.elem_type != TensorProto.INT64:
            continue
        inner = f"{inp.name}__int64"
        _rename_uses(m.graph, inp.name, inner)
        m.graph.node.insert(0, helper.make_node("Cast", [inp.name], [inner], to=TensorProto.INT64,
                                                name=f"{inp.name}__to_int64"))
        inp.type.tensor_type.elem_type = TensorProto.INT32
        for out in m.graph.output:
            if out.name == inp.name:
                # the input passed straight through as an output: a graph output cannot be a graph input on
                # HTP, and it is int32 now; an Identity gives it a tensor of its own, named <input>_out
                out.name = f"{inp.name}_out"
                out.type.tensor_type.elem_type = TensorProto.INT32
                m.graph.node.append(helper.make_node("Identity", [inp.name], [out.name], name=f"{inp.name}__out"))
        changed.append(inp.name)
    return changed


def _rename_uses(g, old: str, new: str, top: bool = True) -> None:
    for node in g.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for attr in node.attribute:
            if attr.g is not None and attr.HasField("g"):
                _rename_uses(attr.g, old, new, top=False)
            for sub in attr.graphs:
                _rename_uses(sub, old, new, top=False)
    if not top:  # a subgraph's (If/Loop body's) output naming the outer value reads the int64 one now
        for out in g.output:
            if out.name == old:
                out.name = new


def _simplify(m, what: str, notes: list[str], logs: Path | None = None):
    if m.ByteSize() > EXTERNAL_DATA_ABOVE:
        notes.append("onnxsim skipped: the graph is over 2 GB")
        return m
    import onnxsim

    from ..util.quiet import captured

    # onnxsim's `fuse_qkv` joins MatMuls that read one input (attention's Q, K and V projections) into
    # one MatMul and a Split: one weight tensor, so a per-tensor quantizer gives Q (the attention scale
    # folded in, 8x smaller) and K/V one scale, and MatMul has no per-channel form. Measured on Whisper
    # base w8a16: encoder cosine 0.970 fused, 0.993 unfused (0.997 per-channel). HTP fuses as it sees fit.
    kw = {"skipped_optimizers": list(SKIPPED_ONNXSIM_PASSES)}
    logs = logs or Path(tempfile.gettempdir())
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "onnxsim.log"  # what onnxsim prints, beside the graph's prepared versions
    try:
        with captured(log):
            simplified, ok = onnxsim.simplify(m, **kw)
    except Exception as first:
        # onnxsim cannot fold `If` branches whose subgraphs read outer-scope values (silero-vad's
        # sample-rate switch); onnxruntime's basic optimizer folds them once the condition is constant.
        try:
            folded = _ort_basic_fold(m)
            with captured(log):
                simplified, ok = onnxsim.simplify(folded, **kw)
            notes.append("onnxsim failed on the raw graph; constants and If branches folded by "
                         "onnxruntime's basic graph optimizer first")
        except Exception:
            raise PrepareError(f"{what}: onnxsim failed: {clip(str(first), 300)}",
                               hint="fix the export (e.g. fold `If` branches, fix shapes) or give constants"
                               ) from None
    if not ok:
        raise PrepareError(f"{what}: onnxsim could not check the simplified graph")
    before, after = len(m.graph.node), len(simplified.graph.node)
    notes.append(f"onnxsim: {before} -> {after} nodes")
    return simplified


def _ort_basic_fold(m):
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "folded.onnx"
        onnx.save(m, str(src))
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        so.optimized_model_filepath = str(dst)
        ort.InferenceSession(str(src), sess_options=so, providers=["CPUExecutionProvider"])
        return onnx.load(str(dst))


def _static_io(m, what: str) -> tuple[list[TensorInfo], list[TensorInfo]]:
    import onnx

    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=False)
    except Exception:  # noqa: S110 - shape inference is only a helper here; the check below decides
        pass
    init = {i.name for i in m.graph.initializer}
    result = []
    for kind, values in (("input", [i for i in m.graph.input if i.name not in init]), ("output", m.graph.output)):
        infos = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
            if not t.HasField("shape") or any(not isinstance(d, int) or d <= 0 for d in dims):
                raise PrepareError(f"{what}: {kind} '{v.name}' still has a dynamic shape {dims}",
                                   hint=f"fix it in the matrix: graphs[].inputs: {{{v.name}: [..]}}"
                                   if kind == "input" else "fix the input shapes so the output shape follows")
            infos.append(TensorInfo(v.name, [int(d) for d in dims], _dtype_name(t.elem_type)))
        result.append(infos)
    return result[0], result[1]


GENERATED = "uniform [-1, 1) floats, integers in [0, 16), random booleans"


def generated_inputs_note(ranges: dict[str, list[float]] | None = None) -> str:
    """How ``generate_inputs`` made its values, for the report and metadata.json."""
    extra = "; ".join(f"{n} in [{lo:g}, {hi:g})" for n, (lo, hi) in sorted((ranges or {}).items()))
    return f"generated: {GENERATED}" + (f"; {extra}" if extra else "")


def generate_inputs(inputs: list[TensorInfo], count: int, seed: int,
                    ranges: dict[str, list[float]] | None = None) -> list[dict[str, np.ndarray]]:
    """Deterministic inputs: uniform [-1, 1) floats, small non-negative integers, random booleans,
    or uniform in an input's declared ``range`` (graphs[].inputs.<name>.range)."""
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    samples = []
    for _ in range(count):
        feed = {}
        for t in inputs:
            dt = np.dtype(t.dtype)
            lo, hi = ranges.get(t.name, (None, None))
            if dt.kind == "f":
                feed[t.name] = rng.uniform(-1.0 if lo is None else lo, 1.0 if hi is None else hi,
                                           t.shape).astype(dt)
            elif dt.kind in "iu":
                feed[t.name] = rng.integers(0 if lo is None else int(lo), 16 if hi is None else int(hi),
                                            t.shape).astype(dt)
            elif dt.kind == "b":
                feed[t.name] = rng.integers(0, 2, t.shape).astype(bool)
            else:
                raise PrepareError(f"input '{t.name}': cannot generate {t.dtype} inputs",
                                   hint="supply calibration data (calibration.path)")
        samples.append(feed)
    return samples


def cpu_session(path: str | Path):
    """ONNX Runtime on CPU at its BASIC optimisation level (constant folding, no fusions): the highest
    level fuses differently once shapes are static, so a reference and the graph it is compared with
    would not compute the same thing (a correct int8 graph measured cosine 0.989 against itself)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def run_cpu(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    sess = cpu_session(path)
    return [sess.run(None, f) for f in feeds]


def complete_feed(feed: dict[str, np.ndarray], inputs: list[TensorInfo]) -> dict[str, np.ndarray]:
    """A sample's feed with every input the graph takes: a stream's first step leaves its carried state out
    (zeros, as the stream starts)."""
    return {**{t.name: np.zeros(t.shape, dtype=t.dtype) for t in inputs if t.name not in feed}, **feed}


@dataclass(frozen=True)
class CheckedOn:
    """What prepare's check runs on: the feeds, their sample names (real samples), and what they are in words."""

    feeds: list[dict[str, np.ndarray]]
    names: list[str] | None
    note: str
    real: bool


def _parity_with_original(job: _Job, prepared: Path, checked: CheckedOn, cast_inputs) -> Parity:
    """The prepared graph against the original (``job.src``) on CPU, on what ``checked`` says; the cosine it must
    reach is the model's ``options.prepare_min_cosine``."""
    original, graph, what, min_cosine = job.src, job.graph, job.what, job.model.options.prepare_min_cosine
    feeds, sample_names, on, real = checked.feeds, checked.names, checked.note, checked.real
    fix = ("check the samples: they must be shaped and scaled as the app feeds the model" if real else
           "give index inputs their valid values with graphs[].inputs.<name>.range, or the model real samples "
           "(`samples:` in the matrix), which the check then runs on")
    try:
        new = run_cpu(prepared, feeds)
    except Exception as e:
        raise PrepareError(f"{what}: the prepared graph does not run on CPU on {on}: {clip(str(e), 300)}",
                           hint=fix) from None
    try:
        orig_sess = cpu_session(original)
        names = {i.name for i in orig_sess.get_inputs()}
        wide = {i.name for i in orig_sess.get_inputs() if i.type == "tensor(double)"}  # fixes: [float64]
        old = []
        for f in feeds:
            g = {k: (v.astype(np.int64) if k in cast_inputs else v.astype(np.float64) if k in wide else v)
                 for k, v in f.items()}
            for k, v in graph.constants.items():
                if k in names:
                    g[k] = np.asarray(v, dtype=_ort_np(orig_sess, k))
            old.append(orig_sess.run(None, g))
    except Exception as e:
        raise PrepareError(f"{what}: the original graph does not run on CPU with the matrix's shapes on {on}: "
                           f"{clip(str(e), 300)}", hint=fix) from None
    bad = [sum(nonfinite(a) for a in o) for o in old]
    if any(bad):  # the original's own answer: no preparation step is to blame, and nothing can be checked against it
        at = next(i for i, b in enumerate(bad) if b)
        where = f"on {sample_names[at]}" if sample_names else f"on {on}"
        raise PrepareError(f"{what}: CPU itself answers NaN/Inf ({bad[at]} value(s)) {where}, with the original graph: "
                           "the samples or the model, not a preparation step",
                           hint=fix if not real else "run the original model on this sample: padding where the model "
                           "divides by a length or takes a log, or values outside its range, make it NaN; pad as the "
                           "app does (with its mask or length)")
    parities = [compare(a, b) for o, n in zip(old, new) for a, b in zip(o, n)]
    p = worst(parities)
    if p.cosine < min_cosine or p.nan_count:
        raise PrepareError(f"{what}: the prepared graph differs from the original on CPU (cosine {p.cosine:.6f} "
                           f"< {min_cosine})", hint="a preparation step changed the maths: check the notes, or "
                           "set options.prepare_min_cosine for this model if the difference is expected")
    return p


def _ort_np(sess, name: str) -> type[np.generic]:
    t = next(i.type for i in sess.get_inputs() if i.name == name)
    return {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
            "tensor(double)": np.float64, "tensor(float16)": np.float16, "tensor(bool)": np.bool_}.get(t, np.float32)
