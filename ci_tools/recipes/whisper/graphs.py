"""Whisper as two static, HTP-friendly ONNX graphs, written with ``onnx.helper`` (no PyTorch).

Following sherpa-onnx's Whisper export (encoder and decoder as separate graphs):

- encoder: ``mel float [1, n_mels, 3000]`` -> ``cross_k``, ``cross_v`` ``[layers, 1, 1500, d]``: the
  cross-attention keys and values of every decoder layer, computed once per 30 s window.
- decoder, one token step: ``tokens int32 [1, 1]``, ``self_k_cache``/``self_v_cache``
  ``[layers, 1, 448, d]``, ``cross_k``/``cross_v``, ``offset int32 [1]`` (the position of the
  token) -> ``logits [1, 1, n_vocab]`` and the caches with position ``offset`` written.

No int64, no dynamic dimension, no ``If``/``Loop``. The cache update is a one-hot mask multiply
(exact in fp16, and 0/1 survive 16-bit quantization); positions after ``offset`` are masked out of
self-attention with an additive bias. The attention scale is folded into the query projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .checkpoint import Checkpoint

OPSET = 20  # LayerNormalization (17), Split num_outputs (18), Gelu (20)
N_FRAMES = 3000  # 30 s of 10 ms mel frames
# GELU: "erf" (exact, as Whisper was trained) as ONNX's Gelu op, "tanh" (Gelu approximate="tanh"),
# or "erf-formula" (x/2 * (1 + Erf(x/sqrt 2)), what torch.onnx writes; HTP rejected that Erf here)
GELUS = ("erf", "tanh", "erf-formula")
Gelu = Literal["erf", "tanh", "erf-formula"]
# The additive bias on masked (future) positions. Not -inf nor -1e4: in a 16-bit quantized graph the
# scores' range would grow with it (-1e4 gives 0.15 steps); exp(-100) is 0 in fp16 all the same.
MASK_BIAS = -100.0


class _G:
    """Collects nodes and initializers; names every node (QNN EP errors name nodes)."""

    def __init__(self, gelu: Gelu):
        self.nodes: list = []
        self.inits: list = []
        self.n = 0
        self.gelu_kind = gelu

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        """A node of one output, named as the node is."""
        return self.ops(op_type, inputs, name, 1, **attrs)[0]

    def ops(self, op_type: str, inputs: list[str], name: str, n_out: int, **attrs) -> list[str]:
        """A node of ``n_out`` outputs (``name``, or ``name_0`` ... when more than one): always a list."""
        self.n += 1
        outs = [f"{name}" if n_out == 1 else f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs

    def shape(self, name: str, dims: list[int]) -> str:
        return self.const(name, np.asarray(dims, dtype=np.int64))

    def linear(self, x: str, w: np.ndarray, b: np.ndarray | None, name: str) -> str:
        """x @ w.T (+ b); w in PyTorch layout [out, in]."""
        y = self.op("MatMul", [x, self.const(f"{name}.weight", w.T.astype(np.float32))], f"{name}/matmul")
        if b is not None:
            y = self.op("Add", [y, self.const(f"{name}.bias", b.astype(np.float32))], f"{name}/add")
        return y

    def layer_norm(self, x: str, w: dict, prefix: str) -> str:
        return self.op("LayerNormalization", [x, self.const(f"{prefix}.weight", w[f"{prefix}.weight"]),
                                              self.const(f"{prefix}.bias", w[f"{prefix}.bias"])],
                       f"{prefix}/ln", axis=-1, epsilon=1e-5)

    def gelu(self, x: str, name: str) -> str:
        if self.gelu_kind == "erf":
            return self.op("Gelu", [x], f"{name}/gelu")
        if self.gelu_kind == "tanh":
            return self.op("Gelu", [x], f"{name}/gelu", approximate="tanh")
        half = self.const(f"{name}/half", np.array(0.5, np.float32))
        one = self.const(f"{name}/one", np.array(1.0, np.float32))
        rsqrt2 = self.const(f"{name}/rsqrt2", np.array(1 / np.sqrt(2), np.float32))
        e = self.op("Erf", [self.op("Mul", [x, rsqrt2], f"{name}/scale")], f"{name}/erf")
        return self.op("Mul", [self.op("Mul", [x, half], f"{name}/halfx"), self.op("Add", [e, one], f"{name}/1p")],
                       f"{name}/gelu")

    def heads(self, x: str, t: int, h: int, dh: int, name: str, transpose_k: bool = False) -> str:
        """[1, t, h*dh] -> [1, h, t, dh] (or [1, h, dh, t] for keys)."""
        r = self.op("Reshape", [x, self.shape(f"{name}/shape", [1, t, h, dh])], f"{name}/reshape")
        return self.op("Transpose", [r], f"{name}/transpose", perm=[0, 2, 3, 1] if transpose_k else [0, 2, 1, 3])

    def merge_heads(self, x: str, t: int, d: int, name: str) -> str:
        tr = self.op("Transpose", [x], f"{name}/transpose", perm=[0, 2, 1, 3])
        return self.op("Reshape", [tr, self.shape(f"{name}/shape", [1, t, d])], f"{name}/reshape")

    def attend(self, q: str, k: str, v: str, bias: str | None, name: str) -> str:
        s = self.op("MatMul", [q, k], f"{name}/scores")
        if bias is not None:
            s = self.op("Add", [s, bias], f"{name}/mask")
        p = self.op("Softmax", [s], f"{name}/softmax", axis=-1)
        return self.op("MatMul", [p, v], f"{name}/context")

    def mlp(self, x: str, w: dict, p: str) -> str:
        h = self.layer_norm(x, w, f"{p}.final_layer_norm")
        h = self.gelu(self.linear(h, w[f"{p}.fc1.weight"], w[f"{p}.fc1.bias"], f"{p}.fc1"), f"{p}.fc1")
        h = self.linear(h, w[f"{p}.fc2.weight"], w[f"{p}.fc2.bias"], f"{p}.fc2")
        return self.op("Add", [x, h], f"{p}/mlp_residual")

    def model(self, name: str, inputs, outputs, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits, doc_string=doc)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qnn-release")
        m.ir_version = 9
        return m


def _q(w: dict, p: str, dh: int) -> tuple[np.ndarray, np.ndarray]:
    """Query weights with the attention scale 1/sqrt(dh) folded in (Whisper scales q and k by dh^-1/4 each)."""
    s = np.float32(dh ** -0.5)
    return w[f"{p}.q_proj.weight"] * s, w[f"{p}.q_proj.bias"] * s


def encoder(ck: Checkpoint, gelu: Gelu = "erf") -> onnx.ModelProto:
    d, w = ck.dims, ck.weights
    m, t, h = d.d_model, d.n_audio_ctx, d.encoder_heads
    dh = m // h
    g = _G(gelu)
    x = g.op("Conv", ["mel", g.const("encoder.conv1.weight", w["encoder.conv1.weight"]),
                      g.const("encoder.conv1.bias", w["encoder.conv1.bias"])], "encoder.conv1", pads=[1, 1])
    x = g.gelu(x, "encoder.conv1")
    x = g.op("Conv", [x, g.const("encoder.conv2.weight", w["encoder.conv2.weight"]),
                      g.const("encoder.conv2.bias", w["encoder.conv2.bias"])], "encoder.conv2", pads=[1, 1],
             strides=[2])
    x = g.gelu(x, "encoder.conv2")
    x = g.op("Transpose", [x], "encoder/to_time_major", perm=[0, 2, 1])
    x = g.op("Add", [x, g.const("encoder.embed_positions.weight", w["encoder.embed_positions.weight"])],
             "encoder/positions")
    for i in range(d.encoder_layers):
        p = f"encoder.layers.{i}"
        a = g.layer_norm(x, w, f"{p}.self_attn_layer_norm")
        qw, qb = _q(w, f"{p}.self_attn", dh)
        q = g.heads(g.linear(a, qw, qb, f"{p}.self_attn.q_proj"), t, h, dh, f"{p}.self_attn/q")
        k = g.heads(g.linear(a, w[f"{p}.self_attn.k_proj.weight"], None, f"{p}.self_attn.k_proj"), t, h, dh,
                    f"{p}.self_attn/k", transpose_k=True)
        v = g.heads(g.linear(a, w[f"{p}.self_attn.v_proj.weight"], w[f"{p}.self_attn.v_proj.bias"],
                             f"{p}.self_attn.v_proj"), t, h, dh, f"{p}.self_attn/v")
        o = g.merge_heads(g.attend(q, k, v, None, f"{p}.self_attn"), t, m, f"{p}.self_attn/o")
        o = g.linear(o, w[f"{p}.self_attn.out_proj.weight"], w[f"{p}.self_attn.out_proj.bias"],
                     f"{p}.self_attn.out_proj")
        x = g.op("Add", [x, o], f"{p}/attn_residual")
        x = g.mlp(x, w, p)
    x = g.layer_norm(x, w, "encoder.layer_norm")
    ks, vs = [], []
    for i in range(d.decoder_layers):
        p = f"decoder.layers.{i}.encoder_attn"
        k = g.linear(x, w[f"{p}.k_proj.weight"], None, f"{p}.k_proj")
        v = g.linear(x, w[f"{p}.v_proj.weight"], w[f"{p}.v_proj.bias"], f"{p}.v_proj")
        ks.append(g.op("Reshape", [k, g.shape(f"{p}/k/shape", [1, 1, t, m])], f"{p}/k/stack"))
        vs.append(g.op("Reshape", [v, g.shape(f"{p}/v/shape", [1, 1, t, m])], f"{p}/v/stack"))
    g.op("Concat", ks, "cross_k", axis=0)
    g.op("Concat", vs, "cross_v", axis=0)
    n_frames = 2 * t
    return g.model("whisper_encoder",
                   [helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, d.n_mels, n_frames])],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d.decoder_layers, 1, t, m])
                    for n in ("cross_k", "cross_v")],
                   f"Whisper encoder: log-mel [1, {d.n_mels}, {n_frames}] -> cross-attention K/V of "
                   f"{d.decoder_layers} decoder layers")


def decoder(ck: Checkpoint, gelu: Gelu = "erf") -> onnx.ModelProto:
    d, w = ck.dims, ck.weights
    m, n_ctx, h, L = d.d_model, d.n_text_ctx, d.decoder_heads, d.decoder_layers
    dh, t_audio = m // h, d.n_audio_ctx
    g = _G(gelu)
    embed = g.const("decoder.embed_tokens.weight", w["decoder.embed_tokens.weight"])
    x = g.op("Gather", [embed, "tokens"], "decoder/embed_tokens", axis=0)  # [1, 1, d]
    pos = g.op("Gather", [g.const("decoder.embed_positions.weight", w["decoder.embed_positions.weight"]),
                          "offset"], "decoder/embed_positions", axis=0)  # [1, d]
    x = g.op("Add", [x, pos], "decoder/positions")
    positions = g.const("decoder/position_ids", np.arange(n_ctx, dtype=np.int32))
    # one-hot of the current position (where this step's K/V go) and the future (masked out)
    here = g.op("Cast", [g.op("Equal", [positions, "offset"], "decoder/is_offset")], "decoder/onehot",
                to=TensorProto.FLOAT)
    write = g.op("Reshape", [here, g.shape("decoder/onehot/shape", [1, n_ctx, 1])], "decoder/write_mask")
    keep = g.op("Sub", [g.const("decoder/one", np.array(1.0, np.float32)), write], "decoder/keep_mask")
    future = g.op("Cast", [g.op("Greater", [positions, "offset"], "decoder/is_future")], "decoder/future",
                  to=TensorProto.FLOAT)
    bias = g.op("Mul", [future, g.const("decoder/mask_bias", np.array(MASK_BIAS, np.float32))], "decoder/self_bias")
    caches: dict[str, list[str]] = {}
    for name in ("self_k_cache", "self_v_cache", "cross_k", "cross_v"):  # a list for one layer too
        caches[name] = g.ops("Split", [name], f"decoder/split_{name}", L, axis=0, num_outputs=L)
    new_k, new_v = [], []
    step = _Step(keep=keep, write=write, bias=bias)
    for i in range(L):
        layer = _Layer(g=g, w=w, p=f"decoder.layers.{i}", n_ctx=n_ctx, t_audio=t_audio, m=m, h=h, dh=dh)
        x, k_out, v_out = _decoder_self_attention(layer, x, caches["self_k_cache"][i], caches["self_v_cache"][i],
                                                  step)
        new_k.append(k_out)
        new_v.append(v_out)
        x = _decoder_cross_attention(layer, x, caches["cross_k"][i], caches["cross_v"][i])
        x = g.mlp(x, w, layer.p)
    x = g.layer_norm(x, w, "decoder.layer_norm")
    # The output projection is tied to the token embedding, but reads a transposed copy: a Gemm(transB)
    # sharing the Gather's initializer compiles in fp16, and in a QDQ (w8a16) graph HTP rejects it
    # together with the shared weight's duplicated DequantizeLinear. QNN keeps two copies anyway.
    logits = g.linear(x, w["decoder.embed_tokens.weight"], None, "decoder.proj_out")
    g.op("Reshape", [logits, g.shape("decoder/logits/shape", [1, 1, d.n_vocab])], "logits")
    g.op("Concat", new_k, "new_self_k_cache", axis=0)
    g.op("Concat", new_v, "new_self_v_cache", axis=0)
    cache_shape, cross_shape = [L, 1, n_ctx, m], [L, 1, t_audio, m]
    return g.model(
        "whisper_decoder",
        [helper.make_tensor_value_info("tokens", TensorProto.INT32, [1, 1]),
         helper.make_tensor_value_info("self_k_cache", TensorProto.FLOAT, cache_shape),
         helper.make_tensor_value_info("self_v_cache", TensorProto.FLOAT, cache_shape),
         helper.make_tensor_value_info("cross_k", TensorProto.FLOAT, cross_shape),
         helper.make_tensor_value_info("cross_v", TensorProto.FLOAT, cross_shape),
         helper.make_tensor_value_info("offset", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, d.n_vocab]),
         helper.make_tensor_value_info("new_self_k_cache", TensorProto.FLOAT, cache_shape),
         helper.make_tensor_value_info("new_self_v_cache", TensorProto.FLOAT, cache_shape)],
        f"Whisper decoder, one token step with a {n_ctx}-position self-attention cache")


@dataclass(frozen=True, kw_only=True)
class _Layer:
    """One decoder layer being written: the graph, the weights, its name prefix and the dimensions."""

    g: _G
    w: dict
    p: str  # "decoder.layers.<i>"
    n_ctx: int  # self-attention cache positions
    t_audio: int  # encoder frames
    m: int  # model width
    h: int  # heads
    dh: int  # width per head


@dataclass(frozen=True, kw_only=True)
class _Step:
    """This token step's masks, shared by every layer: keep the cache, write at ``offset``, the future's bias."""

    keep: str
    write: str
    bias: str


def _decoder_self_attention(layer: _Layer, x: str, k_cache: str, v_cache: str, step: _Step) -> tuple[str, str, str]:
    """One layer's self-attention over the cache with this step's K/V written at ``offset``: (x, new K, new V)."""
    g, w, p, n_ctx, m, h, dh = layer.g, layer.w, layer.p, layer.n_ctx, layer.m, layer.h, layer.dh
    keep, write, bias = step.keep, step.write, step.bias
    a = g.layer_norm(x, w, f"{p}.self_attn_layer_norm")
    qw, qb = _q(w, f"{p}.self_attn", dh)
    q = g.heads(g.linear(a, qw, qb, f"{p}.self_attn.q_proj"), 1, h, dh, f"{p}.self_attn/q")
    k_new = g.linear(a, w[f"{p}.self_attn.k_proj.weight"], None, f"{p}.self_attn.k_proj")  # [1, 1, d]
    v_new = g.linear(a, w[f"{p}.self_attn.v_proj.weight"], w[f"{p}.self_attn.v_proj.bias"], f"{p}.self_attn.v_proj")
    updated = []
    for kind, cache, new in (("k", k_cache, k_new), ("v", v_cache, v_new)):
        c = g.op("Reshape", [cache, g.shape(f"{p}/{kind}_cache/shape", [1, n_ctx, m])], f"{p}/{kind}_cache")
        kept = g.op("Mul", [c, keep], f"{p}/{kind}_cache/keep")
        written = g.op("Mul", [new, write], f"{p}/{kind}_cache/write")
        updated.append(g.op("Add", [kept, written], f"{p}/{kind}_cache/update"))  # [1, n_ctx, d]
    k_all, v_all = updated
    k_out = g.op("Reshape", [k_all, g.shape(f"{p}/k_out/shape", [1, 1, n_ctx, m])], f"{p}/k_out")
    v_out = g.op("Reshape", [v_all, g.shape(f"{p}/v_out/shape", [1, 1, n_ctx, m])], f"{p}/v_out")
    kh = g.heads(k_all, n_ctx, h, dh, f"{p}.self_attn/k", transpose_k=True)
    vh = g.heads(v_all, n_ctx, h, dh, f"{p}.self_attn/v")
    o = g.merge_heads(g.attend(q, kh, vh, bias, f"{p}.self_attn"), 1, m, f"{p}.self_attn/o")
    o = g.linear(o, w[f"{p}.self_attn.out_proj.weight"], w[f"{p}.self_attn.out_proj.bias"], f"{p}.self_attn.out_proj")
    return g.op("Add", [x, o], f"{p}/self_attn_residual"), k_out, v_out


def _decoder_cross_attention(layer: _Layer, x: str, cross_k: str, cross_v: str) -> str:
    """One layer's cross-attention on the encoder's K/V."""
    g, w, p, t_audio, m, h, dh = layer.g, layer.w, layer.p, layer.t_audio, layer.m, layer.h, layer.dh
    a = g.layer_norm(x, w, f"{p}.encoder_attn_layer_norm")
    qw, qb = _q(w, f"{p}.encoder_attn", dh)
    q = g.heads(g.linear(a, qw, qb, f"{p}.encoder_attn.q_proj"), 1, h, dh, f"{p}.encoder_attn/q")
    ck_ = g.op("Reshape", [cross_k, g.shape(f"{p}/cross_k/shape", [1, t_audio, m])], f"{p}/cross_k")
    cv_ = g.op("Reshape", [cross_v, g.shape(f"{p}/cross_v/shape", [1, t_audio, m])], f"{p}/cross_v")
    kh = g.heads(ck_, t_audio, h, dh, f"{p}.encoder_attn/k", transpose_k=True)
    vh = g.heads(cv_, t_audio, h, dh, f"{p}.encoder_attn/v")
    o = g.merge_heads(g.attend(q, kh, vh, None, f"{p}.encoder_attn"), 1, m, f"{p}.encoder_attn/o")
    o = g.linear(o, w[f"{p}.encoder_attn.out_proj.weight"], w[f"{p}.encoder_attn.out_proj.bias"],
                 f"{p}.encoder_attn.out_proj")
    return g.op("Add", [x, o], f"{p}/cross_attn_residual")
