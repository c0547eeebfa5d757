"""Layers over an axis the matrix fixes (and an app pads to it): what HTP's static shapes change for the app."""

from __future__ import annotations

from ..matrix.schema import Graph

RECURRENT = {"LSTM", "GRU", "RNN"}
PADDING_WARNING = "warning: recurrent layers over a fixed length"
CONV_PADDING_WARNING = "warning: convolutions over a padded length"
MASK_NAMES = ("mask", "len", "length", "lengths", "valid")  # an input that tells the graph where the padding is


def _fixed_dims(m, graph: Graph) -> list[str]:
    """The dynamic dimensions the matrix fixes above 1 (a batch fixed to 1 pads nothing), as ``name[i] = v``."""
    by_name = {i.name: i for i in m.graph.input}
    fixed = []
    for name, spec in graph.inputs.items():
        dims = by_name[name].type.tensor_type.shape.dim if name in by_name else []
        fixed += [f"{name}[{i}] = {v}" for i, (d, v) in enumerate(zip(dims, spec.shape))
                  if v > 1 and not (d.HasField("dim_value") and d.dim_value > 0)]
    return fixed


def conv_padding_warning(m, graph: Graph) -> str | None:
    """Convolutions over one length the matrix fixes, with no input saying where the padding starts (a mask or a
    length): a text-line recognizer or a 1-D audio/text network that an app feeds padded to that length reads the
    padding near the end of its input (every Conv's receptive field), and a pooling over the axis reads all of
    it. An image network whose height and width are both fixed is resized, not padded: not warned."""
    if any(any(k in i.name.lower() for k in MASK_NAMES) for i in m.graph.input):
        return None
    convs = [n for n in m.graph.node if n.op_type in ("Conv", "ConvTranspose")]
    fixed = [f for f in _fixed_dims(m, graph) if not f.split("[", 1)[1].startswith("0]")]  # axis 0: the batch
    if not convs or len(fixed) != 1 or any(n.op_type in RECURRENT for n in m.graph.node):
        return None  # the recurrent warning says it where there are recurrent layers
    names = ", ".join(n.name or n.output[0] for n in convs[:3]) + (" ..." if len(convs) > 3 else "")
    return (f"{CONV_PADDING_WARNING} ({fixed[0]}): {len(convs)} Conv node(s) ({names}) and no mask or length input, "
            "so an app that pads a shorter input to this length gets other values near the padding (and through "
            "any pooling over it) than the model gives the input itself: feed inputs of exactly this length, crop the "
            "output to the input's own length, or verify on real samples padded as the app pads them")


def padding_warning(m, graph: Graph) -> str | None:
    """A recurrent layer that will run over a dimension the matrix fixes (its time axis, padded by the app to
    that length) without ``sequence_lens``: the app's padded answer is not the unpadded model's, and a
    bidirectional layer reads the padding first on its backward pass. Measured on a BiLSTM tagger padded to
    its fixed length: another class than the unpadded model on 18 % of characters, while HTP agreed with CPU on
    the padded input (verified is true of the graph, not of what the app gets)."""
    layers = [n for n in m.graph.node if n.op_type in RECURRENT and (len(n.input) < 5 or not n.input[4])]
    if not layers:
        return None
    fixed = _fixed_dims(m, graph)
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
