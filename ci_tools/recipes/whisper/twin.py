"""A Whisper model's twin: its float encoder and decoder beside ``transcribe.py``, the tokenizer and the decoding
configuration. ``transcribe.py --cpu`` runs them on CPU; ``--jit`` has ONNX Runtime's QNN EP compile them for the
device's HTP when the session is created (a chip the release has no binary for).

``python -m ci_tools.recipes.whisper.twin FOLDER SOC_MODEL HTP_ARCH OUT CLIP MAX_TOKENS MAX_WER``: the twin run as an
app runs it, in this process alone: the clip transcribed on CPU, then on the HTP emulator through on-device compile
(each graph's first load timed, the process's peak memory before and after), every graph run against CPU on the same
inputs; judged by the bar of the binaries it stands in for (WER against CPU at most MAX_WER). A QDQ twin's CPU side
runs the float graphs in ``FOLDER/reference/``. Prints one JSON line; writes CPU's transcript to ``OUT/<clip>.txt``
(the archive's sample answer)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import Member, TwinExtras, TwinPart

if TYPE_CHECKING:
    from ...util.precision import Precision

FILES = ("tokenizer.json", "mel_filters.npy")


def twin_extras(part: TwinPart) -> TwinExtras | None:
    from ...errors import QnnReleaseError
    from . import runtime
    from .check import DEFAULT_MAX_WER, load_clips, transcript_of

    model, verify = part.model, transcript_of(part.model)
    export = part.export
    if export is None or not all((Path(export) / f).is_file() for f in (*FILES, "whisper.json")):
        raise QnnReleaseError(f"{model.name}: the export lacks tokenizer.json, mel_filters.npy or whisper.json "
                              f"({export})", hint=f"remove {export} and run `qnn-release build` again")
    config = json.loads((Path(export) / "whisper.json").read_text())
    config.pop("chip", None)  # the twin is for any chip: the app says which (--soc-model, --htp-arch)
    config["max_tokens"] = verify.max_tokens
    clip = load_clips(part.loaded.root, verify.clips)[0]
    sample = f"sample/{clip.path.name}"
    members: list[Member] = [(f, Path(export) / f) for f in FILES]
    members += [("whisper.json", (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()),
                ("transcribe.py", Path(runtime.__file__).read_bytes()), (sample, clip.path)]
    # the bar of the binaries it stands in for (part.precision: float, or a quantized precision)
    precision = cast("Precision", "fp16" if part.precision == "float" else part.precision)
    bar = verify.max_wer_vs_cpu.get(precision, DEFAULT_MAX_WER[precision])
    return TwinExtras(members=members, graph_files={"encoder": "encoder.onnx", "decoder": "decoder.onnx"},
                      check=[__name__, sample, str(verify.max_tokens), str(bar)],
                      note=f"the clip {sample} (the first of verify.clips)",
                      readme="recipes/whisper_twin_readme.md.j2",
                      context={"sample": sample, "sample_text": f"sample/{clip.path.stem}.txt",
                               "max_tokens": verify.max_tokens, "precision": part.precision, "bar": bar})


def main(argv: list[str]) -> int:
    import numpy as np

    from ...compile.qnn_ep import quiet_native
    from ...util.metrics import compare, peak_memory_mb, rounded, worst
    from .check import wer
    from .runtime import Whisper, _session, read_wav

    folder, soc_model, htp_arch, out, clip, max_tokens, bar = argv
    audio = read_wav(Path(folder) / clip)
    cpu = Whisper(folder, device="cpu")
    reference = Path(folder) / "reference"  # a QDQ twin is judged against CPU on the float graphs
    if reference.is_dir():
        cpu.encoder, cpu.decoder = (_session(reference / f"{g}.onnx", "cpu") for g in ("encoder", "decoder"))
    said = cpu.transcribe(audio, max_tokens=int(max_tokens)).text
    before = peak_memory_mb()
    with quiet_native():
        jit = Whisper(folder, device="jit", chip={"soc_model": soc_model, "htp_arch": htp_arch})
    parity: dict[str, list] = {"encoder": [], "decoder": []}

    def observe(kind, feed, outputs):
        ref = (cpu.encoder if kind == "encoder" else cpu.decoder).run(None, feed)
        parity[kind].append(compare(np.concatenate([np.ravel(r) for r in ref]),
                                    np.concatenate([np.ravel(o) for o in outputs])))

    with quiet_native():
        got = jit.transcribe(audio, max_tokens=int(max_tokens), observe=observe).text
    Path(out, Path(clip).stem + ".txt").write_text(said + "\n")
    errors = wer([(said, got)])
    verified = errors <= float(bar)
    graphs = {g: {"first_load_seconds": round(jit.load_seconds[g], 3), **rounded(worst(p))}
              for g, p in parity.items()}
    print(json.dumps({"graphs": graphs, "peak_memory_mb": peak_memory_mb(), "memory_before_mb": before,
                      "verified": verified, "passed_by": ["transcript"] if verified else [],
                      **({} if verified else {"failure": f"its transcript leaves CPU's: WER {errors:.2f} > {bar} "
                                                         f"({got!r} for {said!r})"}),
                      "numbers": {"clip": Path(clip).name, "cpu": said, "htp": got, "wer_vs_cpu": errors}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
