"""Tiny random-weight Whisper checkpoints, written in both formats the recipe reads.

The CTranslate2 writer follows CTranslate2's own serializer (specs/model_spec.py ``_serialize``,
binary version 6) and its Whisper converter (converters/transformers.py: self-attention q/k/v fused
into ``linear_0`` with a zero key bias; cross-attention k/v fused into ``linear_1``), so
``ctranslate2.models.Whisper`` loads what it writes: an independent implementation to compare with.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

# CTranslate2 DataType ids (include/ctranslate2/types.h)
CT2_DTYPE = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4}
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
TIMESTAMPS = [f"<|{i * 0.02:.2f}|>" for i in range(8)]


def dims(d_model=64, heads=2, layers=2, n_vocab=None):
    return {"n_mels": 80, "d_model": d_model, "encoder_layers": layers, "encoder_heads": heads,
            "decoder_layers": layers, "decoder_heads": heads, "n_vocab": n_vocab or vocab_size(),
            "n_audio_ctx": 1500, "n_text_ctx": 448}


def vocab_size() -> int:
    return 256 + len(SPECIALS) + len(TIMESTAMPS)


def tokenizer_json() -> str:
    """A byte-level BPE tokenizer (256 byte tokens, no merges) with Whisper's special tokens after them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS + TIMESTAMPS)
    return tok.to_str()


def weights(d: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Hugging Face WhisperModel names (no ``model.`` prefix) -> random float32 arrays."""
    rng = np.random.default_rng(seed)
    m, ff = d["d_model"], 4 * d["d_model"]

    def r(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale or 1 / np.sqrt(shape[-1]))).astype(np.float32)

    w = {"encoder.conv1.weight": r(m, d["n_mels"], 3, scale=0.1), "encoder.conv1.bias": r(m, scale=0.02),
         "encoder.conv2.weight": r(m, m, 3, scale=0.05), "encoder.conv2.bias": r(m, scale=0.02),
         "encoder.embed_positions.weight": r(d["n_audio_ctx"], m, scale=0.1),
         "decoder.embed_tokens.weight": r(d["n_vocab"], m, scale=0.3),
         # large position embeddings: a random decoder then says something different at every step
         "decoder.embed_positions.weight": r(d["n_text_ctx"], m, scale=1.0)}

    def norm(p):
        w[f"{p}.weight"] = (1 + r(m, scale=0.1)).astype(np.float32)
        w[f"{p}.bias"] = r(m, scale=0.05)

    def attn(p):
        for x in ("q", "k", "v", "out"):
            w[f"{p}.{x}_proj.weight"] = r(m, m)
        for x in ("q", "v", "out"):
            w[f"{p}.{x}_proj.bias"] = r(m, scale=0.05)

    def block(p, cross):
        norm(f"{p}.self_attn_layer_norm")
        attn(f"{p}.self_attn")
        if cross:
            norm(f"{p}.encoder_attn_layer_norm")
            attn(f"{p}.encoder_attn")
        norm(f"{p}.final_layer_norm")
        w.update({f"{p}.fc1.weight": r(ff, m), f"{p}.fc1.bias": r(ff, scale=0.05),
                  f"{p}.fc2.weight": r(m, ff), f"{p}.fc2.bias": r(m, scale=0.05)})

    for i in range(d["encoder_layers"]):
        block(f"encoder.layers.{i}", False)
    norm("encoder.layer_norm")
    for i in range(d["decoder_layers"]):
        block(f"decoder.layers.{i}", True)
    norm("decoder.layer_norm")
    return w


def _config(d: dict) -> dict:
    # as ct2-transformers-converter writes it for Whisper (suppress_ids: non-speech tokens; begin: " " (220
    # in this tokenizer too) and <|endoftext|> (256))
    return {"suppress_ids": [1, 2, 7], "suppress_ids_begin": [220, 256],
            "lang_ids": [258, 259], "alignment_heads": [[1, 0]]}


def write_ctranslate2(folder: Path, d: dict, w: dict[str, np.ndarray], dtype="float16",
                      spec: str = "WhisperSpec") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    v: dict[str, np.ndarray] = {}

    def lin(ct2, hf, bias=True):
        v[f"{ct2}/weight"] = w[f"{hf}.weight"]
        if bias:
            v[f"{ct2}/bias"] = w[f"{hf}.bias"]

    def norm(ct2, hf):
        v[f"{ct2}/gamma"], v[f"{ct2}/beta"] = w[f"{hf}.weight"], w[f"{hf}.bias"]

    def self_attn(ct2, hf):
        m = w[f"{hf}.q_proj.weight"].shape[0]
        v[f"{ct2}/linear_0/weight"] = np.concatenate([w[f"{hf}.{x}_proj.weight"] for x in "qkv"])
        v[f"{ct2}/linear_0/bias"] = np.concatenate([w[f"{hf}.q_proj.bias"], np.zeros(m, np.float32),
                                                    w[f"{hf}.v_proj.bias"]])
        lin(f"{ct2}/linear_1", f"{hf}.out_proj")

    def ffn(ct2, hf):
        norm(f"{ct2}/layer_norm", f"{hf}.final_layer_norm")
        lin(f"{ct2}/linear_0", f"{hf}.fc1")
        lin(f"{ct2}/linear_1", f"{hf}.fc2")

    v["encoder/num_heads"] = np.array(d["encoder_heads"], np.int16)
    for i in (1, 2):
        lin(f"encoder/conv{i}", f"encoder.conv{i}")
    v["encoder/position_encodings/encodings"] = w["encoder.embed_positions.weight"]
    for i in range(d["encoder_layers"]):
        norm(f"encoder/layer_{i}/self_attention/layer_norm", f"encoder.layers.{i}.self_attn_layer_norm")
        self_attn(f"encoder/layer_{i}/self_attention", f"encoder.layers.{i}.self_attn")
        ffn(f"encoder/layer_{i}/ffn", f"encoder.layers.{i}")
    norm("encoder/layer_norm", "encoder.layer_norm")
    v["decoder/num_heads"] = np.array(d["decoder_heads"], np.int16)
    for flag in ("pre_norm", "activation", "alibi", "scale_embeddings", "start_from_zero_embedding"):
        v[f"decoder/{flag}"] = np.array({"pre_norm": 1, "activation": 1}.get(flag, 0), np.int8)
    v["decoder/embeddings/weight"] = w["decoder.embed_tokens.weight"]
    v["decoder/position_encodings/encodings"] = w["decoder.embed_positions.weight"]
    for i in range(d["decoder_layers"]):
        p, hf = f"decoder/layer_{i}", f"decoder.layers.{i}"
        norm(f"{p}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
        self_attn(f"{p}/self_attention", f"{hf}.self_attn")
        norm(f"{p}/attention/layer_norm", f"{hf}.encoder_attn_layer_norm")
        lin(f"{p}/attention/linear_0", f"{hf}.encoder_attn.q_proj")
        m = w[f"{hf}.encoder_attn.k_proj.weight"].shape[0]
        v[f"{p}/attention/linear_1/weight"] = np.concatenate([w[f"{hf}.encoder_attn.k_proj.weight"],
                                                              w[f"{hf}.encoder_attn.v_proj.weight"]])
        v[f"{p}/attention/linear_1/bias"] = np.concatenate([np.zeros(m, np.float32),
                                                            w[f"{hf}.encoder_attn.v_proj.bias"]])
        lin(f"{p}/attention/linear_2", f"{hf}.encoder_attn.out_proj")
        ffn(f"{p}/ffn", hf)
    norm("decoder/layer_norm", "decoder.layer_norm")

    def string(s):
        b = s.encode()
        return struct.pack("<H", len(b) + 1) + b + b"\0"

    out = bytearray(struct.pack("<I", 6) + string(spec) + struct.pack("<II", 3, len(v)))
    for name in sorted(v):
        a = v[name]
        if a.dtype == np.float32:
            a = a.astype(dtype)
        out += string(name) + struct.pack("<B", a.ndim) + b"".join(struct.pack("<I", s) for s in a.shape)
        out += struct.pack("<BI", CT2_DTYPE[str(a.dtype)], a.nbytes) + a.tobytes()
    out += struct.pack("<I", 1) + string("decoder/projection/weight") + string("decoder/embeddings/weight")
    (folder / "model.bin").write_bytes(bytes(out))
    (folder / "config.json").write_text(json.dumps(_config(d)))
    (folder / "tokenizer.json").write_text(tokenizer_json())
    # CTranslate2 finds the special tokens by their text in vocabulary.txt (one token per line, in id order)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json())
    (folder / "vocabulary.txt").write_text("\n".join(tok.id_to_token(i) for i in range(d["n_vocab"])) + "\n")
    return folder


def write_safetensors(folder: Path, d: dict, w: dict[str, np.ndarray], dtype="float32", shards: int = 1) -> Path:
    """A Hugging Face snapshot: config.json, model.safetensors (or shards with an index), tokenizer.json."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(w)
    groups = [names[i::shards] for i in range(shards)]
    files = ["model.safetensors"] if shards == 1 else [f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
                                                      for i in range(shards)]
    weight_map = {}
    for fname, group in zip(files, groups):
        header, blobs, offset = {}, [], 0
        for n in group:
            a = np.ascontiguousarray(w[n].astype(dtype))
            header[f"model.{n}"] = {"dtype": {"float32": "F32", "float16": "F16"}[dtype], "shape": list(a.shape),
                                    "data_offsets": [offset, offset + a.nbytes]}
            blobs.append(a.tobytes())
            offset += a.nbytes
            weight_map[f"model.{n}"] = fname
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        (folder / fname).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    if shards > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "whisper", "num_mel_bins": d["n_mels"], "d_model": d["d_model"],
        "encoder_layers": d["encoder_layers"], "encoder_attention_heads": d["encoder_heads"],
        "decoder_layers": d["decoder_layers"], "decoder_attention_heads": d["decoder_heads"],
        "vocab_size": d["n_vocab"], "max_source_positions": d["n_audio_ctx"], "max_target_positions": d["n_text_ctx"]}))
    (folder / "generation_config.json").write_text(json.dumps({"suppress_tokens": [1, 2, 7],
                                                               "begin_suppress_tokens": [220, 256]}))
    (folder / "tokenizer.json").write_text(tokenizer_json())
    return folder
