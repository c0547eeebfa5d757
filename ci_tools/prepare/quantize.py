"""QDQ quantization for the ort route (w8a16, int8), once per graph and precision.

Uses ``onnxruntime.quantization.execution_providers.qnn``. ``qnn_preprocess_model`` crashes
with onnx 1.23 (metadata_props TypeError); quantizing without it works, so it is skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..errors import CompileError
from ..util.text import clip

# precision -> (activation type, weight type)
QTYPES = {"w8a16": ("QUInt16", "QUInt8"), "int8": ("QUInt8", "QUInt8")}
BITS = {"fp16": (16, 16), "w8a16": (16, 8), "int8": (8, 8)}  # (activation bits, weight bits)
QUANT_VERSION = 5  # part of the cached file's name: bump when a change here changes what is written


def weight_scales(per_channel: bool) -> str:
    """How a quantized target's weights are scaled, as the report and metadata.json say it."""
    return "per-channel" if per_channel else "per-tensor"


def calibration_hash(samples: list[dict[str, np.ndarray]]) -> str:
    h = hashlib.sha256()
    for s in samples:
        for k in sorted(s):
            h.update(k.encode())
            h.update(np.ascontiguousarray(s[k]).tobytes())
    return h.hexdigest()


def load_calibration(folder: Path, inputs) -> list[dict[str, np.ndarray]]:
    """One sample per .npz (one array per graph input), cast to the prepared graph's dtypes and checked."""
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise CompileError(f"calibration folder {folder} has no .npz files",
                           hint="save one .npz per sample with one array per graph input (np.savez)")
    out = []
    for f in files:
        try:
            z = np.load(f, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise CompileError(f"{f}: not a readable .npz: {e}") from None
        with z:
            missing = [t.name for t in inputs if t.name not in z.files]
            if missing:
                raise CompileError(f"{f}: no array for input(s) {', '.join(missing)}",
                                   hint=f"arrays: {', '.join(z.files)}")
            sample = {}
            for t in inputs:
                a = z[t.name]
                if list(a.shape) != list(t.shape):
                    raise CompileError(f"{f}: input {t.name} has shape {list(a.shape)}, the graph takes {t.shape}")
                sample[t.name] = a.astype(np.dtype(t.dtype))
            out.append(sample)
    return out


def quantize_graph(prepared_path: Path, precision: str, samples: list[dict[str, np.ndarray]],
                   per_channel: bool = True) -> Path:
    """Write ``<prepared folder>/<precision>[-pc]-q<version>-<calib hash>.qdq.onnx`` once (checked by onnx's
    checker first, so an invalid graph is never cached); return it.

    ``per_channel``: one weight scale per output channel where QNN has that form (Conv, Gemm; the
    quantizer leaves MatMul per tensor). Measured on Whisper base w8a16 (CPU simulation of the QDQ
    graph): encoder cosine 0.993 per tensor, 0.997 per channel; decoder logits worst step 0.946 -> 0.982.
    """
    stem = f"{precision}{'-pc' if per_channel else ''}-q{QUANT_VERSION}-{calibration_hash(samples)[:12]}"
    out = prepared_path.parent / f"{stem}.qdq.onnx"
    if out.exists():
        return out
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self):
            return next(self.it, None)

    act, weight = QTYPES[precision]
    what = _what(prepared_path)
    tmp = Path(tempfile.mkdtemp(prefix=".quant.", dir=prepared_path.parent))
    # 8-bit graphs get standard-domain Q/DQ; 16-bit ones below opset 21 get com.microsoft's, which take
    # `axis` at any opset
    needs_opset = per_channel and act == "QUInt8"
    converted = prepared_path.parent / f".{stem}.opset{PER_CHANNEL_OPSET}.onnx"
    try:
        source = _per_channel_opset(prepared_path, converted, what) if needs_opset else prepared_path
        config = get_qnn_qdq_config(str(source), Reader(), activation_type=getattr(QuantType, act),
                                    weight_type=getattr(QuantType, weight), per_channel=per_channel,
                                    nodes_to_exclude=shape_nodes(source) or None)
        from ..util.quiet import captured

        with captured(prepared_path.parent / f"{stem}.quantize.log"):
            quantize(str(source), str(tmp / "q.onnx"), config)
        import onnx

        try:
            onnx.checker.check_model(str(tmp / "q.onnx"))
        except onnx.checker.ValidationError as e:
            raise CompileError(f"{what}: {precision} quantization wrote an invalid graph: {_first_line(e)}",
                               hint="try calibration.per_channel: false, or report it with the model") from None
        from .quant_check import check_quantized

        check_quantized(prepared_path, tmp / "q.onnx", samples, what, precision)
        _move_with_data(tmp / "q.onnx", out)
    except CompileError:
        raise
    except Exception as e:
        raise CompileError(f"{what}: {precision} quantization failed: {_first_line(e)}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        converted.unlink(missing_ok=True)
    return out


# inputs that hold sizes, indices or axes, never activations: quantizing them (a Resize's scales got a scale
# of 1.5e-9 on a Paddle detector) makes a graph HTP refuses to compile (error 7004)
SHAPE_INPUTS = {"Resize": (1, 2, 3), "Upsample": (1,), "Reshape": (1,), "Expand": (1,), "Tile": (1,),
                "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Squeeze": (1,), "Unsqueeze": (1,), "ConstantOfShape": (0,),
                "TopK": (1,), "Range": (0, 1, 2), "OneHot": (1,), "ReduceSum": (1,), "ReduceMean": (1,),
                "ReduceMax": (1,), "ReduceMin": (1,), "Split": (1,), "Gather": (1,), "GatherElements": (1,),
                "ScatterND": (1,), "CumSum": (1,)}


def shape_nodes(model_path: Path) -> list[str]:
    """The nodes whose outputs only feed inputs that hold sizes, indices or axes (and the nodes feeding
    only those): the quantizer leaves them and their outputs alone."""
    import onnx

    g = onnx.load(str(model_path), load_external_data=False).graph
    consumers: dict[str, list[tuple]] = {}
    for n in g.node:
        for k, i in enumerate(n.input):
            consumers.setdefault(i, []).append((n, k))
    shape_like: set[str] = set()
    changed = True
    while changed:  # walk up: a node is shape-like when everything it makes goes to shape inputs
        changed = False
        for n in g.node:
            name = n.name or n.output[0]
            if name in shape_like or not n.output:
                continue
            uses = [(c, k) for o in n.output for c, k in consumers.get(o, [])]
            if uses and all(k in SHAPE_INPUTS.get(c.op_type, ()) or (c.name or c.output[0]) in shape_like
                            for c, k in uses):
                shape_like.add(name)
                changed = True
    named = {n.name for n in g.node if n.name}  # the quantizer excludes nodes by name
    return sorted(shape_like & named)


def _what(prepared_path: Path) -> str:
    """<model>/<graph> of a prepared graph (``<work>/<model>/<graph>/<key>/graph.onnx``)."""
    return f"{prepared_path.parent.parent.parent.name}/{prepared_path.parent.parent.name}"


def _first_line(e: Exception) -> str:
    return clip(str(e), 300) or type(e).__name__


def _move_with_data(src: Path, dst: Path) -> None:
    """Move a graph and its external-data file (a quantized graph over 2 GB) into place, the graph last."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    m = onnx.load(str(src), load_external_data=False)
    located = [e for t in _get_all_tensors(m) if uses_external_data(t) for e in t.external_data if e.key == "location"]
    if located:
        data = dst.with_name(dst.name + ".data")
        os.replace(src.parent / located[0].value, data)
        for e in located:
            e.value = data.name
        onnx.save(m, str(src))
    os.replace(src, dst)


PER_CHANNEL_OPSET = 13  # DequantizeLinear's `axis` (a scale per channel) is opset 13


def _per_channel_opset(prepared_path: Path, out: Path, what: str) -> Path:
    """The graph at opset 13 or later for int8: per-channel scales need DequantizeLinear's ``axis``, and
    the quantizer writes it into an older graph all the same (an invalid model: "Unrecognized attribute:
    axis", measured on RapidOCR's opset-11 classifier at int8). Older graphs are converted by onnx."""
    import onnx
    from onnx import version_converter

    # weights stay where they are (external data of a big graph): `out` is written beside the graph
    m = onnx.load(str(prepared_path), load_external_data=False)
    opsets = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    if len(opsets) != 1:
        raise CompileError(f"{what}: the graph imports the default ONNX domain {len(opsets)} times: {opsets}",
                           hint="export it with one default-domain opset")
    if opsets[0] >= PER_CHANNEL_OPSET:
        return prepared_path
    try:
        converted = version_converter.convert_version(m, PER_CHANNEL_OPSET)
    except Exception as e:
        raise CompileError(f"{what}: per-channel int8 needs opset {PER_CHANNEL_OPSET}; onnx could not convert "
                           f"this opset-{opsets[0]} graph: {_first_line(e)}",
                           hint="set calibration.per_channel: false, or export at opset 13 or later") from None
    onnx.save(converted, str(out))
    return out
