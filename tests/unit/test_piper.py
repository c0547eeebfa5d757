"""A Piper voice's runtime and export checks without a compile: text to ids (Piper's convention, splitting,
bad text refused in one line), the decoder's windows, and a .onnx.json of another voice refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ci_tools.errors import ConfigError

pytest.importorskip("piper_phonemize")

from ci_tools.recipes.piper import runtime
from ci_tools.recipes.piper.runtime import VoiceInputError, split_sentence, text_to_ids


def _voice(max_ids: int = 256, drop: str | None = None) -> dict:
    from piper_phonemize import get_espeak_map

    id_map = {k: v for k, v in get_espeak_map().items() if k != drop}
    return {"phoneme_id_map": id_map, "espeak_voice": "en-us", "max_ids": max_ids}


def test_text_becomes_pipers_ids_one_utterance_per_sentence():
    v = _voice()
    m = v["phoneme_id_map"]
    pieces = text_to_ids("Hello world. Is it raining?", v)
    assert len(pieces) == 2
    for ids in pieces:  # ^ _ p1 _ p2 _ ... pn _ $  (a pad after BOS too, as Piper trains)
        assert ids[:2] == m["^"] + m["_"] and ids[-2:] == m["_"] + m["$"] and ids[1::2] == m["_"] * (len(ids) // 2)
    from piper_phonemize import phoneme_ids_espeak, phonemize_espeak

    assert pieces == [phoneme_ids_espeak(s) for s in phonemize_espeak("Hello world. Is it raining?", "en-us")]


def test_a_sentence_longer_than_the_encoder_is_split_at_its_commas_then_between_words():
    v = _voice(max_ids=80)
    text = ("Although the forecast predicted heavy rain, strong winds, and hail, the organizers of the village "
            "festival decided to continue with the concert and the market and the fireworks display tonight")
    pieces = text_to_ids(text, v)
    assert len(pieces) >= 3 and all(len(p) <= 80 for p in pieces)
    comma = v["phoneme_id_map"][","]
    assert sum(p[-3:-2] == comma for p in pieces) >= 1  # pieces end at commas: ... , _ $
    # nothing lost: the pieces' phonemes are the sentence's, less the spaces at the cuts
    whole = text_to_ids(text, _voice(max_ids=10000))[0]
    assert sum(len(p) - 3 for p in pieces) >= len(whole) - 3 - 2 * 2 * len(pieces)
    with pytest.raises(VoiceInputError, match=r"a word of .* is longer than the encoder takes"):
        split_sentence(list("abcdefghij" * 10), {c: [1] for c in "abcdefghij"}, 40, "x" * 100)


@pytest.mark.parametrize("text, message", [
    ("", "the text is empty"),
    ("   \n", "the text is empty"),
    ("word " * 3000, "more than 10000"),
])
def test_bad_text_is_one_line(text, message):
    with pytest.raises(VoiceInputError, match=message) as e:
        text_to_ids(text, _voice())
    assert "\n" not in str(e.value)


def test_a_phoneme_the_voice_lacks_is_named():
    with pytest.raises(VoiceInputError, match=r"phoneme\(s\) 'ə' of 'Hello world\.' are not in the voice's phoneme"):
        text_to_ids("Hello world.", _voice(drop="ə"))


class _Voice(runtime.Voice):
    def __init__(self, frames, overlap):  # the window plan only
        self.voice = {"frames": frames, "overlap": overlap}


@pytest.mark.parametrize("total", [1, 50, 256, 257, 408, 520, 1000, 1401])
def test_decoder_windows_cover_the_utterance_once_each_inside_it(total):
    plan = _Voice(256, 32).windows(total)
    assert plan[0][1] == 0 and plan[-1][2] == total
    for (s, a, b), nxt in zip(plan, plan[1:] + [None]):
        assert s >= 0 and (s + 256 <= total or s == 0) and a < b  # inside the utterance (or the only window)
        assert a - s >= (32 if s > 0 else 0) and (s + 256 - b >= 32 or b == total)  # 32 frames of context kept
        if nxt:
            assert nxt[1] == b


def _tiny_voice_graph(path, rows: int):
    table = numpy_helper.from_array(np.zeros((rows, 4), np.float32), "sid")
    node = helper.make_node("Gather", ["sid", "input"], ["/enc_p/emb/Gather_output_0"], name="/enc_p/emb/Gather")
    g = helper.make_graph([node], "voice", [helper.make_tensor_value_info("input", TensorProto.INT64, [1, 5])],
                          [helper.make_tensor_value_info("/enc_p/emb/Gather_output_0", TensorProto.FLOAT, None)],
                          [table])
    import onnx

    onnx.save(helper.make_model(g), str(path))


def test_a_onnx_json_of_another_voice_is_refused(tmp_path):
    from ci_tools.recipes.piper.export import voice_config

    onnx_path = tmp_path / "v.onnx"
    _tiny_voice_graph(onnx_path, rows=100)
    config = {"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"}, "num_symbols": 256,
              "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
              "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [200]}}
    (tmp_path / "v.onnx.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="num_symbols 256 and ids up to 200, the graph's phoneme table has 100 rows"):
        voice_config(onnx_path, 256, 256, 32, {"hop": 256, "channels": 192})
    (tmp_path / "v.onnx.json").write_text(json.dumps({**config, "num_symbols": 100, "phoneme_id_map": {
        "_": [0], "^": [1], "$": [2], "a": [50]}}))
    assert voice_config(onnx_path, 256, 256, 32, {"hop": 256, "channels": 192})["num_symbols"] == 100
    (tmp_path / "v.onnx.json").unlink()
    with pytest.raises(ConfigError, match=r"no v\.onnx\.json beside it"):
        voice_config(onnx_path, 256, 256, 32, {"hop": 256, "channels": 192})


def test_a_voice_folder_without_its_keys_is_one_line(tmp_path):
    with pytest.raises(VoiceInputError, match=r"no voice\.json"):
        runtime.read_voice(tmp_path)
    (tmp_path / "voice.json").write_text(json.dumps({"sample_rate": 22050}))
    with pytest.raises(VoiceInputError, match="no espeak_voice, phoneme_id_map"):
        runtime.read_voice(tmp_path)


def _result(**change):
    from ci_tools.recipes.piper.check import ChipResult

    said = {"text": "The battery is at 45 percent.", "cpu_heard": "The battery is at 45%.",
            "htp_heard": "The battery is at 45%.", "wer_vs_cpu": 0.0, "wer": 0.1667, "audio_seconds": 2.0,
            "pieces": 1, "decoder_runs": 1, "seconds": {}, "first_audio_seconds": 20.0, "worst_chunk_snr_db": 26.0,
            "worst_chunk_max_abs": 0.08}
    base = {"sentences": [said], "wer_vs_cpu": 0.0, "wer": 0.1667, "worst_chunk_snr_db": 25.8,
            "worst_chunk_max_abs": 0.085, "parity": {"encoder": {"cosine": 0.9999992}, "decoder": {"cosine": 0.9988}},
            "emulator_seconds_per_encoder_run": 4.9, "emulator_seconds_per_decoder_run": 23.5,
            "real_time_factor": 13.1, "first_audio_seconds": 41.0}
    return ChipResult(**{**base, **change})


@pytest.mark.parametrize("change, passed_by, message", [
    ({}, ["waveform", "round trip"], None),  # what the v73 chips measured: passes
    ({"worst_chunk_snr_db": 12.0}, ["round trip"], "a decoder window at SNR 12.0 dB < verify.min_snr_db.fp16 20"),
    ({"worst_chunk_max_abs": 0.4}, ["round trip"], "a decoder window off by 0.4 > verify.max_abs.fp16 0.25"),
    ({"parity": {"encoder": {"cosine": 0.99}}}, ["round trip"], "the encoder at cosine 0.990000 < 0.999"),
    ({"wer_vs_cpu": 0.5}, ["waveform"], "the listener hears WER 0.500 > verify.max_wer.fp16 0.05 against CPU's"),
    ({"wer": 0.5}, ["waveform"], "heard at WER 0.500 in the chip's audio, 0.143 in CPU's"),
])
def test_a_chips_speech_is_judged_by_its_waveform_and_by_what_the_listener_hears(change, passed_by, message):
    from types import SimpleNamespace

    from ci_tools.compile.records import TargetRecord
    from ci_tools.recipes.piper.check import _apply
    from ci_tools.recipes.piper.results import SpeechVerify

    model = SimpleNamespace(verify=SpeechVerify(kind="speech", sentences="s.yaml"))
    rs = [TargetRecord.make(id=f"v.{g}.sm8550.fp16", model="v", graph=g, soc="SM8550", precision="fp16", status="ok")
          for g in ("encoder", "decoder")]
    judged = _apply(model, rs, _result(**change), {"passed": True})
    for r in judged:
        assert r.recipe["passed_by"] == passed_by and r.recipe["kind"] == r.verify_kind == "speech"
        if message is None:
            assert r.verified is True and r.status == "ok"
        else:
            assert r.status == "failed" and r.exit_code == 7 and message in r.error, r.error


@pytest.mark.parametrize("module", ["ci_tools.recipes.piper.runtime", "ci_tools.recipes.whisper.runtime"])
def test_the_shipped_runtimes_keep_the_native_banner_off_stdout(module, capfd, monkeypatch):
    """#46 item 3: the QNN library's "# LIBNATIVE" banner, written to fd 1 as the HTP backend loads, never reaches
    the terminal of `speak.py` or the Whisper runtime (a native write inside session creation), unless asked."""
    import importlib
    import os

    r = importlib.import_module(module)
    monkeypatch.delenv("QNN_VERBOSE", raising=False)
    with r._native_quiet():
        os.write(1, b" # LIBNATIVE: banner\n")
    os.write(1, b"said\n")
    assert capfd.readouterr().out == "said\n"
    monkeypatch.setenv("QNN_VERBOSE", "1")
    with r._native_quiet():
        os.write(1, b" # LIBNATIVE: banner\n")
    assert "LIBNATIVE" in capfd.readouterr().out
