"""The Whisper recipe's export command: a checkpoint folder -> encoder.onnx, decoder.onnx and what decoding needs.

    python -m ci_tools.recipes.whisper.export SRC OUT [--gelu erf|tanh|erf-formula] [--language en]

SRC is a CTranslate2 (faster-whisper) folder or a Hugging Face openai/whisper-* snapshot. OUT gets
``encoder.onnx``, ``decoder.onnx``, ``tokenizer.json``, ``whisper.json`` (dimensions, special tokens,
suppressed tokens) and ``mel_filters.npy``. Every file is written atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ...errors import QnnReleaseError
from ...util.files import write_atomic, write_json
from ...util.text import clip as clipped
from . import graphs
from .checkpoint import Checkpoint, CheckpointError, load
from .runtime import mel_filters

EXTERNAL_DATA_ABOVE = 1_800_000_000  # protobuf's 2 GB limit, with room for the graph (large-v3's encoder)
SPECIAL = {"sot": "<|startoftranscript|>", "eot": "<|endoftext|>", "transcribe": "<|transcribe|>",
           "translate": "<|translate|>", "no_timestamps": "<|notimestamps|>", "sot_prev": "<|startofprev|>",
           "sot_lm": "<|startoflm|>"}


def _tokenizer(folder: Path):
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{folder}: no tokenizer.json", hint="the faster-whisper folder and the Hugging "
                              "Face snapshot both have it: copy it beside the weights")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:
        raise CheckpointError(f"{path}: not a tokenizers file: {clipped(str(e), 200)}") from None


def non_speech_tokens(tok) -> list[int]:
    """Tokens of speaker tags and sound annotations, as openai-whisper's ``non_speech_tokens``
    (used when the checkpoint does not list its suppressed tokens)."""
    symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
    symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
    misc = set("♩♪♫♬♭♮♯")
    result = {tok.encode(" -", add_special_tokens=False).ids[0], tok.encode(" '", add_special_tokens=False).ids[0]}
    for s in symbols + list(misc):
        for ids in (tok.encode(s, add_special_tokens=False).ids, tok.encode(" " + s, add_special_tokens=False).ids):
            if ids and (len(ids) == 1 or s in misc):
                result.add(ids[0])
    return sorted(result)


def decoding_config(ck: Checkpoint, tok, language: str) -> dict:
    tokens = {}
    for key, text in SPECIAL.items():
        i = tok.token_to_id(text)
        if i is None:
            raise CheckpointError(f"{ck.folder}/tokenizer.json: no {text} token", hint="not a Whisper tokenizer")
        tokens[key] = i
    no_speech = tok.token_to_id("<|nospeech|>") or tok.token_to_id("<|nocaptions|>")
    tokens["timestamp_begin"] = tokens["no_timestamps"] + 1
    if tok.token_to_id(f"<|{language}|>") is None:
        raise CheckpointError(f"--language {language}: no token <|{language}|>", hint="an ISO code, e.g. en")
    gen = {}
    if (ck.folder / "generation_config.json").is_file():
        gen = json.loads((ck.folder / "generation_config.json").read_text())
    # what the checkpoint says, as faster-whisper (CTranslate2 config.json) and transformers (generation config) read it
    suppress = ck.config.get("suppress_ids") or gen.get("suppress_tokens") or non_speech_tokens(tok)
    begin = ck.config.get("suppress_ids_begin") or gen.get("begin_suppress_tokens") or \
        [tok.encode(" ", add_special_tokens=False).ids[0], tokens["eot"]]
    specials = [tokens[k] for k in ("transcribe", "translate", "sot", "sot_prev", "sot_lm")] + \
        ([no_speech] if no_speech is not None else [])
    return {"format": 1, "dims": ck.dims.as_dict(), "tokens": tokens, "language": language,
            "suppress": sorted({int(i) for i in [*suppress, *specials]}), "suppress_begin": [int(i) for i in begin],
            "checkpoint": ck.format}


def _save(model, path: Path) -> None:
    import onnx

    onnx.checker.check_model(model)  # before writing: a bad graph is a bug here, not a compile error later
    if model.ByteSize() > EXTERNAL_DATA_ABOVE:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=f"{path.name}.data", size_threshold=1024)
    else:
        write_atomic(path, model.SerializeToString())


def export(src: Path, out: Path, gelu: graphs.Gelu = "erf", language: str = "en") -> dict:
    ck = load(src)
    tok = _tokenizer(Path(src))
    config = decoding_config(ck, tok, language)
    config["gelu"] = gelu
    out.mkdir(parents=True, exist_ok=True)
    _save(graphs.encoder(ck, gelu=gelu), out / "encoder.onnx")
    _save(graphs.decoder(ck, gelu=gelu), out / "decoder.onnx")
    write_atomic(out / "tokenizer.json", (Path(src) / "tokenizer.json").read_bytes())
    import io

    buf = io.BytesIO()
    np.save(buf, mel_filters(ck.dims.n_mels), allow_pickle=False)
    write_atomic(out / "mel_filters.npy", buf.getvalue())
    write_json(out / "whisper.json", config)
    return config


def check_against_ctranslate2(src: Path, out: Path, clips_file: Path, language: str = "en",
                              max_tokens: int | None = None) -> dict:
    """Transcribe the clips with CTranslate2 (faster-whisper's engine) from the checkpoint itself and with the
    exported graphs on CPU: an independent implementation. Writes ``export_check.json``; any difference fails."""
    from .check import load_clips
    from .runtime import Whisper, log_mel, read_wav

    ck_format = "ctranslate2" if (src / "model.bin").is_file() else "safetensors"
    result: dict = {"tool": None, "clips": [], "equal": 0, "total": 0}
    try:
        import ctranslate2
    except ImportError:
        ctranslate2 = None
    skipped = None
    if ck_format != "ctranslate2":
        skipped = "no independent Whisper implementation reads safetensors without PyTorch"
    elif ctranslate2 is None:
        skipped = "ctranslate2 is not installed (pip install ctranslate2)"
    elif not any((src / f"vocabulary.{x}").is_file() for x in ("txt", "json")):
        skipped = "ctranslate2 needs the checkpoint's vocabulary.txt beside model.bin"
    if skipped:
        result["skipped"] = skipped
        write_json(out / "export_check.json", result)
        return result
    clips = load_clips(clips_file.parent, clips_file.name)
    ours = Whisper(out, device="cpu", language=language)
    try:
        theirs = ctranslate2.models.Whisper(str(src), device="cpu", compute_type="float32")
    except (RuntimeError, ValueError) as e:
        raise CheckpointError(f"{src}: CTranslate2 cannot load it: {clipped(str(e), 200)}") from None
    for clip in clips:
        audio = read_wav(clip.path)
        mel = log_mel(audio, ours.filters)
        # as faster-whisper decodes greedily: the same prompt, suppressed tokens and blank suppression
        r = theirs.generate(ctranslate2.StorageView.from_array(mel), [ours.prompt], beam_size=1,
                            max_length=ours.config["dims"]["n_text_ctx"], suppress_blank=True,
                            suppress_tokens=[int(i) for i in np.flatnonzero(ours.suppress)])
        text = ours.tokenizer.decode(r[0].sequences_ids[0][:max_tokens], skip_special_tokens=True).strip()
        got = ours.transcribe(audio, max_tokens=max_tokens).text
        result["clips"].append({"file": clip.name, "ctranslate2": text, "export": got, "equal": text == got})
    result.update({"tool": f"ctranslate2 {ctranslate2.__version__}", "total": len(clips),
                   "equal": sum(c["equal"] for c in result["clips"])})
    write_json(out / "export_check.json", result)
    bad = [c for c in result["clips"] if not c["equal"]]
    if bad:
        from ...errors import VerifyError

        raise VerifyError(f"the exported graphs transcribe {len(bad)} of {len(clips)} clips differently from "
                          f"CTranslate2: {bad[0]['file']}: {clipped(bad[0]['export'], 80)!r} vs "
                          f"{clipped(bad[0]['ctranslate2'], 80)!r}",
                          hint="the export's maths differ from the checkpoint's: see export_check.json")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci_tools.recipes.whisper.export", description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="CTranslate2 (faster-whisper) or Hugging Face Whisper folder")
    p.add_argument("out", type=Path)
    p.add_argument("--gelu", choices=graphs.GELUS, default="erf")
    p.add_argument("--language", default="en")
    p.add_argument("--check-clips", type=Path, metavar="CLIPS_YAML",
                   help="transcribe these clips with CTranslate2 too (when installed): the texts must be equal")
    p.add_argument("--check-max-tokens", type=int, default=None, metavar="N",
                   help="compare the first N tokens (default: whole transcripts, at most n_text_ctx / 2)")
    args = p.parse_args(argv)
    try:
        config = export(args.src, args.out, gelu=args.gelu, language=args.language)
        if args.check_clips:
            c = check_against_ctranslate2(args.src, args.out, args.check_clips, args.language, args.check_max_tokens)
            said = c.get("skipped") or f"{c['equal']}/{c['total']} clips transcribed as {c['tool']} does"
            print(f"export check: {said}")
    except QnnReleaseError as e:
        print(f"whisper export: error: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:  # a bug: still one line (the build shows the last line of the log)
        print(f"whisper export: internal error: {type(e).__name__}: {clipped(str(e), 300)}", file=sys.stderr)
        return 70
    d = config["dims"]
    print(f"exported Whisper ({config['checkpoint']}, d_model {d['d_model']}, {d['encoder_layers']}+"
          f"{d['decoder_layers']} layers, vocab {d['n_vocab']}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
