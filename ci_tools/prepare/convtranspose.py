"""``fixes: [convtranspose-output-padding]``: a ConvTranspose's ``output_padding`` written as end padding HTP
computes right.

HTP computes a depthwise ConvTranspose (one channel per group) with an ``output_padding`` wrongly: the probe
in ``compile/htp_quirks.py`` (a speech-enhancement decoder's kernel [1, 3], stride [1, 2], pads [0, 1, 0, 1],
output_padding [0, 1]) gives cosine 0.007 against CPU on the emulator, while the same layer without
output_padding, or with groups of two channels, agrees at 0.9999999.

By the operator's definition the output along an axis is the full transposed convolution (length
``stride * (in - 1) + dilation * (kernel - 1) + 1``) cut by ``pads`` at both ends and extended by
``output_padding`` at the end. Where ``output_padding <= pad_end`` the extension is the part of the full result
the end pad would have cut: ``pads_end - output_padding`` and no output_padding is the same tensor. Where it is
larger, the positions past the full result hold the bias only: no end pad, no output_padding, a zero ``Pad`` at
the end, and the bias added after it. Exact either way.
"""

from __future__ import annotations

import numpy as np


def _attr(n, name: str, default):
    from onnx import helper

    for a in n.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def output_padding_as_pads(m) -> int:
    """Rewrite every ConvTranspose with a non-zero output_padding (explicit pads, no output_shape): how many."""
    from onnx import helper, numpy_helper

    consts = {i.name: i for i in m.graph.initializer}
    nodes, done = [], 0
    for n in m.graph.node:
        out_pad = list(_attr(n, "output_padding", [])) if n.op_type == "ConvTranspose" else []
        auto = _attr(n, "auto_pad", b"NOTSET")
        if not any(out_pad) or _attr(n, "output_shape", None) is not None or auto not in (b"NOTSET", "NOTSET") \
                or n.input[1] not in consts:
            nodes.append(n)
            continue
        rank = len(consts[n.input[1]].dims) - 2
        pads = list(_attr(n, "pads", [0] * 2 * rank))
        begin, end = pads[:rank], pads[rank:]
        extra = [max(0, op - pe) for op, pe in zip(out_pad, end)]
        end = [max(0, pe - op) for op, pe in zip(out_pad, end)]
        base = n.name or n.output[0]
        bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
        keep = {a.name: helper.get_attribute_value(a) for a in n.attribute
                if a.name not in ("pads", "output_padding")}
        if not any(extra):
            nodes.append(helper.make_node("ConvTranspose", list(n.input), list(n.output), name=base,
                                          pads=begin + end, **keep))
            done += 1
            continue
        core = f"{base}_core"
        nodes.append(helper.make_node("ConvTranspose", [n.input[0], n.input[1]], [core], name=core,
                                      pads=begin + end, **keep))
        widths = numpy_helper.from_array(np.array([0] * (2 + rank) + [0, 0] + extra, dtype=np.int64),
                                         f"{base}_tail")
        m.graph.initializer.append(widths)
        padded = n.output[0] if bias is None else f"{base}_padded"
        nodes.append(helper.make_node("Pad", [core, widths.name], [padded], name=f"{base}_tail_pad"))
        if bias is not None:
            shape = numpy_helper.from_array(np.array([1, -1] + [1] * rank, dtype=np.int64), f"{base}_bias_shape")
            m.graph.initializer.append(shape)
            nodes.append(helper.make_node("Reshape", [bias, shape.name], [f"{base}_bias"], name=f"{base}_bias"))
            nodes.append(helper.make_node("Add", [padded, f"{base}_bias"], [n.output[0]], name=f"{base}_bias_add"))
        done += 1
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return done


def wrong_on_htp(m) -> list[str]:
    """The ConvTranspose nodes HTP is known to compute wrongly: depthwise, with an output_padding."""
    consts = {i.name: i for i in m.graph.initializer}
    found = []
    for n in m.graph.node:
        if n.op_type != "ConvTranspose" or not any(_attr(n, "output_padding", [])) or n.input[1] not in consts:
            continue
        w = consts[n.input[1]].dims  # [C_in, C_out / group, k...]
        if _attr(n, "group", 1) == w[0] and w[1] == 1 and w[0] > 1:
            found.append(n.name or n.output[0])
    return found
