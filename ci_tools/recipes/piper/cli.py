"""``qnn-release speak``: a voice's graphs say a text into a WAV (a build's targets, an archive or an export)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import cast

from ...compile.records import REPORT, BuildReport, read_target
from ...errors import UsageError


def _folder(target: Path, tmp: Path, cpu: bool) -> Path:
    """A folder the runtime reads: an archive or export folder as it is, or a build's target folders
    (``dist/<model>.encoder.<soc>.<precision>``) with the export they came from (``build-report.json``)."""
    if (target / "voice.json").is_file():
        return target
    record = read_target(target)
    if record is None:
        raise UsageError(f"--target {target}: neither a voice folder (voice.json) nor a build target",
                         hint="give an unpacked archive, an export folder, or dist/<model>.encoder.<soc>.<precision>")
    try:
        exports = BuildReport.read(target.parent / REPORT).exports
    except (OSError, ValueError, TypeError):
        exports = {}
    found = exports.get(record.model)
    if found is None or not (Path(found) / "voice.json").is_file():
        raise UsageError(f"--target {target}: {record.model} is not a voice, or its export is not in the cache",
                         hint="a model with verify.kind speech; run `qnn-release build` again (nothing recompiles)")
    export = Path(found)
    if cpu:
        return export
    from ...catalog.socs import load_catalog

    soc = load_catalog().get(record.soc)
    for graph in ("encoder", "decoder"):
        folder = target.parent / f"{record.model}.{graph}.{soc.name.lower()}.{record.precision}"
        r = read_target(folder)
        if r is None:
            raise UsageError(f"--target {target}: no finished {folder.name}", hint="build both graphs")
        # a finished target (its folder exists only when it built) names its stub and binaries
        (tmp / f"{graph}_ctx.onnx").symlink_to((folder / cast(str, r.context_onnx)).resolve())
        for b in cast("list[str]", r.binaries):
            (tmp / b).symlink_to((folder / b).resolve())
    (tmp / "duration.onnx").symlink_to(export / "duration.onnx")
    voice = json.loads((export / "voice.json").read_text())
    voice["chip"] = {"name": soc.name, "soc_model": soc.soc_model, "htp_arch": soc.htp_arch}
    (tmp / "voice.json").write_text(json.dumps(voice))
    return tmp


def cmd_speak(args: argparse.Namespace) -> int:
    import numpy as np

    from .runtime import Voice, VoiceInputError, text_to_ids, write_wav

    if args.output.is_dir() or not args.output.parent.is_dir():
        what = "a folder" if args.output.is_dir() else f"no folder {args.output.parent}"
        raise UsageError(f"-o {args.output}: {what}", hint="give a .wav file in an existing folder")
    try:
        with tempfile.TemporaryDirectory(prefix="qnn-release-speak.") as tmp:
            voice = Voice(_folder(args.target, Path(tmp), args.cpu), device="cpu" if args.cpu else None)
            text_to_ids(args.text, voice.voice)  # bad text refused before minutes of emulator time
            s = voice.speak(args.text, rng=None if args.seed is None else np.random.default_rng(args.seed),
                            silence=max(0.0, args.sentence_silence))
            write_wav(args.output, s.audio, s.sample_rate)
    except VoiceInputError as e:
        raise UsageError(str(e)) from None
    busy = sum(s.seconds.values())
    where = "CPU" if voice.device == "cpu" else "the HTP emulator" if sys.platform == "linux" else "the HTP"
    print(f"{args.output}: {s.audio_seconds:.2f} s of audio at {s.sample_rate} Hz, {s.pieces} utterance(s), "
          f"{s.chunks} decoder run(s) on {where}; real-time factor {busy / max(s.audio_seconds, 1e-9):.3f}, first "
          f"audio after {s.first_audio_seconds:.2f} s", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("speak", help="say a text with a voice build into a WAV (HTP emulator, or CPU)")
    p.add_argument("text")
    p.add_argument("-o", "--output", type=Path, required=True, help="the WAV to write (16-bit mono)")
    p.add_argument("--target", type=Path, required=True,
                   help="an unpacked voice archive, an export folder, or a build target "
                        "dist/<model>.encoder.<soc>.<precision>")
    p.add_argument("--cpu", action="store_true", help="the exported graphs on CPU instead of the context binaries")
    p.add_argument("--seed", type=int, default=None,
                   help="sample Piper's noise with this seed (default: no noise, the same audio every time)")
    p.add_argument("--sentence-silence", type=float, default=0.0,
                   help="seconds of silence between sentences (default 0, as Piper's Python API)")
    p.set_defaults(func=cmd_speak)
