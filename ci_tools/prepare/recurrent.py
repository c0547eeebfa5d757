"""Recurrent layers over a time axis the matrix fixes: what HTP's static shapes change for the app."""

from __future__ import annotations

from ..matrix.schema import Graph

RECURRENT = {"LSTM", "GRU", "RNN"}
PADDING_WARNING = "warning: recurrent layers over a fixed length"


def padding_warning(m, graph: Graph) -> str | None:
    """A recurrent layer that will run over a dimension the matrix fixes (its time axis, padded by the app to
    that length) without ``sequence_lens``: the app's padded answer is not the unpadded model's, and a
    bidirectional layer reads the padding first on its backward pass. Measured on a BiLSTM tagger padded to
    its fixed length: another class than the unpadded model on 18 % of characters, while HTP agreed with CPU on
    the padded input (verified is true of the graph, not of what the app gets)."""
    layers = [n for n in m.graph.node if n.op_type in RECURRENT and (len(n.input) < 5 or not n.input[4])]
    if not layers:
        return None
    by_name = {i.name: i for i in m.graph.input}
    fixed = []
    for name, spec in graph.inputs.items():
        dims = by_name[name].type.tensor_type.shape.dim if name in by_name else []
        fixed += [f"{name}[{i}] = {v}" for i, (d, v) in enumerate(zip(dims, spec.shape))
                  if v > 1 and not (d.HasField("dim_value") and d.dim_value > 0)]  # a batch fixed to 1 pads nothing
    if not fixed:
        return None
    both = [n.name or n.output[0] for n in layers
            if any(a.name == "direction" and a.s == b"bidirectional" for a in n.attribute)]
    names = ", ".join(n.name or n.output[0] for n in layers[:4]) + (" ..." if len(layers) > 4 else "")
    names += f"; bidirectional: {', '.join(both[:4])}" if both else ""
    kinds = "/".join(sorted({n.op_type for n in layers}))
    return (f"{PADDING_WARNING} ({', '.join(fixed)}): {len(layers)} {kinds} node(s) ({names}) have no "
            "sequence_lens, so an app that pads a shorter input to this length gets another answer than the model "
            "on the input itself"
            + (" (a bidirectional layer reads the padding first)" if both else "") + ": feed inputs of exactly this "
            "length, export the layers with sequence_lens or a mask, or verify on real samples padded as the app "
            "pads them")
