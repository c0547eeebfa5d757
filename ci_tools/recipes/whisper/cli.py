"""``qnn-release transcribe``: the reference decoder on a build, an archive or an export folder."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import cast

from ...compile.records import REPORT, BuildReport, read_target
from ...errors import UsageError


def _folder(target: Path, tmp: Path) -> Path:
    """A folder the decoder reads: an archive or export folder as it is, or a build's target folders
    (``dist/<model>.encoder.<soc>.<precision>``) with the export they came from (``build-report.json``)."""
    if (target / "whisper.json").is_file():
        return target
    record = read_target(target)
    if record is None:
        raise UsageError(f"--target {target}: neither a Whisper archive or export (whisper.json) nor a build target",
                         hint="give an unpacked archive, an export folder, or dist/<model>.encoder.<soc>.<precision>")
    dist = target.parent
    try:
        exports = BuildReport.read(dist / REPORT).exports
    except (OSError, ValueError, TypeError):
        exports = {}
    export = exports.get(record.model)
    if export is None or not (Path(export) / "whisper.json").is_file():
        raise UsageError(f"--target {target}: the export of {record.model} is not in the cache",
                         hint="run `qnn-release build` again (nothing recompiles)")
    from ...catalog.socs import load_catalog

    soc = load_catalog().get(record.soc)
    for graph in ("encoder", "decoder"):
        folder = dist / f"{record.model}.{graph}.{soc.name.lower()}.{record.precision}"
        r = read_target(folder)
        if r is None:
            raise UsageError(f"--target {target}: no finished {folder.name}", hint="build both graphs")
        # a finished target (its folder exists only when it built) names its stub and binaries
        (tmp / f"{graph}_ctx.onnx").symlink_to((folder / cast(str, r.context_onnx)).resolve())
        for b in cast("list[str]", r.binaries):
            (tmp / b).symlink_to((folder / b).resolve())
    for name in ("tokenizer.json", "mel_filters.npy", "encoder.onnx", "decoder.onnx"):  # the ONNX for --cpu
        (tmp / name).symlink_to(Path(export) / name)
    config = json.loads((Path(export) / "whisper.json").read_text())
    config["chip"] = {"name": soc.name, "soc_model": soc.soc_model, "htp_arch": soc.htp_arch}
    (tmp / "whisper.json").write_text(json.dumps(config))
    return tmp


def cmd_transcribe(args: argparse.Namespace) -> int:
    from .runtime import Whisper, WhisperInputError, read_wav, segment_lines

    if args.max_tokens is not None and not 1 <= args.max_tokens <= 440:
        raise UsageError(f"--max-tokens {args.max_tokens}: expected 1 to 440", hint="Whisper's limit per window is 224")
    try:
        audio = [(c, read_wav(c)) for c in args.clips]  # every clip checked before minutes of emulator time
        with tempfile.TemporaryDirectory(prefix="qnn-release-transcribe.") as tmp:
            model = Whisper(_folder(args.target, Path(tmp)), device="cpu" if args.cpu else None,
                            language=args.language)
            for clip, samples in audio:
                # longer than 30 s: cut into windows (runtime.windows)
                r = model.transcribe_long(samples, max_tokens=args.max_tokens)
                print(f"{clip}\t{r.text}" if len(audio) > 1 else r.text)
                for line in segment_lines(r) if args.segments else []:
                    print(f"{clip}\t{line}" if len(audio) > 1 else line)
                print(f"{clip}: {model.device}, {len(r.segments)} window(s), encoder {r.encoder_seconds:.2f} s, "
                      f"{len(r.decoder_seconds)} decoder steps {sum(r.decoder_seconds):.2f} s", file=sys.stderr)
    except WhisperInputError as e:
        raise UsageError(str(e)) from None
    return 0


def register(sub) -> None:
    p = sub.add_parser("transcribe", help="transcribe 16 kHz mono WAVs of any length with a Whisper build "
                                          "(HTP emulator or CPU)")
    p.add_argument("clips", nargs="+", type=Path)
    p.add_argument("--target", type=Path, required=True,
                   help="an unpacked Whisper archive, an export folder, or a build target "
                        "dist/<model>.encoder.<soc>.<precision>")
    p.add_argument("--cpu", action="store_true", help="the exported graphs on CPU instead of the context binaries")
    p.add_argument("--language", default=None, help="default: the export's (en)")
    p.add_argument("--segments", action="store_true",
                   help="also one line per window ([start -> end] text): audio over 30 s is cut into windows")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per window (default 224)")
    p.set_defaults(func=cmd_transcribe)
