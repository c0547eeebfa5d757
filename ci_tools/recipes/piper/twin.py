"""A Piper voice's twin: its float encoder and decoder beside ``speak.py``, the duration predictor and ``voice.json``.
``speak.py --cpu`` runs them on CPU; ``--jit`` has ONNX Runtime's QNN EP compile them for the device's HTP when the
session is created (a chip the release has no binary for).

``python -m ci_tools.recipes.piper.twin FOLDER SOC_MODEL HTP_ARCH OUT SENTENCE_FILE MIN_SNR_DB MAX_ABS``: the twin run
as an app runs it, in this process alone: the sentence said through on-device compile on the HTP emulator (each
graph's first load timed, the process's peak memory before and after), every encoder and decoder run against CPU on
the same inputs; judged by the bars of the binaries it stands in for (every decoder window at least MIN_SNR_DB against
CPU, no sample off by more than MAX_ABS). A QDQ twin's CPU side runs the float graphs in ``FOLDER/reference/``. Prints
one JSON line; writes CPU's audio of the sentence to ``OUT/sentence.wav`` (the archive's sample answer)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import Member, TwinExtras, TwinPart

if TYPE_CHECKING:
    from ...util.precision import Precision


def twin_extras(part: TwinPart) -> TwinExtras | None:
    from ...errors import QnnReleaseError
    from . import runtime
    from .check import DEFAULT_MAX_ABS, DEFAULT_MIN_SNR_DB, speech_of
    from .export import sentences_of

    model, verify = part.model, speech_of(part.model)
    export = part.export
    if export is None or not all((Path(export) / f).is_file() for f in ("duration.onnx", "voice.json")):
        raise QnnReleaseError(f"{model.name}: the export lacks duration.onnx or voice.json ({export})",
                              hint=f"remove {export} and run `qnn-release build` again (it exports again)")
    voice = json.loads((Path(export) / "voice.json").read_text())
    voice.pop("chip", None)  # the twin is for any chip: the app says which (--soc-model, --htp-arch)
    sentence = sentences_of((part.loaded.root / verify.sentences).resolve())[0]
    members: list[Member] = [
        ("duration.onnx", Path(export) / "duration.onnx"),
        ("voice.json", (json.dumps(voice, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()),
        ("speak.py", Path(runtime.__file__).read_bytes()), ("sample/sentence.txt", (sentence + "\n").encode())]
    # the bars of the binaries it stands in for (part.precision: float, or a quantized precision)
    precision = cast("Precision", "fp16" if part.precision == "float" else part.precision)
    snr = verify.min_snr_db.get(precision, DEFAULT_MIN_SNR_DB[precision])
    max_abs = verify.max_abs.get(precision, DEFAULT_MAX_ABS[precision])
    return TwinExtras(members=members, graph_files={"encoder": "encoder.onnx", "decoder": "decoder.onnx"},
                      check=[__name__, "sample/sentence.txt", str(snr), str(max_abs)],
                      note="the sentence in sample/sentence.txt (the first of verify.sentences)",
                      readme="recipes/piper_twin_readme.md.j2",
                      context={"sentence": sentence, "min_snr_db": snr, "max_abs": max_abs,
                               "precision": part.precision})


def main(argv: list[str]) -> int:
    import numpy as np

    from ...compile.qnn_ep import quiet_native
    from ...util.metrics import compare, peak_memory_mb, rounded, worst
    from .export import snr_db
    from .runtime import Voice, _session, write_wav

    folder, soc_model, htp_arch, out, sentence_file, min_snr, max_abs = argv
    try:
        import piper_phonemize  # noqa: F401
    except ImportError:  # as without onnxruntime-qnn: the twin ships, never called verified
        print(json.dumps({"verified": False, "not_measured": "piper-phonemize is not installed where this release "
                                                             "was packaged"}))
        return 0
    text = Path(folder, sentence_file).read_text().strip()
    cpu = Voice(folder, device="cpu")
    reference = Path(folder) / "reference"  # a QDQ twin is judged against CPU on the float graphs
    if reference.is_dir():
        cpu.encoder, cpu.decoder = (_session(reference / f"{g}.onnx", "cpu") for g in ("encoder", "decoder"))
    said = cpu.speak(text)
    write_wav(Path(out) / "sentence.wav", said.audio, said.sample_rate)
    before = peak_memory_mb()
    with quiet_native():
        jit = Voice(folder, device="jit", chip={"soc_model": soc_model, "htp_arch": htp_arch})
    parity: dict[str, list] = {"encoder": [], "decoder": []}
    windows: list[tuple[float, float]] = []

    def observe(kind, feed, outputs):
        session = cpu.encoder if kind == "encoder" else cpu.decoder
        types = {i.name: i.type for i in session.get_inputs()}
        ref = session.run(None, {k: (v.astype(np.int64) if types.get(k) == "tensor(int64)" else v)
                                 for k, v in feed.items()})
        parity[kind].append(compare(np.concatenate([np.ravel(r) for r in ref]),
                                    np.concatenate([np.ravel(o) for o in outputs])))
        if kind == "decoder":
            r, g = np.ravel(ref[0]), np.ravel(outputs[0])
            windows.append((snr_db(r, g), float(np.max(np.abs(r - g)))))

    with quiet_native():
        got = jit.speak(text, observe=observe)
    worst_snr, worst_abs = min(w[0] for w in windows), max(w[1] for w in windows)
    verified = worst_snr >= float(min_snr) and worst_abs <= float(max_abs)
    graphs = {g: {"first_load_seconds": round(jit.load_seconds[g], 3), **rounded(worst(p))}
              for g, p in parity.items()}
    print(json.dumps({"graphs": graphs, "peak_memory_mb": peak_memory_mb(), "memory_before_mb": before,
                      "verified": verified, "passed_by": ["waveform"] if verified else [],
                      **({} if verified else {"failure": f"a decoder window leaves CPU's: {worst_snr:.1f} dB "
                                                         f"(at least {min_snr}), max abs {worst_abs:.3g} "
                                                         f"(at most {max_abs})"}),
                      "numbers": {"sentence": text, "decoder_windows": len(windows),
                                  "worst_window_snr_db": round(worst_snr, 2),
                                  "worst_window_max_abs": round(worst_abs, 6),
                                  "audio_seconds": round(got.audio_seconds, 3)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
