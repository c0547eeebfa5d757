"""Small real ONNX graphs built with onnx.helper, for cases the published demo models do not cover."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def mlp(path: Path, dynamic_batch: bool = True, op: str = "Relu", hidden: int = 64, seed: int = 0) -> Path:
    """x[batch, 32] -> MatMul -> Add -> <op> -> MatMul -> y[batch, 8]."""
    rng = np.random.default_rng(seed)
    batch = "batch" if dynamic_batch else 1
    w1 = numpy_helper.from_array(rng.standard_normal((32, hidden)).astype(np.float32) * 0.2, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32) * 0.1, "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, 8)).astype(np.float32) * 0.2, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
             helper.make_node(op, ["h1"], ["h2"], name=f"act_{op.lower()}"),
             helper.make_node("MatMul", ["h2", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])], [w1, b1, w2])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def embedding(path: Path, vocab: int = 100, dim: int = 16) -> Path:
    """int64 token ids[1, seq] -> Gather(embedding) -> ReduceMean -> y[1, dim]: an int64-input graph."""
    rng = np.random.default_rng(1)
    table = numpy_helper.from_array(rng.standard_normal((vocab, dim)).astype(np.float32), "table")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("ReduceMean", ["e", "axes"], ["y"], keepdims=0, name="pool")]
    graph = helper.make_graph(nodes, "emb", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, dim])], [table, axes])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


def tiny_outputs(path: Path, scale: float = 1e-7) -> Path:
    """x[1, 32] -> MatMul -> Sigmoid -> Mul(scale): outputs far below fp16's normal range."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w")
    s = numpy_helper.from_array(np.array(scale, dtype=np.float32), "s")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("Sigmoid", ["h"], ["p"], name="prob"),
             helper.make_node("Mul", ["p", "s"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w, s])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def attention(path: Path, tokens: int = 8, dim: int = 32, seed: int = 3) -> Path:
    """x[1, tokens, dim] -> LayerNorm -> Q, K, V projections -> softmax(Q K^T) V -> y[1, tokens, dim].

    As Whisper's export writes it: MatMuls on a batched input, K without a bias, the attention scale
    folded into Q's weights (8x smaller than K's and V's), output channels of different magnitudes.
    """
    rng = np.random.default_rng(seed)
    spread = 2.0 ** rng.integers(-3, 3, dim)  # per output channel
    inits = [numpy_helper.from_array(np.ones(dim, np.float32), "ln_scale"),
             numpy_helper.from_array(np.zeros(dim, np.float32), "ln_bias")]
    nodes = [helper.make_node("LayerNormalization", ["x", "ln_scale", "ln_bias"], ["xn"], axis=-1, name="ln")]
    for name, scale in (("q", 1 / 8), ("k", 1.0), ("v", 1.0)):
        w = (rng.standard_normal((dim, dim)) * spread * scale * 0.3).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w_{name}"))
        if name == "k":
            nodes.append(helper.make_node("MatMul", ["xn", f"w_{name}"], [name], name=f"{name}_proj"))
            continue
        inits.append(numpy_helper.from_array((rng.standard_normal(dim) * 0.05 * scale).astype(np.float32), f"b_{name}"))
        nodes += [helper.make_node("MatMul", ["xn", f"w_{name}"], [f"{name}0"], name=f"{name}_proj"),
                  helper.make_node("Add", [f"{name}0", f"b_{name}"], [name], name=f"{name}_bias")]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="k_t"),
              helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
              helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
              helper.make_node("MatMul", ["p", "v"], ["y"], name="context")]
    graph = helper.make_graph(nodes, "attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, dim])], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def rms_norm(path: Path, dim: int = 64) -> Path:
    """x[1, dim] -> x / Sqrt(ReduceMean(Pow(x, 2)) + eps): an RMS norm whose mean of squares leaves fp16's
    range once |x| is a few hundred (a LayerNorm's statistics on real data), not on [-1, 1) inputs."""
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    eps = numpy_helper.from_array(np.array(1e-5, dtype=np.float32), "eps")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1, name="mean_of_squares"),
             helper.make_node("Add", ["ms", "eps"], ["mse"], name="plus_eps"),
             helper.make_node("Sqrt", ["mse"], ["rms"], name="rms"),
             helper.make_node("Div", ["x", "rms"], ["y"], name="normalise")]
    graph = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, dim])], [two, eps, axes])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


def one_op(path: Path, op: str, shape: list[int], const: float | None = None, out_dtype=TensorProto.FLOAT) -> Path:
    """y = op(x) or op(x, const): a probe of one HTP kernel."""
    inits = [numpy_helper.from_array(np.array(const, dtype=np.float32), "c")] if const is not None else []
    node = helper.make_node(op, ["x", "c"] if inits else ["x"], ["y"], name=f"probe_{op.lower()}")
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", out_dtype, shape)], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def masked_softmax(path: Path, n: int = 16) -> Path:
    """x[1, n] -> MatMul -> Add(mask with -inf) -> Softmax -> y: an attention mask as exported by many
    transformers; a quantizer that quantizes the -inf constant gives an infinite scale."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "w")
    mask = np.zeros((1, n), np.float32)
    mask[0, n // 2:] = -np.inf
    m = numpy_helper.from_array(mask, "mask")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="scores"),
             helper.make_node("Add", ["h", "mask"], ["hm"], name="apply_mask"),
             helper.make_node("Softmax", ["hm"], ["y"], axis=-1, name="softmax")]
    graph = helper.make_graph(nodes, "masked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w, m])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def layer_norm(path: Path, dim: int = 64) -> Path:
    """x[1, 4, dim] -> LayerNorm made of plain ops (as exported before opset 17) * gamma + beta, plus a residual
    x that reads x outside the norm: y = norm(x) + x."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, dtype=np.float32), "eps"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, dim).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.uniform(-1, 1, dim).astype(np.float32), "beta")]
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["mu"], name="mean"),
             helper.make_node("Sub", ["x", "mu"], ["d"], name="centre"),
             helper.make_node("Pow", ["d", "two"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq", "axes"], ["var"], name="variance"),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="plus_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="std"),
             helper.make_node("Div", ["d", "sd"], ["n"], name="normalise"),
             helper.make_node("Mul", ["n", "gamma"], ["g"], name="gamma_mul"),
             helper.make_node("Add", ["g", "beta"], ["b"], name="beta_add"),
             helper.make_node("Add", ["b", "x"], ["y"], name="residual")]
    graph = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, dim])], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


def strided_detector(path: Path, channels: int = 4, levels: int = 5) -> Path:
    """x[1, 3, H, W] (H and W dynamic) -> ``levels`` stride-2 convs down, a 2x Resize up, Concat with the map
    one level up: a DBNet/YOLO-style feature pyramid in little. H and W must be multiples of 2**levels (32): at
    16 the last two maps are both 1x1, the upsampled one 2x2, and shape inference fails at the Concat."""
    rng = np.random.default_rng(6)
    inits = [numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")]
    nodes, cur, cin = [], "x", 3
    for k in range(levels):
        inits.append(numpy_helper.from_array(rng.standard_normal((channels, cin, 3, 3)).astype(np.float32) * 0.3,
                                             f"w{k}"))
        nodes += [helper.make_node("Conv", [cur, f"w{k}"], [f"c{k}"], strides=[2, 2], pads=[1, 1, 1, 1],
                                   name=f"down{k}"),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}")]
        cur, cin = f"r{k}", channels
    nodes += [helper.make_node("Resize", [cur, "", "scales"], ["up"], mode="nearest", name="up"),
              helper.make_node("Concat", ["up", f"r{levels - 2}"], ["y"], axis=1, name="merge")]
    graph = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * channels, "h", "w"])],
                              inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def resize_by_constant(path: Path) -> Path:
    """x[1, 4, 8, 8] -> Conv -> Resize whose scales come from a Constant node (as Paddle2ONNX writes them) and a
    Reshape whose shape is computed in float (Shape -> Cast -> Mul -> Cast): inputs that hold sizes."""
    rng = np.random.default_rng(8)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, "w")
    one = numpy_helper.from_array(np.array([1.0, 1.0, 1.0, 1.0], dtype=np.float32), "one")
    scales = helper.make_tensor("scales_value", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Constant", [], ["scales"], value=scales, name="scales_const"),
             helper.make_node("Resize", ["c", "", "scales"], ["u"], mode="nearest", name="up"),
             helper.make_node("Shape", ["u"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT, name="to_float"),
             helper.make_node("Mul", ["sf", "one"], ["sf1"], name="same_shape"),
             helper.make_node("Cast", ["sf1"], ["si"], to=TensorProto.INT64, name="to_int"),
             helper.make_node("Reshape", ["u", "si"], ["y"], name="reshape")]
    graph = helper.make_graph(nodes, "rz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], [w, one])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def fused_bert_block(path: Path, dim: int = 32, seq: int = 8) -> Path:
    """x[1, seq, dim] -> MatMul -> FastGelu(bias) -> MatMul -> SkipLayerNormalization(skip = x) -> y: the
    com.microsoft ops ONNX Runtime's transformer optimizer leaves in a BERT."""
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.standard_normal((dim, dim)).astype(np.float32) * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal(dim).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.standard_normal((dim, dim)).astype(np.float32) * 0.3, "w2"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, dim).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.uniform(-0.5, 0.5, dim).astype(np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("FastGelu", ["h", "b1"], ["g"], domain="com.microsoft", name="fast_gelu"),
             helper.make_node("MatMul", ["g", "w2"], ["h2"], name="fc2"),
             helper.make_node("SkipLayerNormalization", ["h2", "x", "gamma", "beta"], ["y"], domain="com.microsoft",
                              epsilon=1e-5, name="skip_ln")]
    graph = helper.make_graph(nodes, "bert", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim])], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)]), path)


def fused_bert(path: Path, vocab: int = 50, dim: int = 32, heads: int = 4, seq: int = 8) -> Path:
    """input_ids, attention_mask [1, seq] int32 -> EmbedLayerNormalization (its mask_index feeds Attention) ->
    Attention -> SkipLayerNormalization -> MatMul -> FastGelu -> MatMul -> SkipLayerNormalization: a BERT
    layer as ONNX Runtime's transformer optimizer fuses it (com.microsoft ops)."""
    rng = np.random.default_rng(10)

    def t(name, *shape, scale=0.3, low=None):
        a = rng.uniform(low, 1.5, shape) if low is not None else rng.standard_normal(shape) * scale
        return numpy_helper.from_array(a.astype(np.float32), name)

    inits = [t("word", vocab, dim), t("pos", seq, dim), t("g0", dim, low=0.5), t("b0", dim, scale=0.1),
             t("qkv_w", dim, 3 * dim), t("qkv_b", 3 * dim, scale=0.1), t("o_w", dim, dim), t("g1", dim, low=0.5),
             t("b1", dim, scale=0.1), t("f1_w", dim, 2 * dim), t("f1_b", 2 * dim, scale=0.1), t("f2_w", 2 * dim, dim),
             t("g2", dim, low=0.5), t("b2", dim, scale=0.1)]
    ms = {"domain": "com.microsoft"}
    nodes = [helper.make_node("EmbedLayerNormalization", ["input_ids", "", "word", "pos", "", "g0", "b0",
                                                          "attention_mask"], ["emb", "mask_index"], epsilon=1e-12,
                              name="embed", **ms),
             helper.make_node("Attention", ["emb", "qkv_w", "qkv_b", "mask_index"], ["att"], num_heads=heads,
                              name="attention", **ms),
             helper.make_node("MatMul", ["att", "o_w"], ["att_o"], name="att_out"),
             helper.make_node("SkipLayerNormalization", ["att_o", "emb", "g1", "b1"], ["h1"], epsilon=1e-12,
                              name="skip_ln1", **ms),
             helper.make_node("MatMul", ["h1", "f1_w"], ["f1"], name="ffn1"),
             helper.make_node("FastGelu", ["f1", "f1_b"], ["gelu"], name="gelu", **ms),
             helper.make_node("MatMul", ["gelu", "f2_w"], ["f2"], name="ffn2"),
             helper.make_node("SkipLayerNormalization", ["f2", "h1", "g2", "b2"], ["y"], epsilon=1e-12,
                              name="skip_ln2", **ms)]
    graph = helper.make_graph(nodes, "bert", [helper.make_tensor_value_info("input_ids", TensorProto.INT32, [1, seq]),
                                              helper.make_tensor_value_info("attention_mask", TensorProto.INT32,
                                                                            [1, seq])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, dim])], inits)
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)]), path)


def channels_last_cnn(path: Path, size: int = 32, channels: int = 8) -> Path:
    """A CNN on an NHWC image, as mobile exports are: Transpose to NCHW first, then Conv, Relu, pool. Quantized,
    ONNX Runtime moves the input's QuantizeLinear ahead of the Transpose (a node named ``x_q`` the graph does
    not have), which the QNN EP leaves on CPU as the graph's own input quantization."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(channels, np.float32), "b")
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2], name="to_nchw"),
             helper.make_node("Conv", ["xt", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["y"], name="flat")]
    g = helper.make_graph(nodes, "nhwc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size, size, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels])], [w, b])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def bilstm_tagger(path: Path, hidden: int = 4, features: int = 8, seed: int = 1) -> Path:
    """A bidirectional LSTM over a dynamic time axis ``T`` (x: [T, 1, features]), no sequence_lens: what a
    character tagger exports as. Fixed to a length for HTP, an app pads shorter inputs to it."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((2, 4 * hidden, features)) * 0.3).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((2, 4 * hidden, hidden)) * 0.3).astype(np.float32), "R")
    b = numpy_helper.from_array(np.zeros((2, 8 * hidden), np.float32), "B")
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], name="bilstm", hidden_size=hidden,
                              direction="bidirectional")]
    g = helper.make_graph(nodes, "tagger", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, features])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 2, 1, hidden])], [w, r, b])
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def embedding_tagger(path: Path, vocab: int = 50, dim: int = 32, hidden: int = 24, steps: int = 7,
                     seed: int = 0) -> Path:
    """Token ids [T, 1] -> an embedding -> a bidirectional LSTM -> class logits [1, T, 5]: the shape of a text
    tagger that ``quantize_dynamic`` turns into an int8 Gather, a DynamicQuantizeLSTM and a MatMulInteger."""
    rng = np.random.default_rng(seed)
    arrays = {"emb": rng.standard_normal((vocab, dim)), "W": rng.standard_normal((2, 4 * hidden, dim)) * 0.2,
              "R": rng.standard_normal((2, 4 * hidden, hidden)) * 0.2, "B": rng.standard_normal((2, 8 * hidden)) * 0.1,
              "Wo": rng.standard_normal((2 * hidden, 5)) * 0.3}
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    inits.append(numpy_helper.from_array(np.array([1, steps, 2 * hidden], np.int64), "shape"))
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0),
             helper.make_node("Transpose", ["e"], ["x"], perm=[1, 0, 2]),
             helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden, direction="bidirectional"),
             helper.make_node("Transpose", ["y"], ["yt"], perm=[2, 0, 1, 3]),
             helper.make_node("Reshape", ["yt", "shape"], ["y2"]),
             helper.make_node("MatMul", ["y2", "Wo"], ["logits"])]
    g = helper.make_graph(nodes, "tagger", [helper.make_tensor_value_info("ids", TensorProto.INT64, [steps, 1])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, steps, 5])], inits)
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def upsampling_decoder(path: Path, channels: int = 8, length: int = 20, seed: int = 0) -> Path:
    """[1, C, 1, T] -> Conv -> Relu -> a depthwise ConvTranspose (kernel [1, 3], stride [1, 2], pads [0, 1, 0, 1],
    output_padding [0, 1]: a speech-enhancement decoder's upsampling, which HTP computes wrongly) -> Conv -> Tanh."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n) for n, s in
             [("w_in", (c, c, 1, 1)), ("w_up", (c, 1, 1, 3)), ("b_up", (c,)), ("w_out", (c, c, 1, 1))]]
    nodes = [helper.make_node("Conv", ["x", "w_in"], ["h"], name="conv_in"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("ConvTranspose", ["hr", "w_up", "b_up"], ["u"], name="up", group=c,
                              kernel_shape=[1, 3], strides=[1, 2], pads=[0, 1, 0, 1], output_padding=[0, 1]),
             helper.make_node("Conv", ["u", "w_out"], ["o"], name="conv_out"),
             helper.make_node("Tanh", ["o"], ["y"], name="tanh")]
    g = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 1, length])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 2 * length])], inits)
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def feature_rnn(path: Path, features: int = 8, hidden: int = 16, seed: int = 2) -> Path:
    """One step of a stateful model over feature frames: feat [1, F] and state [1, H] -> state_out =
    tanh(feat Wx + state Wh), prob = sigmoid(state_out Wo) [1, 1]; an app feeds state_out back as state."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * k).astype(np.float32), n) for n, s, k in
             [("Wx", (features, hidden), 0.5), ("Wh", (hidden, hidden), 0.4), ("Wo", (hidden, 1), 0.8)]]
    nodes = [helper.make_node("MatMul", ["feat", "Wx"], ["a"]), helper.make_node("MatMul", ["state", "Wh"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Tanh", ["s"], ["state_out"]),
             helper.make_node("MatMul", ["state_out", "Wo"], ["logit"]),
             helper.make_node("Sigmoid", ["logit"], ["prob"])]
    g = helper.make_graph(nodes, "rnn", [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, features]),
                                         helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, hidden])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1]),
                           helper.make_tensor_value_info("state_out", TensorProto.FLOAT, [1, hidden])], inits)
    return save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def paddle_like_export(path: Path, seed: int = 5) -> Path:
    """What four exports the project met do, in one graph (#40 item 5): x[1,3,16,16] -> a dynamically quantized
    Conv (quantize_dynamic's DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul -> Add) -> a bare Erf (GELU's
    0.5 folded away, as a Paddle export does) -> mean over H, W -> MatMul with an int8 table read through a
    Transpose before its DequantizeLinear (a tied embedding) -> Cast to DOUBLE -> Softmax -> Cast back ->
    probs[1, 50]."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "W")
    b = numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "B")
    scale_in = numpy_helper.from_array(np.array(0.7, np.float32), "k")
    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "hw")
    table = rng.integers(-127, 128, (50, 8)).astype(np.int8)
    t_q = numpy_helper.from_array(table, "E_q")
    t_s = numpy_helper.from_array(np.array(0.05, np.float32), "E_scale")
    t_z = numpy_helper.from_array(np.array(0, np.int8), "E_zp")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Mul", ["c", "k"], ["ck"], name="scale"),
             helper.make_node("Erf", ["ck"], ["e"], name="erf"),
             helper.make_node("ReduceMean", ["e", "hw"], ["pooled"], keepdims=0, name="pool"),
             helper.make_node("Transpose", ["E_q"], ["Et_q"], perm=[1, 0], name="tie"),
             helper.make_node("DequantizeLinear", ["Et_q", "E_scale", "E_zp"], ["Et"], name="tie_dq"),
             helper.make_node("MatMul", ["pooled", "Et"], ["logits"], name="proj"),
             helper.make_node("Cast", ["logits"], ["logits64"], to=TensorProto.DOUBLE, name="to_double"),
             helper.make_node("Softmax", ["logits64"], ["p64"], axis=-1, name="softmax"),
             helper.make_node("Cast", ["p64"], ["probs"], to=TensorProto.FLOAT, name="to_float")]
    graph = helper.make_graph(nodes, "paddle_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                  [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 50])],
                              [w, b, scale_in, axes, t_q, t_s, t_z])
    with tempfile.TemporaryDirectory() as tmp:
        float_path = Path(tmp) / "float.onnx"
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), float_path)
        quantize_dynamic(str(float_path), str(path), op_types_to_quantize=["Conv"], weight_type=QuantType.QInt8)
    return path


def indexed_rows(path: Path, rows: int = 4) -> Path:
    """ids int64 [1, 3] -> Gather(table [rows, 8]) -> MatMul -> y [1, 3, 8]: an index input whose valid values are
    0..rows-1 (generated inputs that go past them make ONNX Runtime refuse: "idx=4 must be within [-4,3]")."""
    rng = np.random.default_rng(11)
    table = numpy_helper.from_array(rng.standard_normal((rows, 8)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="rows"),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="mix")]
    graph = helper.make_graph(nodes, "rows", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8])], [table, w])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def masked_mean(path: Path) -> Path:
    """x [1, 16, 8], mask [1, 16] -> sum(x * mask) / sum(mask) over time -> y [1, 8]: a sample padded with a zero
    mask everywhere divides 0 by 0 (NaN on CPU in every cell)."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "t")
    last = numpy_helper.from_array(np.array([2], np.int64), "last")
    nodes = [helper.make_node("Unsqueeze", ["mask", "last"], ["m3"]),
             helper.make_node("Mul", ["x", "m3"], ["xm"]),
             helper.make_node("ReduceSum", ["xm", "t"], ["num"], keepdims=0),
             helper.make_node("ReduceSum", ["m3", "t"], ["den"], keepdims=0),
             helper.make_node("Div", ["num", "den"], ["y"], name="mean")]
    graph = helper.make_graph(nodes, "masked", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8]),
                                                helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [axes, last])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
