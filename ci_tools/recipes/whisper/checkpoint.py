"""Whisper checkpoints without PyTorch: CTranslate2 ``model.bin`` folders and Hugging Face safetensors.

Both readers return the same thing: the weights under Hugging Face ``WhisperModel`` names (without
the ``model.`` prefix), as numpy arrays, and the model's dimensions. CTranslate2 fuses the attention
projections (self-attention QKV ``[3d, d]``, cross-attention KV ``[2d, d]``): they are split here.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import SourceError

# CTranslate2 DataType enum order (include/ctranslate2/types.h; specs/model_spec.py _dtype_to_type_id)
CT2_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
CT2_BINARY_VERSIONS = (5, 6)  # 6 since CTranslate2 3.x; the layout below is the same for 5
CT2_SPEC = "WhisperSpec"
SAFETENSORS_DTYPES: dict[str, type[np.generic] | str] = {"F32": np.float32, "F16": np.float16, "BF16": "bfloat16",
                                                         "F64": np.float64}


class CheckpointError(SourceError):
    """The checkpoint is not a readable Whisper model (truncated, another spec, missing tensors)."""


@dataclass(frozen=True)
class Dims:
    n_mels: int
    d_model: int
    encoder_layers: int
    encoder_heads: int
    decoder_layers: int
    decoder_heads: int
    n_vocab: int
    n_audio_ctx: int  # encoder positions: 1500 for 30 s of audio
    n_text_ctx: int  # decoder positions: 448

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Checkpoint:
    dims: Dims
    weights: dict[str, np.ndarray]  # Hugging Face names, float32
    format: str  # "ctranslate2" or "safetensors"
    folder: Path
    config: dict  # the checkpoint's config.json (CTranslate2: suppress_ids, lang_ids ...)


def load(folder: Path) -> Checkpoint:
    """Read a Whisper checkpoint folder: ``model.bin`` (CTranslate2) or ``*.safetensors`` (Hugging Face)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder", hint="give the folder that holds model.bin or "
                              "model.safetensors with config.json and tokenizer.json")
    if (folder / "model.bin").is_file():
        return read_ctranslate2(folder)
    if (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file():
        return read_safetensors(folder)
    raise CheckpointError(f"{folder}: no model.bin (CTranslate2) nor model.safetensors (Hugging Face)",
                          hint="a faster-whisper folder or an openai/whisper-* snapshot")


# -- CTranslate2 -------------------------------------------------------------------------------


class _Reader:
    def __init__(self, path: Path):
        self.path = path
        self.data = memoryview(path.read_bytes())
        self.pos = 0

    def take(self, n: int, what: str) -> memoryview:
        if self.pos + n > len(self.data):
            raise CheckpointError(
                f"{self.path}: truncated: {what} needs {n:,} bytes at offset {self.pos:,}, "
                f"the file ends at {len(self.data):,}",
                hint="the download or the concatenation of its parts is incomplete: fetch it again")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def string(self, what: str) -> str:
        (n,) = self.unpack("H", what)
        raw = bytes(self.take(n, what))
        if not raw.endswith(b"\0"):
            raise CheckpointError(f"{self.path}: {what} at offset {self.pos - n:,} is not a string",
                                  hint="the file is corrupt (or its parts are in the wrong order)")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.path}: {what} at offset {self.pos - n:,} is not UTF-8",
                                  hint="the file is corrupt (or its parts are in the wrong order)") from None


def read_ct2_variables(path: Path) -> tuple[str, int, dict[str, np.ndarray], dict[str, str]]:
    """(spec name, revision, variables, aliases) of a CTranslate2 ``model.bin``.

    Layout (CTranslate2 specs/model_spec.py ``_serialize``): uint32 binary version, string spec name,
    uint32 revision, uint32 count, then per variable: string name, uint8 rank, uint32 dims, uint8 dtype,
    uint32 byte count, data; then uint32 alias count and (alias, target) string pairs. Strings are a
    uint16 length (with the NUL) and UTF-8 bytes ending in NUL. Little-endian throughout.
    """
    r = _Reader(path)
    (version,) = r.unpack("I", "the binary version")
    if version not in CT2_BINARY_VERSIONS:
        raise CheckpointError(f"{path}: not a CTranslate2 model.bin (binary version {version}, expected "
                              f"{' or '.join(map(str, CT2_BINARY_VERSIONS))})",
                              hint="is it whole, and were its parts joined in the right order?")
    spec = r.string("the spec name")
    (revision,) = r.unpack("I", "the spec revision")
    (count,) = r.unpack("I", "the variable count")
    if count > 100_000:
        raise CheckpointError(f"{path}: {count:,} variables: not a CTranslate2 model.bin", hint="the file is corrupt")
    variables: dict[str, np.ndarray] = {}
    for i in range(count):
        name = r.string(f"the name of variable {i}")
        (rank,) = r.unpack("B", f"the rank of {name}")
        dims = r.unpack("I" * rank, f"the shape of {name}") if rank else ()
        (dtype_id,) = r.unpack("B", f"the dtype of {name}")
        (nbytes,) = r.unpack("I", f"the size of {name}")
        if dtype_id >= len(CT2_DTYPES):
            raise CheckpointError(f"{path}: variable {name} has unknown dtype id {dtype_id}",
                                  hint="the file is corrupt")
        dtype = CT2_DTYPES[dtype_id]
        itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
        if nbytes != itemsize * int(np.prod(dims, dtype=np.int64)):
            raise CheckpointError(f"{path}: variable {name} {list(dims)} {dtype} says {nbytes:,} bytes",
                                  hint="the file is corrupt")
        raw = r.take(nbytes, f"the data of {name}")
        if dtype == "bfloat16":  # numpy has no bfloat16: widen to float32 (bfloat16 is its upper half)
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
        variables[name] = arr.reshape(dims)
    (n_alias,) = r.unpack("I", "the alias count")
    aliases = {}
    for _ in range(n_alias):
        alias = r.string("an alias")
        aliases[alias] = r.string(f"the target of alias {alias}")
    if r.pos != len(r.data):
        raise CheckpointError(f"{path}: {len(r.data) - r.pos:,} bytes after the last alias",
                              hint="the file is corrupt, or more than its parts were joined")
    return spec, revision, variables, aliases


def read_ctranslate2(folder: Path) -> Checkpoint:
    path = folder / "model.bin"
    spec, revision, v, aliases = read_ct2_variables(path)
    if spec != CT2_SPEC:
        raise CheckpointError(f"{path}: a CTranslate2 {spec} model, not {CT2_SPEC}",
                              hint="give a Whisper model converted by ct2-transformers-converter (faster-whisper)")
    if any(n.endswith("weight_scale") for n in v):
        raise CheckpointError(f"{path}: an int8-quantized CTranslate2 model",
                              hint="convert it with --quantization float16 (or float32): QNN quantizes itself")
    config = _json(folder / "config.json") if (folder / "config.json").is_file() else {}
    ct2 = _Ct2Weights(path, revision, v, aliases)
    n_enc, n_dec = ct2.encoder(), ct2.decoder()
    w = ct2.w
    conv1 = w["encoder.conv1.weight"]
    dims = Dims(n_mels=conv1.shape[1], d_model=conv1.shape[0], encoder_layers=n_enc,
                encoder_heads=ct2.heads("encoder"), decoder_layers=n_dec, decoder_heads=ct2.heads("decoder"),
                n_vocab=w["decoder.embed_tokens.weight"].shape[0],
                n_audio_ctx=w["encoder.embed_positions.weight"].shape[0],
                n_text_ctx=w["decoder.embed_positions.weight"].shape[0])
    return _checked(Checkpoint(dims=dims, weights=w, format="ctranslate2", folder=folder, config=config), path)


class _Ct2Weights:
    """A CTranslate2 ``model.bin``'s variables under Hugging Face's Whisper names (what ``graphs`` builds from)."""

    def __init__(self, path: Path, revision, variables: dict[str, np.ndarray], aliases: dict[str, str]) -> None:
        self.path, self.revision, self.v, self.aliases = path, revision, variables, aliases
        self.w: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        name = self.aliases.get(name, name)
        if name not in self.v:
            raise CheckpointError(f"{self.path}: no variable {name}", hint=f"a {CT2_SPEC} revision {self.revision} "
                                  "model should have it: is the file from another converter version?")
        return np.asarray(self.v[name], dtype=np.float32)

    def heads(self, scope: str) -> int:
        if f"{scope}/num_heads" not in self.v:
            raise CheckpointError(f"{self.path}: no variable {scope}/num_heads", hint="not a Whisper model.bin")
        return int(self.v[f"{scope}/num_heads"])

    def layers(self, scope: str) -> int:
        n = 0
        while f"{scope}/layer_{n}/self_attention/linear_0/weight" in self.v:
            n += 1
        return n

    def attention(self, ct2: str, hf: str, fused_qkv: bool) -> None:
        get = self.get
        if fused_qkv:
            q, k, vv = np.split(get(f"{ct2}/linear_0/weight"), 3)
            qb, _kb, vb = np.split(get(f"{ct2}/linear_0/bias"), 3)  # the key bias is zero (Whisper has none)
            out = f"{ct2}/linear_1"
        else:
            q, qb = get(f"{ct2}/linear_0/weight"), get(f"{ct2}/linear_0/bias")
            kv, kv_b = get(f"{ct2}/linear_1/weight"), get(f"{ct2}/linear_1/bias")
            d = q.shape[0]
            k, vv = kv[:d], kv[d:]
            vb = kv_b[d:]
            out = f"{ct2}/linear_2"
        self.w.update({f"{hf}.q_proj.weight": q, f"{hf}.q_proj.bias": qb, f"{hf}.k_proj.weight": k,
                       f"{hf}.v_proj.weight": vv, f"{hf}.v_proj.bias": vb,
                       f"{hf}.out_proj.weight": get(f"{out}/weight"), f"{hf}.out_proj.bias": get(f"{out}/bias")})

    def norm(self, ct2: str, hf: str) -> None:
        self.w[f"{hf}.weight"], self.w[f"{hf}.bias"] = self.get(f"{ct2}/gamma"), self.get(f"{ct2}/beta")

    def ffn(self, ct2: str, hf: str) -> None:
        self.norm(f"{ct2}/layer_norm", f"{hf}.final_layer_norm")
        for i, name in ((0, "fc1"), (1, "fc2")):
            self.w[f"{hf}.{name}.weight"] = self.get(f"{ct2}/linear_{i}/weight")
            self.w[f"{hf}.{name}.bias"] = self.get(f"{ct2}/linear_{i}/bias")

    def encoder(self) -> int:
        """The encoder's weights; its layer count."""
        for i in (1, 2):
            self.w[f"encoder.conv{i}.weight"] = self.get(f"encoder/conv{i}/weight")
            self.w[f"encoder.conv{i}.bias"] = self.get(f"encoder/conv{i}/bias")
        self.w["encoder.embed_positions.weight"] = self.get("encoder/position_encodings/encodings")
        n = self.layers("encoder")
        for i in range(n):
            ct2, hf = f"encoder/layer_{i}", f"encoder.layers.{i}"
            self.norm(f"{ct2}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
            self.attention(f"{ct2}/self_attention", f"{hf}.self_attn", fused_qkv=True)
            self.ffn(f"{ct2}/ffn", hf)
        self.norm("encoder/layer_norm", "encoder.layer_norm")
        return n

    def decoder(self) -> int:
        """The decoder's weights; its layer count."""
        self.w["decoder.embed_tokens.weight"] = self.get("decoder/embeddings/weight")
        self.w["decoder.embed_positions.weight"] = self.get("decoder/position_encodings/encodings")
        n = self.layers("decoder")
        for i in range(n):
            ct2, hf = f"decoder/layer_{i}", f"decoder.layers.{i}"
            self.norm(f"{ct2}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
            self.attention(f"{ct2}/self_attention", f"{hf}.self_attn", fused_qkv=True)
            self.norm(f"{ct2}/attention/layer_norm", f"{hf}.encoder_attn_layer_norm")
            self.attention(f"{ct2}/attention", f"{hf}.encoder_attn", fused_qkv=False)
            self.ffn(f"{ct2}/ffn", hf)
        self.norm("decoder/layer_norm", "decoder.layer_norm")
        return n


# -- Hugging Face safetensors ------------------------------------------------------------------


def read_safetensors_file(path: Path) -> dict[str, np.ndarray]:
    """The tensors of one ``.safetensors`` file: uint64 header length, JSON header, raw little-endian data."""
    data = memoryview(path.read_bytes())
    if len(data) < 8:
        raise CheckpointError(f"{path}: truncated: {len(data)} bytes", hint="download it again")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise CheckpointError(f"{path}: truncated or not a safetensors file (header of {n:,} bytes, "
                              f"file of {len(data):,})", hint="download it again")
    try:
        header = json.loads(bytes(data[8:8 + n]))
    except ValueError:
        raise CheckpointError(f"{path}: not a safetensors file (unreadable header)") from None
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(info.get("dtype"))
        if dtype is None:
            raise CheckpointError(f"{path}: tensor {name} has dtype {info.get('dtype')}",
                                  hint="float32, float16 or bfloat16 checkpoints only")
        start, end = info["data_offsets"]
        if end > len(body):
            raise CheckpointError(f"{path}: truncated: tensor {name} ends at {end:,}, the data has {len(body):,} bytes",
                                  hint="download it again")
        raw = body[start:end]
        arr: np.ndarray
        if dtype == "bfloat16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
        out[name] = arr.reshape(info["shape"])
    return out


def read_safetensors(folder: Path) -> Checkpoint:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: no config.json beside the safetensors", hint="copy the whole snapshot")
    config = _json(config_path)
    if config.get("model_type") != "whisper":
        raise CheckpointError(f"{config_path}: model_type {config.get('model_type')!r}, not 'whisper'",
                              hint="give an openai/whisper-* (or fine-tuned Whisper) checkpoint")
    index = folder / "model.safetensors.index.json"
    files = sorted(set(_json(index)["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    raw: dict[str, np.ndarray] = {}
    for f in files:
        if not (folder / f).is_file():
            raise CheckpointError(f"{folder}: {f} is missing (named by the index)", hint="copy the whole snapshot")
        raw.update(read_safetensors_file(folder / f))
    w = {(k[len("model."):] if k.startswith("model.") else k): np.asarray(a, dtype=np.float32) for k, a in raw.items()}
    w.pop("proj_out.weight", None)  # tied to decoder.embed_tokens.weight
    try:
        dims = Dims(n_mels=int(config["num_mel_bins"]), d_model=int(config["d_model"]),
                    encoder_layers=int(config["encoder_layers"]), encoder_heads=int(config["encoder_attention_heads"]),
                    decoder_layers=int(config["decoder_layers"]), decoder_heads=int(config["decoder_attention_heads"]),
                    n_vocab=int(config["vocab_size"]), n_audio_ctx=int(config["max_source_positions"]),
                    n_text_ctx=int(config["max_target_positions"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{config_path}: missing or bad {e}", hint="a Whisper config.json has it") from None
    return _checked(Checkpoint(dims=dims, weights=w, format="safetensors", folder=folder, config=config), folder)


# -- shared ------------------------------------------------------------------------------------


def expected_shapes(d: Dims) -> dict[str, tuple[int, ...]]:
    m = d.d_model
    shapes: dict[str, tuple[int, ...]] = {
        "encoder.conv1.weight": (m, d.n_mels, 3), "encoder.conv1.bias": (m,),
        "encoder.conv2.weight": (m, m, 3), "encoder.conv2.bias": (m,),
        "encoder.embed_positions.weight": (d.n_audio_ctx, m),
        "encoder.layer_norm.weight": (m,), "encoder.layer_norm.bias": (m,),
        "decoder.embed_tokens.weight": (d.n_vocab, m), "decoder.embed_positions.weight": (d.n_text_ctx, m),
        "decoder.layer_norm.weight": (m,), "decoder.layer_norm.bias": (m,),
    }

    def attn(p: str) -> None:
        for x in ("q", "k", "v", "out"):
            shapes[f"{p}.{x}_proj.weight"] = (m, m)
        for x in ("q", "v", "out"):
            shapes[f"{p}.{x}_proj.bias"] = (m,)

    def block(p: str, cross: bool) -> None:
        attn(f"{p}.self_attn")
        names = ["self_attn_layer_norm", "final_layer_norm"] + (["encoder_attn_layer_norm"] if cross else [])
        for n in names:
            shapes[f"{p}.{n}.weight"] = shapes[f"{p}.{n}.bias"] = (m,)
        if cross:
            attn(f"{p}.encoder_attn")
        ff = 4 * m
        shapes.update({f"{p}.fc1.weight": (ff, m), f"{p}.fc1.bias": (ff,), f"{p}.fc2.weight": (m, ff),
                       f"{p}.fc2.bias": (m,)})

    for i in range(d.encoder_layers):
        block(f"encoder.layers.{i}", cross=False)
    for i in range(d.decoder_layers):
        block(f"decoder.layers.{i}", cross=True)
    return shapes


def _checked(ck: Checkpoint, where: Path) -> Checkpoint:
    d = ck.dims
    if d.encoder_layers == 0 or d.decoder_layers == 0:
        raise CheckpointError(f"{where}: no encoder or decoder layers found", hint="not a Whisper checkpoint")
    if d.d_model % d.encoder_heads or d.d_model % d.decoder_heads:
        raise CheckpointError(f"{where}: d_model {d.d_model} is not a multiple of the head count")
    for name, shape in expected_shapes(d).items():
        if name not in ck.weights:
            raise CheckpointError(f"{where}: no tensor {name}", hint="not a complete Whisper checkpoint")
        got = tuple(ck.weights[name].shape)
        # fc1/fc2 may have another width than 4 * d_model in fine-tuned variants
        if got != shape and not (name.endswith((".fc1.weight", ".fc1.bias", ".fc2.weight")) and len(got) == len(shape)):
            raise CheckpointError(f"{where}: tensor {name} has shape {list(got)}, expected {list(shape)}",
                                  hint="the checkpoint and its config disagree")
    return ck


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not readable JSON: {e}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data
