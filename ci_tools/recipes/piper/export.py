"""The Piper recipe's export command: a voice (.onnx + .onnx.json) -> the graphs HTP runs, checked on CPU.

    python -m ci_tools.recipes.piper.export VOICE.onnx OUT [--max-ids 256] [--frames 256] [--overlap 32]
        [--sentences clips/tts/sentences.yaml] [--listener WHISPER_FOLDER]

OUT gets ``encoder.onnx``, ``duration.onnx``, ``decoder.onnx`` (``cut``), ``voice.json`` (the phoneme map,
sample rate and scales of the .onnx.json beside the voice, and the graphs' sizes) and ``export_check.json``:
every sentence spoken by the cut graphs on CPU against the original graph, both without noise (its scales
[0, length_scale, 0]), the same ids: the same durations and audio within ``MIN_SNR_DB``, or the export fails.
``--listener`` exports a Whisper checkpoint folder into ``OUT/listener`` (the chips' round trip hears with it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ...errors import ConfigError, QnnReleaseError, VerifyError
from ...util.files import write_json
from ...util.text import clip
from .cut import cut
from .runtime import Voice, VoiceInputError, text_to_ids

MIN_SNR_DB = 60.0  # measured: 83-101 dB on 12 sentences (the padded encoder's float order, 1e-5 in m_p, and the
# zero-padded last window of a short utterance); a wrong cut or expansion is below 20 dB


def voice_config(onnx_path: Path, max_ids: int, frames: int, overlap: int, info: dict) -> dict:
    """``voice.json`` from the voice's ``.onnx.json`` (``read_config``) and the cut's sizes."""
    return {**read_config(onnx_path), "max_ids": max_ids, "frames": frames, "overlap": overlap, "hop": info["hop"],
            "channels": info["channels"]}


def read_config(onnx_path: Path) -> dict:
    """The voice's ``.onnx.json``, checked against the graph (read before anything is written)."""
    import onnx

    path = onnx_path.with_name(onnx_path.name + ".json")
    try:
        src = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{onnx_path}: no {path.name} beside it (Piper ships each voice with its .onnx.json)",
                          hint="list it in the source's files") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not JSON ({str(e).splitlines()[0]})") from None
    try:
        id_map = src["phoneme_id_map"]
        voice = {"sample_rate": int(src["audio"]["sample_rate"]), "espeak_voice": src["espeak"]["voice"],
                 "phoneme_id_map": id_map, "num_symbols": int(src["num_symbols"]),
                 **{k: float(src["inference"][k]) for k in ("noise_scale", "length_scale", "noise_w")}}
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: no {e} (a Piper .onnx.json has audio.sample_rate, espeak.voice, num_symbols, "
                          "inference and phoneme_id_map)") from None
    if src.get("num_speakers", 1) != 1:
        raise ConfigError(f"{path}: {src['num_speakers']} speakers: this recipe takes single-speaker voices")
    m = onnx.load(str(onnx_path), load_external_data=False)
    emb = next((n for n in m.graph.node if n.op_type == "Gather" and n.name.startswith("/enc_p/emb")), None)
    table = next((i for i in m.graph.initializer if emb is not None and i.name == emb.input[0]), None)
    rows = table.dims[0] if table is not None else None
    top = max(i for ids in id_map.values() for i in ids)
    if rows is not None and (rows != voice["num_symbols"] or top >= rows):
        raise ConfigError(f"{path}: num_symbols {voice['num_symbols']} and ids up to {top}, the graph's phoneme "
                          f"table has {rows} rows: this .onnx.json belongs to another voice",
                          hint="use the .onnx.json published with this .onnx")
    return {**voice, "source": {"onnx": onnx_path.name, "config": path.name}}


def sentences_of(path: Path) -> list[str]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError:
        raise ConfigError(f"{path}: does not exist", hint="a sentences.yaml relative to the repository") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    items = data.get("sentences") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items or not all(isinstance(s, str) and s.strip() for s in items):
        raise ConfigError(f"{path}: expected a list `sentences` of non-empty texts",
                          hint="see clips/tts/sentences.yaml")
    return items


def snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    err = float(np.sum((ref - got) ** 2))
    return 200.0 if err == 0 else round(float(10 * np.log10(max(float(np.sum(ref ** 2)), 1e-30) / err)), 2)


def check_cut(onnx_path: Path, out: Path, sentences: list[str]) -> dict:
    """Every sentence through the cut graphs (CPU) and through the original graph, no noise, the same ids."""
    import onnxruntime as ort

    voice = Voice(out, device="cpu")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    original = ort.InferenceSession(str(onnx_path), sess_options=so, providers=["CPUExecutionProvider"])
    scales = np.array([0.0, voice.voice["length_scale"], 0.0], np.float32)
    rows = []
    for text in sentences:
        try:
            pieces = text_to_ids(text, voice.voice)
        except VoiceInputError as e:
            raise ConfigError(f"sentence {clip(text, 60)!r}: {e}") from None
        for ids in pieces:
            ref = original.run(None, {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)]),
                                      "scales": scales})[0].reshape(-1)
            got, frames, runs, _ = voice.synthesize(ids)
            rows.append({"text": text, "ids": len(ids), "frames": frames, "original_frames": len(ref) // voice.voice[
                "hop"], "decoder_runs": runs, "snr_db": snr_db(ref, got) if len(ref) == len(got) else None,
                "max_abs": float(np.max(np.abs(ref - got))) if len(ref) == len(got) else None})
    bad = [r for r in rows if r["snr_db"] is None or r["snr_db"] < MIN_SNR_DB]
    result = {"sentences": len(sentences), "pieces": rows, "min_snr_db": MIN_SNR_DB,
              "worst_snr_db": min((r["snr_db"] or 0.0) for r in rows), "passed": not bad}
    write_json(out / "export_check.json", result)
    if bad:
        b = bad[0]
        what = (f"{b['frames']} frames for the original's {b['original_frames']}" if b["snr_db"] is None
                else f"SNR {b['snr_db']} dB < {MIN_SNR_DB}")
        raise VerifyError(f"the cut graphs do not say {clip(b['text'], 60)!r} as the original graph does: {what}",
                          hint="see export_check.json: the voice is not the Piper graph the cut knows")
    return result


def export(onnx_path: Path, out: Path, max_ids: int, frames: int, overlap: int) -> dict:
    if not onnx_path.is_file():
        raise ConfigError(f"{onnx_path}: no such file", hint="the voice's .onnx in the source")
    if not 2 * overlap < frames:
        raise ConfigError(f"--overlap {overlap}: a window of {frames} frames keeps nothing with that much overlap on "
                          "each side", hint="the flow sees 32 frames each side: 32 of 256 is exact to 130 dB")
    read_config(onnx_path)  # a .onnx.json of another voice is refused before anything is written
    info = cut(onnx_path, out, max_ids, frames)
    config = voice_config(onnx_path, max_ids, frames, overlap, info)
    write_json(out / "voice.json", config)
    return {"cut": info, "voice": config}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci_tools.recipes.piper.export", description=__doc__.splitlines()[0])
    p.add_argument("voice", type=Path, help="the voice's .onnx (its .onnx.json beside it)")
    p.add_argument("out", type=Path)
    p.add_argument("--max-ids", type=int, default=256, help="ids the encoder takes (a longer sentence is split)")
    p.add_argument("--frames", type=int, default=256, help="latent frames per decoder window (hop samples each)")
    p.add_argument("--overlap", type=int, default=32, help="frames each window overlaps its neighbours on each side")
    p.add_argument("--sentences", type=Path, help="a sentences.yaml the cut graphs must say as the original does")
    p.add_argument("--listener", type=Path, help="a Whisper checkpoint folder: exported into OUT/listener")
    args = p.parse_args(argv)
    try:
        done = export(args.voice, args.out, args.max_ids, args.frames, args.overlap)
        said = "not checked (no --sentences)"
        if args.sentences:
            c = check_cut(args.voice, args.out, sentences_of(args.sentences))
            said = f"{len(c['pieces'])} utterances as the original says them, worst SNR {c['worst_snr_db']} dB"
        if args.listener:
            from ..whisper.export import export as whisper_export

            whisper_export(args.listener, args.out / "listener", gelu="erf", language="en")
    except (QnnReleaseError, VoiceInputError) as e:
        print(f"piper export: error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)
    except Exception as e:  # a bug: still one line (the build shows the last line of the log)
        print(f"piper export: internal error: {type(e).__name__}: {clip(str(e), 300)}", file=sys.stderr)
        return 70
    c = done["cut"]
    print(f"exported {args.voice.name}: encoder {c['encoder']['nodes']} nodes, decoder {c['decoder']['nodes']} nodes "
          f"({args.frames} frames x {c['hop']} samples), duration on the host; check: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
