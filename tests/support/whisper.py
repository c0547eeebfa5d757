"""What tests/test_whisper.py and tests/unit/test_whisper.py share."""

from __future__ import annotations

import numpy as np

from ci_tools.recipes.whisper import export, runtime
from tests.conftest import REPO
from tests.support import whisper_tiny as wt

CLIPS = REPO / "clips" / "whisper"


def make_tiny(tmp_path_factory):
    """One tiny checkpoint in three forms (CTranslate2 fp32 and fp16, sharded safetensors), and the fp32 export."""
    root = tmp_path_factory.mktemp("whisper")
    d = wt.dims()
    w = wt.weights(d, seed=3)
    wt.write_ctranslate2(root / "ct2", d, w, dtype="float32")
    wt.write_ctranslate2(root / "ct2-fp16", d, w, dtype="float16")
    wt.write_safetensors(root / "hf", d, w, shards=2)
    export.export(root / "ct2", root / "exp")
    return root, d, w


def _speech_with_pauses(parts: list[np.ndarray], pause: float, lead: float) -> tuple[np.ndarray, list]:
    """The parts one after another with `pause` seconds of silence between them, after `lead` seconds;
    and where each part lies (samples)."""
    rate, out, where = runtime.SAMPLE_RATE, [np.zeros(int(lead * runtime.SAMPLE_RATE), np.float32)], []
    at = out[0].size
    for a in parts:
        where.append((at, at + a.size))
        out += [a, np.zeros(int(pause * rate), np.float32)]
        at += a.size + int(pause * rate)
    return np.concatenate(out), where
