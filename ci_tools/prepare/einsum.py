"""``fixes: [einsum]``: an ``Einsum`` of two operands that is a (batched) matrix product, as Transpose ->
Reshape -> MatMul -> Reshape -> Transpose, which HTP runs (the QNN EP has no Einsum kernel).

Each letter of the equation is a batch axis (in both inputs and the output), a contracted axis (in both
inputs, not the output), or a free axis of one input (and the output). With every axis's size known (the
prepared graph's shapes are static), ``A`` is laid out [batch, free_A, contracted] and ``B`` [batch,
contracted, free_B], each group flattened to one axis, multiplied, and the result unflattened and put in the
output's order: the same sums of the same products (a grouped linear layer ``btgi,gio->btgo`` is one
batched MatMul over ``g``). Left alone: one operand, ellipses, a letter twice in one operand, and a letter
summed away in one operand only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _plan(equation: str) -> tuple[str, str, str] | None:
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return None
    lhs, out = eq.split("->")
    ops = lhs.split(",")
    if len(ops) != 2:
        return None
    a, b = ops
    if any(len(set(x)) != len(x) for x in (a, b, out)) or set(out) - set(a + b):
        return None
    if (set(a) - set(b) - set(out)) or (set(b) - set(a) - set(out)):
        return None  # summed within one operand: a ReduceSum first, not a MatMul
    return a, b, out


def einsum_as_matmul(m) -> tuple[int, int]:
    """Rewrite every MatMul-shaped Einsum of ``m``: (rewritten, left as they were)."""
    import onnx

    shapes: dict[str, list[int]] = {}
    inferred = onnx.shape_inference.infer_shapes(m)
    for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        dims = v.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[v.name] = [d.dim_value for d in dims]
    for i in m.graph.initializer:
        shapes[i.name] = list(i.dims)
    nodes, done, left = [], 0, 0
    for n in m.graph.node:
        if n.op_type != "Einsum" or n.domain not in ("", "ai.onnx"):
            nodes.append(n)
            continue
        eq = next((a.s.decode() for a in n.attribute if a.name == "equation"), "")
        plan = _plan(eq)
        if plan is None or len(n.input) != 2 or n.input[0] not in shapes or n.input[1] not in shapes:
            nodes.append(n)
            left += 1
            continue
        _rewrite(m, n, plan, {**dict(zip(plan[0], shapes[n.input[0]])), **dict(zip(plan[1], shapes[n.input[1]]))},
                 nodes)
        done += 1
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return done, left


@dataclass(frozen=True, kw_only=True)
class _Layout:
    """An operand as the MatMul takes it: its axes (by letter) in ``order``, then reshaped to ``flat``."""

    order: list[str]
    flat: list[int]


def _arranged(m, nodes: list, src: str, letters: str, layout: _Layout, name: str) -> str:
    """``src`` (axes named by ``letters``) with its axes in ``layout.order``, then reshaped to ``layout.flat``."""
    from onnx import helper, numpy_helper

    order, flat = layout.order, layout.flat
    perm = [letters.index(c) for c in order]
    cur = src
    if perm != sorted(perm):
        cur = f"{name}_t"
        nodes.append(helper.make_node("Transpose", [src], [cur], name=f"{name}_transpose", perm=perm))
    shape = numpy_helper.from_array(np.array(flat, dtype=np.int64), f"{name}_shape")
    m.graph.initializer.append(shape)
    nodes.append(helper.make_node("Reshape", [cur, shape.name], [f"{name}_r"], name=f"{name}_flat"))
    return f"{name}_r"


def _rewrite(m, n, plan: tuple[str, str, str], size: dict[str, int], nodes: list) -> None:
    from onnx import helper, numpy_helper

    a, b, out = plan
    batch = [c for c in out if c in a and c in b]
    free_a = [c for c in out if c in a and c not in b]
    free_b = [c for c in out if c in b and c not in a]
    summed = [c for c in a if c in b and c not in out]
    base = n.name or n.output[0]

    def prod(letters: list[str]) -> int:
        return int(np.prod([size[c] for c in letters])) if letters else 1

    bsizes = [size[c] for c in batch]
    lhs = _arranged(m, nodes, n.input[0], a, _Layout(order=batch + free_a + summed,
                                                     flat=[*bsizes, prod(free_a), prod(summed)]), f"{base}_a")
    rhs = _arranged(m, nodes, n.input[1], b, _Layout(order=batch + summed + free_b,
                                                     flat=[*bsizes, prod(summed), prod(free_b)]), f"{base}_b")
    nodes.append(helper.make_node("MatMul", [lhs, rhs], [f"{base}_mm"], name=f"{base}_matmul"))
    natural = batch + free_a + free_b
    unflat = numpy_helper.from_array(np.array([size[c] for c in natural], dtype=np.int64), f"{base}_out_shape")
    m.graph.initializer.append(unflat)
    perm = [natural.index(c) for c in out]
    last = n.output[0] if perm == sorted(perm) else f"{base}_unflat"
    nodes.append(helper.make_node("Reshape", [f"{base}_mm", unflat.name], [last], name=f"{base}_unflatten"))
    if last != n.output[0]:
        nodes.append(helper.make_node("Transpose", [last], [n.output[0]], name=f"{base}_order", perm=perm))
