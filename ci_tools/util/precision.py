"""The precisions a target is compiled in: the one list every stage, schema and flag takes them from."""

from __future__ import annotations

from typing import Literal, get_args

# fp16: float weights and activations; w8a16: 8-bit weights, 16-bit activations; int8: both 8-bit
Precision = Literal["fp16", "w8a16", "int8"]
PRECISIONS: tuple[str, ...] = get_args(Precision)  # in the order a client prefers them
