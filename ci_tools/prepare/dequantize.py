"""``fixes: [dequantize]``: a statically quantized (QDQ) source as its float equivalent.

A QDQ graph made for ONNX Runtime's CPU int8 kernels carries scales calibrated for that runtime. Its float
equivalent is exact by the ONNX definitions of the two ops: ``DequantizeLinear(q, scale, zp) = (q - zp) *
scale`` (per axis when ``axis`` is given), so a weight stored as int8 + scale becomes the float initializer
it stands for; ``QuantizeLinear -> DequantizeLinear`` on an activation is a rounding to the calibrated grid,
which the float graph leaves out, and a saturation at the ends of the integer range, which it keeps as a
``Clip`` (quantizers fold a Relu into it that way). The rounding is the only change, and what prepare's
parity check measures. The float
graph then builds as fp16, or as w8a16/int8 calibrated on the model's own samples.
"""

from __future__ import annotations

import numpy as np

RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int16): (-32768, 32767),
          np.dtype(np.uint16): (0, 65535)}


def _reads(nodes) -> set[str]:
    """Every value the nodes read, their subgraphs' reads of outer values (If/Loop/Scan bodies) included."""
    from onnx import AttributeProto

    out: set[str] = set()
    for n in nodes:
        out.update(i for i in n.input if i)
        for a in n.attribute:
            for g in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                out |= _reads(g.node)
    return out


def _index(m) -> tuple[dict, list, dict, dict[str, list]]:
    """(initializers by name, nodes, the node making each value, the nodes reading each value)."""
    nodes = list(m.graph.node)
    users: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            users.setdefault(i, []).append(n)
    return {i.name: i for i in m.graph.initializer}, nodes, {o: n for n in nodes for o in n.output}, users


def _set_nodes(m, nodes: list) -> None:
    """The graph's nodes become ``nodes``; initializers nothing reads any more go (subgraph reads count)."""
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    read = _reads(nodes) | {o.name for o in m.graph.output}
    keep = [i for i in m.graph.initializer if i.name in read]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)


def _saturation(consts: dict, q) -> tuple[float, float] | None:
    """The float range a per-tensor QuantizeLinear -> DequantizeLinear pair passes: [(qmin - zp) * s,
    (qmax - zp) * s]; None for a pair this rewrite leaves (per-axis, or scales computed at run time)."""
    from onnx import numpy_helper

    if q.input[1] not in consts or len(q.input) < 3 or q.input[2] not in consts:
        return None
    scale = numpy_helper.to_array(consts[q.input[1]])
    zp = numpy_helper.to_array(consts[q.input[2]])
    if scale.size != 1 or zp.dtype not in RANGES:
        return None
    qmin, qmax = RANGES[zp.dtype]
    s, z = float(scale.ravel()[0]), float(zp.ravel()[0])
    return (qmin - z) * s, (qmax - z) * s


def dequantize(m) -> tuple[int, int]:
    """Fold every constant DequantizeLinear into a float initializer and drop every activation Q -> DQ
    pair; (weights folded, pairs dropped). A DQ of a graph input (an integer input) is kept."""
    from onnx import helper, numpy_helper

    consts, nodes, made, consumers = _index(m)
    drop, rename, folded, pairs, clips = set(), {}, 0, 0, []
    for n in nodes:
        if n.op_type != "DequantizeLinear" or any(i not in consts for i in n.input if i):
            continue
        q = numpy_helper.to_array(consts[n.input[0]]).astype(np.float64)
        scale = numpy_helper.to_array(consts[n.input[1]]).astype(np.float64)
        zp = numpy_helper.to_array(consts[n.input[2]]).astype(np.float64) if len(n.input) > 2 and n.input[2] \
            else np.zeros_like(scale)
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        if scale.ndim == 1 and q.ndim > 1:  # per axis: the scale runs along `axis`
            shape = [1] * q.ndim
            shape[axis] = -1
            scale, zp = scale.reshape(shape), zp.reshape(shape)
        m.graph.initializer.append(numpy_helper.from_array(((q - zp) * scale).astype(np.float32), n.output[0]))
        drop.add(id(n))
        folded += 1
    for n in nodes:
        if n.op_type != "QuantizeLinear":
            continue
        users = consumers.get(n.output[0], [])
        if users and all(u.op_type == "DequantizeLinear" for u in users) and n.input[0] in {
                *made, *(i.name for i in m.graph.input)}:
            bounds = _saturation(consts, n)
            if bounds is None:
                continue
            # the pair also saturates at the ends of the integer range: a quantizer folds a Relu (or a Clip)
            # into it that way, so the float graph keeps that as a Clip with the same bounds
            lo, hi = (numpy_helper.from_array(np.array(b, dtype=np.float32), f"{n.output[0]}_{w}")
                      for b, w in zip(bounds, ("lo", "hi")))
            m.graph.initializer.extend([lo, hi])
            clip = helper.make_node("Clip", [n.input[0], lo.name, hi.name], [f"{n.output[0]}_float"],
                                    name=f"{n.name or n.output[0]}_range")
            clips.append((n, clip))
            for u in users:
                rename[u.output[0]] = clip.output[0]
                drop.add(id(u))
            drop.add(id(n))
            pairs += 1
    kept = []
    for n in nodes:
        kept += [c for q, c in clips if q is n]  # each Clip where its QuantizeLinear was
        if id(n) not in drop:
            kept.append(n)
    for n in kept:
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]
    for o in m.graph.output:
        if o.name in rename:  # a graph output made by a dropped DQ: keep its name with an Identity
            kept.append(helper.make_node("Identity", [rename[o.name]], [o.name], name=f"{o.name}_float"))
    _set_nodes(m, kept)
    return folded, pairs


INTEGER_OPS = {"MatMulInteger": "MatMul", "ConvInteger": "Conv"}  # what quantize_dynamic emits -> the float op


def dequantize_dynamic(m) -> int:
    """ONNX Runtime's dynamic quantization (``quantize_dynamic``) undone: ``DynamicQuantizeLinear(x) ->
    MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast -> Mul(x_scale * W_scale)`` is, by the ops' definitions,
    ``MatMul(x, (W_q - W_zp) * W_scale)`` up to x's run-time rounding: written so, with the scale Mul an
    Identity; what is left unused goes. ``ConvInteger`` (what it emits for every Conv, with the Conv's
    attributes) the same way, as a ``Conv`` (a per-channel scale runs along the weight's first axis). The
    MatMuls and Convs rewritten."""
    from onnx import helper, numpy_helper

    consts, nodes, made, users = _index(m)
    swap, done = {}, 0
    for n in nodes:
        dql = made.get(n.input[0]) if n.op_type in INTEGER_OPS else None
        if dql is None or dql.op_type != "DynamicQuantizeLinear" or n.input[1] not in consts:
            continue
        casts = users.get(n.output[0], [])
        muls = users.get(casts[0].output[0], []) if len(casts) == 1 and casts[0].op_type == "Cast" else []
        if len(muls) != 1 or muls[0].op_type != "Mul":
            continue
        mul = muls[0]
        scales = made.get(next((i for i in mul.input if i != casts[0].output[0]), ""))
        w_scale = next((i for i in (scales.input if scales is not None and scales.op_type == "Mul" else [])
                        if i in consts), None)
        if w_scale is None or scales is None or dql.output[1] not in scales.input:
            continue
        w = numpy_helper.to_array(consts[n.input[1]]).astype(np.float64)
        zp = numpy_helper.to_array(consts[n.input[3]]).astype(np.float64) if len(n.input) > 3 and \
            n.input[3] in consts else np.zeros(1)
        scale = numpy_helper.to_array(consts[w_scale]).astype(np.float64)
        if n.op_type == "ConvInteger":  # per output channel: the weight's first axis [M, C/group, k...]
            scale = scale.reshape((-1,) + (1,) * (w.ndim - 1)) if scale.size > 1 else scale
            zp = zp.reshape((-1,) + (1,) * (w.ndim - 1)) if zp.size > 1 else zp
        weights = ((w - zp) * scale).astype(np.float32)
        m.graph.initializer.append(numpy_helper.from_array(weights, f"{n.input[1]}_float"))
        swap[id(n)] = helper.make_node(INTEGER_OPS[n.op_type], [dql.input[0], f"{n.input[1]}_float"], [n.output[0]],
                                       name=f"{n.name or n.output[0]}_float")
        swap[id(n)].attribute.extend(n.attribute)  # a ConvInteger's pads, strides, dilations, group, kernel_shape
        swap[id(mul)] = helper.make_node("Identity", [casts[0].output[0]], [mul.output[0]],
                                         name=f"{mul.name or mul.output[0]}_unscaled")
        done += 1
    if done:
        kept = [swap.get(id(n), n) for n in nodes]
        graph_outputs = {o.name for o in m.graph.output}
        while True:  # what only fed the rewritten nodes (DynamicQuantizeLinear, the scale Muls) goes
            read = _reads(kept) | graph_outputs
            alive = [n for n in kept if any(o in read for o in n.output)]
            if len(alive) == len(kept):
                break
            kept = alive
        _set_nodes(m, kept)
    return done


def _per_direction(a, dirs: int, gates: int) -> np.ndarray:
    """A DynamicQuantizeLSTM scale or zero point ([dirs] per direction, or [dirs, gates] per channel) shaped to
    broadcast over its weight [dirs, in, gates]."""
    a = np.asarray(a, dtype=np.float64)
    return a.reshape(dirs, 1, gates) if a.size == dirs * gates and gates != 1 else a.reshape(-1, 1, 1)


def dequantize_lstm(m) -> int:
    """ONNX Runtime's ``com.microsoft.DynamicQuantizeLSTM`` (what ``quantize_dynamic`` makes of an LSTM) back to
    the standard ``LSTM``: its int8 weights W [dirs, input, 4*hidden] and R [dirs, hidden, 4*hidden] (transposed
    against LSTM's [dirs, 4*hidden, input]) are ``(q - zero_point) * scale`` per direction or per output channel
    (the contrib op's documented inputs 8-11), with the same gate order and attributes. The LSTMs rewritten."""
    from onnx import helper, numpy_helper

    consts, nodes, _, _ = _index(m)
    done, kept = 0, []
    for n in nodes:
        if n.op_type != "DynamicQuantizeLSTM" or n.domain != "com.microsoft":
            kept.append(n)
            continue
        ins = list(n.input) + [""] * (12 - len(n.input))
        needed = [ins[1], ins[2], ins[8], ins[9], ins[10], ins[11]]
        if any(x not in consts for x in needed):
            kept.append(n)  # weights computed at run time: not a quantize_dynamic export
            continue
        w_q, r_q, w_s, w_z, r_s, r_z = (numpy_helper.to_array(consts[x]).astype(np.float64) for x in needed)
        dirs, gates = w_q.shape[0], w_q.shape[2]
        w = ((w_q - _per_direction(w_z, dirs, gates)) * _per_direction(w_s, dirs, gates)).transpose(0, 2, 1)
        r = ((r_q - _per_direction(r_z, dirs, gates)) * _per_direction(r_s, dirs, gates)).transpose(0, 2, 1)
        base = n.name or n.output[0]
        m.graph.initializer.extend([numpy_helper.from_array(w.astype(np.float32), f"{base}_W_float"),
                                    numpy_helper.from_array(r.astype(np.float32), f"{base}_R_float")])
        inputs = [ins[0], f"{base}_W_float", f"{base}_R_float", *ins[3:8]]
        while inputs and not inputs[-1]:
            inputs.pop()
        lstm = helper.make_node("LSTM", inputs, list(n.output), name=f"{base}_float")
        lstm.attribute.extend(a for a in n.attribute)
        kept.append(lstm)
        done += 1
    if done:
        _set_nodes(m, kept)
    return done


def dequantize_gathers(m) -> int:
    """An int8 embedding (``quantize_dynamic`` on a Gather): ``Gather(table_q, ids) -> DequantizeLinear(scale,
    zero_point)`` is ``Gather((table_q - zero_point) * scale, ids)`` element for element, since a Gather only
    picks rows; written so with the float table. Per tensor, or per axis on a table axis the Gather keeps.
    The embeddings rewritten."""
    from onnx import helper, numpy_helper

    consts, nodes, made, users = _index(m)
    swap, drop, done = {}, set(), 0
    for dq in nodes:
        g = made.get(dq.input[0]) if dq.op_type == "DequantizeLinear" else None
        if g is None or g.op_type != "Gather" or g.input[0] not in consts or len(users.get(g.output[0], [])) != 1 \
                or any(x not in consts for x in dq.input[1:] if x):
            continue
        table = numpy_helper.to_array(consts[g.input[0]]).astype(np.float64)
        scale = numpy_helper.to_array(consts[dq.input[1]]).astype(np.float64)
        zp = numpy_helper.to_array(consts[dq.input[2]]).astype(np.float64) if len(dq.input) > 2 and dq.input[2] \
            else np.zeros_like(scale)
        if scale.size > 1:  # per axis: only the last axis, and only where it is the table's last axis too
            g_axis = next((a.i for a in g.attribute if a.name == "axis"), 0) % table.ndim
            axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
            if axis != -1 or g_axis == table.ndim - 1 or scale.size != table.shape[-1]:
                continue
        name = f"{g.input[0]}_float"
        m.graph.initializer.append(numpy_helper.from_array(((table - zp) * scale).astype(np.float32), name))
        swap[id(g)] = helper.make_node("Gather", [name, g.input[1]], [dq.output[0]], name=f"{g.name or name}_float",
                                       axis=next((a.i for a in g.attribute if a.name == "axis"), 0))
        drop.add(id(dq))
        done += 1
    if done:
        _set_nodes(m, [swap.get(id(n), n) for n in nodes if id(n) not in drop])
    return done


LAYOUT_OPS = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Gather"}  # input 0: the data


def dequantize_through_layout(m) -> int:
    """A DequantizeLinear of an 8-bit constant read through layout ops first (``table_q -> Transpose -> DQ``, a
    tied embedding; ``Gather(table_q, ids) -> Reshape -> DQ``). Per tensor, dequantizing commutes with every op
    that only moves or picks elements, so the constant becomes its float value ``(q - zp) * scale`` and the DQ
    an Identity; per axis, a chain of constants only is computed once (ONNX's reference evaluator) and the DQ
    then folds as any constant one. The DequantizeLinears rewritten."""
    from onnx import helper, numpy_helper

    consts, nodes, made, users = _index(m)
    swap, done = {}, 0
    drop: set[int] = set()
    for dq in nodes:
        if dq.op_type != "DequantizeLinear" or dq.input[0] in consts or any(x not in consts for x in dq.input[1:] if x):
            continue
        chain: list = []
        v = dq.input[0]
        while v not in consts:
            n = made.get(v)
            if n is None or n.op_type not in LAYOUT_OPS or len(users.get(v, [])) != 1:
                chain = []
                break
            chain.append(n)
            v = n.input[0]
        if not chain:
            continue
        scale = numpy_helper.to_array(consts[dq.input[1]]).astype(np.float64)
        zp = numpy_helper.to_array(consts[dq.input[2]]).astype(np.float64) if len(dq.input) > 2 and dq.input[2] \
            else np.zeros_like(scale)
        if scale.size == 1:
            q = numpy_helper.to_array(consts[v]).astype(np.float64)
            name = f"{dq.output[0]}_table"  # its own: another DequantizeLinear of the table may scale it otherwise
            m.graph.initializer.append(numpy_helper.from_array(((q - zp.ravel()[0]) * scale.ravel()[0])
                                                               .astype(np.float32), name))
            chain[-1].input[0] = name
            swap[id(dq)] = helper.make_node("Identity", [dq.input[0]], [dq.output[0]], name=f"{dq.name or v}_float")
        elif all(i in consts for n in chain for i in n.input[1:] if i):
            m.graph.initializer.append(numpy_helper.from_array(_evaluate(chain, consts), dq.input[0]))
            drop.update(id(n) for n in chain)
        else:
            continue  # per axis through a run-time Gather: left (the doctor names it)
        done += 1
    if done:
        _set_nodes(m, [swap.get(id(n), n) for n in nodes if id(n) not in drop])
        made_now = {o for n in m.graph.node for o in n.output}  # the chains' values are float now: inferred again
        kept = [v for v in m.graph.value_info if v.name in made_now  # 8- and 16-bit integers: the chains' old types
                and v.type.tensor_type.elem_type not in (2, 3, 4, 5)]
        del m.graph.value_info[:]
        m.graph.value_info.extend(kept)
    return done


def _evaluate(chain: list, consts: dict) -> np.ndarray:
    """The value a chain of constant layout ops (last made first) gives, by ONNX's reference evaluator."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    ordered = list(reversed(chain))
    needed = {i for n in ordered for i in n.input if i in consts}
    g = helper.make_graph(ordered, "chain", [], [helper.make_tensor_value_info(chain[0].output[0], 0, None)],
                          [consts[i] for i in needed])
    (out,) = ReferenceEvaluator(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).run(None, {})
    return np.asarray(out)
