"""A Piper VITS export cut into what HTP runs whole and what the host does.

- ``encoder.onnx`` (static): ids [1, max_ids] (zero-padded) and their length -> ``m_p``, ``logs_p`` [1, C,
  max_ids], ``x_mask`` [1, 1, max_ids] and ``dp_x`` (the duration predictor's input);
- ``duration.onnx`` (dynamic, on the host): ``dp_x``, ``x_mask``, its ``noise`` [1, 2, n] (the graph's
  RandomNormalLike made an input) and ``noise_w`` -> ``logw``. Its rational-quadratic spline flows index with
  masks (NonZero, GatherND, ScatterND, CumSum) that stay data-dependent at any fixed size: 31 of 598 nodes land
  on HTP, and the whole predictor costs about 8 ms a sentence on CPU;
- ``decoder.onnx`` (static): the flow and HiFi-GAN on ``z_p`` [1, C, frames] and ``y_mask`` [1, 1, frames] ->
  ``audio`` [1, 1, frames * hop].

The cut points are tensor names of Piper's export (torch 2.0, opset 15; ``piper_train.export_onnx``); a graph
without them is refused naming the first one missing.
"""

from __future__ import annotations

import collections
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from ...errors import ConfigError
from ...util.text import clip

M_P, LOGS_P = "/enc_p/Split_output_0", "/enc_p/Split_output_1"
X_MASK, DP_X = "/enc_p/Cast_1_output_0", "/enc_p/encoder/Mul_2_output_0"
LOGW, DP_NOISE, NOISE_W = "/dp/Split_output_0", "/dp/RandomNormalLike_output_0", "/Gather_2_output_0"
Z_P, Y_MASK, AUDIO = "/Add_output_0", "/Cast_2_output_0", "/dec/Tanh_output_0"
DYNAMIC = {"NonZero", "CumSum", "ScatterND", "GatherND", "Range", "RandomNormalLike", "RandomNormal",
           "RandomUniform", "RandomUniformLike", "Loop", "If"}
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def subgraph(model, inputs: list[tuple], outputs: list[tuple[str, str]], name: str, where: str):
    """The nodes ``outputs`` need, cut at ``inputs`` ([(tensor, new name, dtype, shape)]); refused when they
    would still read another of the graph's inputs (``scales``)."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    missing = next((t for t, *_ in inputs if t not in producer and t not in {i.name for i in g.input}), None) or \
        next((t for t, _ in outputs if t not in producer), None)
    if missing:
        raise ConfigError(f"{where}: no tensor {missing!r}: not a Piper VITS export (piper_train.export_onnx, "
                          "opset 15)", hint="export the voice with Piper's own exporter")
    stops = {t for t, *_ in inputs}
    keep, seen, stack = set(), set(), [t for t, _ in outputs]
    while stack:
        t = stack.pop()
        if t in seen or t in stops or t not in producer:
            continue
        seen.add(t)
        keep.add(id(producer[t]))
        stack.extend(producer[t].input)
    nodes = [n for n in g.node if id(n) in keep]  # the graph's order is topological
    used = {i for n in nodes for i in n.input if i}
    leaked = used & {i.name for i in g.input} - stops
    if leaked:
        raise ConfigError(f"{where}: the {name} cut still reads {sorted(leaked)}: not the Piper graph this recipe "
                          "knows")
    rename = {t: new for t, new, *_ in inputs}
    copied = []
    for n in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        for k, i in enumerate(c.input):
            c.input[k] = rename.get(i, i)
        copied.append(c)
    copied += [helper.make_node("Identity", [rename.get(t, t)], [new], name=f"out_{new}") for t, new in outputs]
    graph = helper.make_graph(copied, name, [helper.make_tensor_value_info(new, dt, shape)
                                             for _, new, dt, shape in inputs],
                              [helper.make_tensor_value_info(new, F32, None) for _, new in outputs],
                              [i for i in g.initializer if i.name in used])
    m = helper.make_model(graph, opset_imports=list(model.opset_import), producer_name="qnn-release piper cut")
    m.ir_version = model.ir_version
    return onnx.shape_inference.infer_shapes(m)


def _simplify(m, name: str, where: str):
    import onnxsim

    s, ok = onnxsim.simplify(m)
    if not ok:
        raise ConfigError(f"{where}: the {name} graph does not simplify to static shapes (onnxsim)")
    del s.graph.value_info[:]  # symbolic dims from before folding
    for o in s.graph.output:
        o.type.tensor_type.ClearField("shape")
    s = onnx.shape_inference.infer_shapes(s, strict_mode=True)
    left = DYNAMIC & {n.op_type for n in s.graph.node}
    if left:
        raise ConfigError(f"{where}: the {name} graph keeps data-dependent ops {sorted(left)} at static sizes")
    return s


def op_counts(m) -> dict[str, int]:
    return dict(sorted(collections.Counter(n.op_type for n in m.graph.node).items()))


def cut(onnx_path: Path, out: Path, max_ids: int, frames: int) -> dict:
    """Write ``encoder.onnx``, ``duration.onnx`` and ``decoder.onnx`` into ``out``; returns their sizes and op
    counts, the channels (C) and the samples per latent frame (hop)."""
    where = str(onnx_path)
    try:
        src = onnx.load(str(onnx_path))
    except Exception as e:
        raise ConfigError(f"{where}: not an ONNX model ({clip(str(e), 120)})") from None
    shapes = {v.name: v for v in onnx.shape_inference.infer_shapes(src).graph.value_info}

    def channels(t: str) -> int:
        if t not in shapes:
            raise ConfigError(f"{where}: no tensor {t!r}: not a Piper VITS export (piper_train.export_onnx, opset 15)")
        return shapes[t].type.tensor_type.shape.dim[1].dim_value

    c, h = channels(M_P), channels(DP_X)
    graphs = {
        "encoder": subgraph(src, [("input", "input", I64, [1, max_ids]), ("input_lengths", "input_lengths", I64, [1])],
                            [(M_P, "m_p"), (LOGS_P, "logs_p"), (X_MASK, "x_mask"), (DP_X, "dp_x")], "encoder", where),
        "duration": subgraph(src, [(DP_X, "dp_x", F32, [1, h, "T"]), (X_MASK, "x_mask", F32, [1, 1, "T"]),
                                   (DP_NOISE, "noise", F32, [1, 2, "T"]), (NOISE_W, "noise_w", F32, [])],
                             [(LOGW, "logw")], "duration", where),
        "decoder": subgraph(src, [(Z_P, "z_p", F32, [1, c, frames]), (Y_MASK, "y_mask", F32, [1, 1, frames])],
                            [(AUDIO, "audio")], "decoder", where),
    }
    info: dict = {"channels": c, "hidden": h}
    out.mkdir(parents=True, exist_ok=True)
    for name, m in graphs.items():
        if name != "duration":
            m = _simplify(m, name, where)
        tmp = out / f".{name}.onnx.tmp"
        onnx.save(m, str(tmp))
        tmp.replace(out / f"{name}.onnx")
        info[name] = {"nodes": len(m.graph.node), "ops": op_counts(m)}
        if name == "decoder":
            samples = m.graph.output[0].type.tensor_type.shape.dim[-1].dim_value
            info["hop"] = samples // frames
    return info
