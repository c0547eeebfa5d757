"""HTP's special-value behaviour, as data: what one-op graphs return on the HTP (fp16) where IEEE
arithmetic would give something else, with the QNN version each was seen on.

``qnn-release probes`` (and ``tests/test_htp_quirks.py``) compile every probe and compare: a new SDK that
changes one is noticed, and the table is what the doctor's and verification's hints rest on. Source of
the first rows: the bisection of silero-vad's -98304 (``shared/audits/vad-htp-root-cause.md``).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Probe:
    name: str
    op: str
    x: float
    const: float | None  # the second input of a binary op, if any
    ieee: float  # what IEEE fp16 arithmetic gives
    htp: float  # what HTP gave: the float32 graph output as read back (1 fp32 ulp above the fp16 value)
    seen_on: str  # QNN version
    effect: str  # what it does to a model, and the way around it

    def describe(self) -> str:
        call = f"{self.op}({self.x!r}" + (f", {self.const!r})" if self.const is not None else ")")
        return f"{call}: HTP {self.htp!r}, IEEE {self.ieee!r} ({self.effect})"


PROBES = [
    Probe("pow-neg-zero-2", "Pow", -0.0, 2.0, 0.0, -4.000000476837158, "2.51.0",
          "a square of a value that rounds to -0 goes negative: prepare rewrites Pow(x, 2) as Mul(x, x)"),
    Probe("pow-neg-zero-4", "Pow", -0.0, 4.0, 0.0, 16.000001907348633, "2.51.0",
          "prepare rewrites Pow(x, 4) as two Muls"),
    Probe("pow-neg-zero-1", "Pow", -0.0, 1.0, -0.0, 131008.0078125, "2.51.0",
          "prepare rewrites Pow(x, 1) as Identity"),
    Probe("sqrt-negative", "Sqrt", -1.0, None, math.nan, -131008.0078125, "2.51.0",
          "no NaN: values beyond ±65504 downstream are HTP's garbage, not numbers"),
    Probe("float32-output-ulp", "Relu", 1.0, None, 1.0, float(np.nextafter(np.float32(1), np.float32(2))), "2.51.0",
          "float32 outputs read 1 fp32 ulp above their fp16 value: a probability of 1 reads 1.0000001; "
          "range checks allow 1 ulp"),
]


def run_probe(probe: Probe, soc_model: int, htp_arch: int) -> float:
    """Compile ``probe`` as a one-op fp16 graph for the chip and return what the HTP emulator gives."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from . import qnn_ep

    shape = [1, 8]
    inits = [numpy_helper.from_array(np.array(probe.const, dtype=np.float32), "c")] if probe.const is not None else []
    node = helper.make_node(probe.op, ["x", "c"] if inits else ["x"], ["y"], name=f"probe_{probe.name}")
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.onnx"
        onnx.save(model, str(src))
        (y,) = qnn_ep.compile_and_run(src, Path(tmp), qnn_ep.htp_options(soc_model, htp_arch, fp16=True),
                                      {"x": np.full(shape, probe.x, dtype=np.float32)}).values()
    return float(np.asarray(y).ravel()[0])


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))


@dataclass(frozen=True)
class LayerProbe:
    """A layer HTP computes wrongly for some attributes (not a special value): one-layer graphs, compared with
    CPU by cosine on random data; ``wrong`` the cosine it gave, ``right`` the declared fix's graph."""

    name: str
    op: str
    attrs: dict
    channels: int
    length: int
    wrong: float
    seen_on: str
    effect: str
    fix: str

    def describe(self) -> str:
        return f"{self.op}({self.attrs}): cosine {self.wrong} against CPU ({self.effect}; fix: {self.fix})"

    def model(self, fixed: bool = False):
        from onnx import TensorProto, helper, numpy_helper

        c, t = self.channels, self.length
        group = self.attrs.get("group", 1)
        k = self.attrs["kernel_shape"]
        w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((c, c // group, *k)) * 0.3)
                                    .astype(np.float32), "w")
        node = helper.make_node(self.op, ["x", "w"], ["y"], name=f"probe_{self.name}", **self.attrs)
        g = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 1, t])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        if fixed:
            from ..prepare.convtranspose import output_padding_as_pads

            output_padding_as_pads(m)
        return m


LAYER_PROBES = [
    # a speech-enhancement decoder's upsampling layer: HTP's output cosine 0.21-0.39 inside the model, values
    # within +-0.28 (no overflow); the same layer without output_padding, or with 2 channels per group, agrees
    LayerProbe("depthwise-convtranspose-output-padding", "ConvTranspose",
               {"group": 16, "kernel_shape": [1, 3], "strides": [1, 2], "pads": [0, 1, 0, 1], "output_padding": [0, 1]},
               16, 20, 0.007, "2.51.0", "a depthwise ConvTranspose with output_padding computes another tensor",
               "fixes: [convtranspose-output-padding]"),
]


def run_layer_probe(probe: LayerProbe, soc_model: int, htp_arch: int, fixed: bool = False) -> float:
    """The cosine of HTP's answer (fp16, on the emulator) against CPU's for the probe's layer (``fixed``: the
    graph its declared fix writes)."""
    import onnx
    import onnxruntime as ort_cpu

    from ..util.metrics import compare
    from . import qnn_ep

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.onnx"
        onnx.save(probe.model(fixed), str(src))
        x = {"x": np.random.default_rng(1).standard_normal((1, probe.channels, 1, probe.length)).astype(np.float32)}
        ref = ort_cpu.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, x)[0]
        (got,) = qnn_ep.compile_and_run(src, Path(tmp), qnn_ep.htp_options(soc_model, htp_arch, fp16=True),
                                        x).values()
    return float(compare(ref, got).cosine)
