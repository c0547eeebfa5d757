"""A normalisation computed on a pre-scaled input: the declared prepare rewrite ``graphs[].prescale``.

LayerNorm and RMSNorm exported as plain ops (``ReduceMean -> Sub -> Mul/Pow -> ReduceMean -> Add(eps) ->
Sqrt -> Div``) square their input: activations of a few hundred give squares beyond fp16's 65504, and
HTP carries garbage from there (a file-type classifier's LayerNorm reached 161273 on a real file). Both
norms are scale-invariant: normalising ``x / k`` with ``eps / k**2`` gives the same output, so the
rewrite feeds the norm ``Mul(x, 1/k)`` and divides its epsilon by ``k**2``; the squares shrink by ``k**2``.
prepare's parity check against the original graph on CPU checks it like every other rewrite. The fp16
range check offers the entry (the tensor and a power-of-two ``k``) when an overflow starts inside a norm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

FP16_MAX = 65504.0
HEADROOM = 8.0  # the scaled squares stay 8x below 65504: sums over the reduced axis and later samples


@dataclass(frozen=True)
class Norm:
    x: str  # the tensor normalised (what the mean, the squares and the division read)
    kind: str  # "layernorm" or "rmsnorm"
    readers: tuple[tuple[int, int], ...]  # (node index, input index) that read x inside the norm
    eps: tuple[int, int]  # (node index, input index) of the epsilon
    nodes: frozenset[str]  # the norm's node names, for the range check's offer


def constants(m) -> dict[str, np.ndarray]:
    """Every constant value of the main graph by name: initializers and `Constant` nodes' tensors."""
    from onnx import numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return consts


def find_norms(m) -> list[Norm]:
    """Every decomposed LayerNorm/RMSNorm of the graph: mean of squares (of x, or of x minus its mean), plus
    a constant epsilon, square root, then x (or the centred x) divided by it or times its reciprocal."""
    nodes = list(m.graph.node)
    consts = constants(m)
    made = {o: (i, n) for i, n in enumerate(nodes) for o in n.output}
    norms = []
    for n in nodes:
        if n.op_type != "Sqrt" or n.input[0] not in made:
            continue
        a_i, add = made[n.input[0]]
        if add.op_type != "Add" or len(add.input) != 2:
            continue
        e_side = next((k for k in (0, 1) if add.input[k] in consts and consts[add.input[k]].size == 1), None)
        if e_side is None:
            continue
        var = made.get(add.input[1 - e_side])
        if var is None or var[1].op_type not in ("ReduceMean", "ReduceSum"):
            continue
        sq = made.get(var[1].input[0])
        if sq is None or not _is_square(sq[1], consts):
            continue
        d = sq[1].input[0]
        users = _dividers(nodes, made, n.output[0], d)
        if not users:
            continue
        centred = made.get(d)
        readers: tuple[tuple[int, int], ...]
        if centred is not None and centred[1].op_type == "Sub" and made.get(centred[1].input[1], (0, None))[1] \
                is not None and made[centred[1].input[1]][1].op_type == "ReduceMean" \
                and made[centred[1].input[1]][1].input[0] == centred[1].input[0]:
            x = centred[1].input[0]
            mean_i = made[centred[1].input[1]][0]
            readers = ((mean_i, 0), (centred[0], 0))
            kind = "layernorm"
            inner = {_id(nodes[mean_i]), _id(centred[1])}
        else:
            x = d
            readers = tuple([(sq[0], k) for k in range(len(sq[1].input)) if sq[1].input[k] == x] +
                            [(u, k) for u in users for k in range(len(nodes[u].input)) if nodes[u].input[k] == x])
            kind = "rmsnorm"
            inner = set()
        names = inner | {_id(sq[1]), _id(var[1]), _id(add), _id(n)} | {_id(nodes[u]) for u in users}
        norms.append(Norm(x=x, kind=kind, readers=readers, eps=(a_i, e_side), nodes=frozenset(names)))
    return norms


def _id(n) -> str:
    """A node as the range check names it."""
    return n.name or n.output[0]


def _is_square(n, consts) -> bool:
    if n.op_type == "Mul" and len(n.input) == 2 and n.input[0] == n.input[1]:
        return True
    return n.op_type == "Pow" and n.input[1] in consts and float(np.asarray(consts[n.input[1]]).ravel()[0]) == 2.0


def _dividers(nodes, made, root: str, d: str) -> list[int]:
    """The nodes that divide ``d`` by the root: Div(d, root), or Mul(d, Reciprocal(root))."""
    out = []
    for i, n in enumerate(nodes):
        if n.op_type == "Div" and list(n.input) == [d, root]:
            out.append(i)
        elif n.op_type == "Reciprocal" and n.input[0] == root:
            out += [j for j, u in enumerate(nodes) if u.op_type == "Mul" and n.output[0] in u.input and d in u.input]
    return out


def apply(m, scales: dict[str, float], what: str) -> list[str]:
    """Rewrite each declared norm to run on ``x / k`` with ``eps / k**2``; notes for prepared.json."""
    from onnx import helper, numpy_helper

    if not scales:
        return []
    norms: dict[str, list[Norm]] = {}
    for norm in find_norms(m):
        norms.setdefault(norm.x, []).append(norm)
    nodes = list(m.graph.node)
    consts = constants(m)
    notes, added = [], []
    for x, k in scales.items():
        if x not in norms:
            found = ", ".join(sorted(norms)) or "none"
            raise ConfigError(f"{what}: graphs[].prescale: '{x}' is not the input of a LayerNorm or RMSNorm made of "
                              f"plain ops (ReduceMean, Sub, Mul/Pow, Add eps, Sqrt, Div)",
                              hint=f"the normalised tensors of this graph: {found}")
        scaled = f"{x}_prescaled"
        inv = numpy_helper.from_array(np.array(1.0 / k, dtype=np.float32), f"{x}_prescale_inv")
        m.graph.initializer.append(inv)
        added.append(helper.make_node("Mul", [x, inv.name], [scaled], name=f"{x}_prescale"))
        for j, norm in enumerate(norms[x]):
            for ni, ii in norm.readers:
                nodes[ni].input[ii] = scaled
            ni, ii = norm.eps
            eps = np.asarray(consts[nodes[ni].input[ii]], dtype=np.float32)
            e = numpy_helper.from_array((eps / np.float32(k * k)).astype(np.float32), f"{x}_prescale_eps{j}")
            m.graph.initializer.append(e)
            nodes[ni].input[ii] = e.name
        notes.append(f"prescale: the {norms[x][0].kind} of '{x}' now runs on {x} / {k:g} with eps / {k * k:g} "
                     f"(scale-invariant; its squares shrink by {k * k:g})")
    made = {o: i for i, n in enumerate(nodes) for o in n.output}
    for node in sorted(added, key=lambda a: made.get(a.input[0], -1), reverse=True):  # right after x is made
        nodes.insert(made.get(node.input[0], -1) + 1, node)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return notes


def offer(m, node: str, value: float) -> tuple[str, int] | None:
    """The prescale entry that would keep an overflow starting at ``node`` (peak ``value``) in fp16's range:
    (tensor, power-of-two k), when the node is part of a decomposed norm; else None."""
    for norm in find_norms(m):
        if node in norm.nodes:
            k = 2 ** max(1, math.ceil(0.5 * math.log2(value * HEADROOM / FP16_MAX)))
            return norm.x, k
    return None
