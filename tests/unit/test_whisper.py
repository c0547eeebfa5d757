"""The Whisper recipe: checkpoint readers, export, reference decoder, transcript verification, archive.

The unit tier of tests/test_whisper.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import itertools
import json
import shutil
import wave
from pathlib import Path

import numpy as np
import pytest
import yaml

from ci_tools.compile.records import TargetRecord
from ci_tools.errors import ConfigError
from ci_tools.matrix.plan import plan
from ci_tools.matrix.schema import load_matrix
from ci_tools.recipes.whisper import check, checkpoint, export, runtime
from tests.conftest import REPO, SDK_SECTION
from tests.support import whisper_tiny as wt
from tests.support.whisper import CLIPS, _speech_with_pauses


def test_both_checkpoint_formats_read_to_the_same_weights(tiny):
    root, d, w = tiny
    a, b = checkpoint.load(root / "ct2"), checkpoint.load(root / "hf")
    assert a.format == "ctranslate2" and b.format == "safetensors"
    assert a.dims.as_dict() == b.dims.as_dict() == d
    assert set(a.weights) == set(b.weights) == set(checkpoint.expected_shapes(a.dims))
    for name, arr in w.items():
        assert np.array_equal(a.weights[name], arr), name  # the fused QKV / KV were split back exactly
        assert np.array_equal(b.weights[name], arr), name
    half = checkpoint.load(root / "ct2-fp16")
    assert np.array_equal(half.weights["decoder.layers.1.encoder_attn.v_proj.weight"],
                          w["decoder.layers.1.encoder_attn.v_proj.weight"].astype(np.float16).astype(np.float32))


def test_export_decodes_as_ctranslate2_does(tiny):
    """The exported graphs against CTranslate2 on the same checkpoint: encoder output and greedy tokens."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    root, _, w = tiny
    ours = runtime.Whisper(root / "exp", device="cpu")
    theirs = ctranslate2.models.Whisper(str(root / "ct2"), device="cpu", compute_type="float32")
    for clip in ("compile.wav", "weather.wav"):
        audio = runtime.read_wav(CLIPS / clip)
        mel = ours.features(audio)
        enc = np.asarray(theirs.encode(ctranslate2.StorageView.from_array(mel), to_cpu=True))
        cross_k, cross_v = ours.encode(mel)
        for layer in range(2):
            p = f"decoder.layers.{layer}.encoder_attn"
            np.testing.assert_allclose(cross_k[layer, 0], enc[0] @ w[f"{p}.k_proj.weight"].T, atol=2e-4)
            np.testing.assert_allclose(cross_v[layer, 0], enc[0] @ w[f"{p}.v_proj.weight"].T + w[f"{p}.v_proj.bias"],
                                       atol=2e-4)
        got = ours.transcribe(audio, max_tokens=40).tokens
        ref = theirs.generate(ctranslate2.StorageView.from_array(mel), [ours.prompt], beam_size=1, max_length=80,
                              suppress_blank=True,
                              suppress_tokens=[int(i) for i in np.flatnonzero(ours.suppress)])[0].sequences_ids[0]
        assert len(set(got)) > 2, "the random decoder should not say one token only"
        assert got == ref[:len(got)] and len(got) == 40


def test_safetensors_export_equals_ctranslate2_export(tiny):
    root, _, _ = tiny
    export.export(root / "hf", root / "exp-hf", gelu="erf")
    a, b = runtime.Whisper(root / "exp", device="cpu"), runtime.Whisper(root / "exp-hf", device="cpu")
    audio = runtime.read_wav(CLIPS / "lights.wav")
    assert a.transcribe(audio, max_tokens=12).tokens == b.transcribe(audio, max_tokens=12).tokens
    assert json.loads((root / "exp-hf" / "whisper.json").read_text())["suppress_begin"] == [220, 256]


def test_log_mel_and_filters_equal_faster_whispers():
    """Numbers printed by faster-whisper 1.2.1's FeatureExtractor(feature_size=80) for lights.wav
    (an independent numpy implementation; not a dependency of the tests)."""
    fb = runtime.mel_filters()
    assert fb.shape == (80, 201) and abs(float(fb.sum()) - 1.9990241527557373) < 1e-5
    assert np.flatnonzero(fb[10]).tolist() == [10, 11]
    np.testing.assert_allclose(fb[10][[10, 11]], [0.01990822, 0.00495438], rtol=1e-5)
    mel = runtime.log_mel(runtime.read_wav(CLIPS / "lights.wav"), fb)[0]
    np.testing.assert_allclose(mel[:6, 150], [0.29613966, 0.69066024, 0.7048887, 0.7216743, 0.825045, 0.81913596],
                               atol=1e-4)
    np.testing.assert_allclose(mel[40, 100:104], [-0.11056387, 0.08145702, 0.21106547, 0.08581644], atol=1e-4)
    assert abs(float(mel.mean()) - -0.6301394701004028) < 1e-5


def test_128_mel_filters_equal_faster_whispers():
    """Whisper large-v3's front end: numbers printed by faster-whisper 1.2.1's FeatureExtractor(feature_size=128)."""
    fb = runtime.mel_filters(128)
    assert fb.shape == (128, 201) and abs(float(fb.sum()) - 3.190985679626465) < 1e-5
    mel = runtime.log_mel(runtime.read_wav(CLIPS / "lights.wav"), fb)[0]
    np.testing.assert_allclose(mel[:6, 150], [0.22038043, 0.31794488, 0.69899029, 0.66453552, 0.74940908, 0.64165676],
                               atol=1e-4)
    np.testing.assert_allclose(mel[100, 100:104], [0.06191308, 0.25284821, 0.36504567, 0.35589492], atol=1e-4)
    assert abs(float(mel.mean()) - -0.5883865356445312) < 1e-5


def test_a_128_mel_checkpoint_exports_and_decodes_as_ctranslate2_does(tmp_path):
    """large-v3's shape (128 mel bins) in both checkpoint formats, on a tiny random-weight model."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    d = {**wt.dims(), "n_mels": 128}
    w = wt.weights(d, seed=5)
    wt.write_ctranslate2(tmp_path / "ct2", d, w, dtype="float32")
    wt.write_safetensors(tmp_path / "hf", d, w, shards=1)
    export.export(tmp_path / "ct2", tmp_path / "exp")
    export.export(tmp_path / "hf", tmp_path / "exp-hf")
    ours, hf = runtime.Whisper(tmp_path / "exp", device="cpu"), runtime.Whisper(tmp_path / "exp-hf", device="cpu")
    assert ours.filters.shape == (128, 201) and ours.config["dims"]["n_mels"] == 128
    theirs = ctranslate2.models.Whisper(str(tmp_path / "ct2"), device="cpu", compute_type="float32")
    audio = runtime.read_wav(CLIPS / "weather.wav")
    mel = ours.features(audio)
    assert mel.shape == (1, 128, 3000)
    got = ours.transcribe(audio, max_tokens=20).tokens
    ref = theirs.generate(ctranslate2.StorageView.from_array(mel), [ours.prompt], beam_size=1, max_length=60,
                          suppress_blank=True,
                          suppress_tokens=[int(i) for i in np.flatnonzero(ours.suppress)])[0].sequences_ids[0]
    assert len(set(got)) > 2 and got == ref[:20]  # equal up to the end of text, or 20 tokens
    assert hf.transcribe(audio, max_tokens=20).tokens == got


def test_word_error_rate_and_clip_turns():
    # the stated normalisation: "7" and "seven" are one word, "Mr." and "mister" too; "light" stays an error
    assert check.word_errors("Turn off the kitchen lights at seven.", "turn off the kitchen light at 7") == (1, 7)
    assert check.word_errors("mister Dashwood had twenty one", "Mr. Dashwood had 21") == (0, 5)
    assert check.words("x ² 1000") == ["x", "²", "1000"]  # no crash on other digits, large numbers kept
    assert check.word_errors("a b c", "a x b c d") == (2, 3)
    assert check.wer([("It's fine.", "it's fine"), ("one two", "")]) == 0.5
    clips = [check.Clip(path=Path(f"{i}.wav"), text=str(i), sha256="") for i in range(4)]
    turns = [[c.text for c in check.chip_clips(clips, t, 2)] for t in range(5)]
    assert turns == [["0", "1"], ["2", "3"], ["0", "1"], ["2", "3"], ["0", "1"]]
    assert [c.text for c in check.chip_clips(clips, 1, 9)] == ["0", "1", "2", "3"]


def test_a_chips_clips_are_packed_into_whisper_windows(tmp_path):
    """One encoder run (minutes on the emulator) per 30-second window, not per clip: the four 4-second clips
    fit one window; a 20-second clip and a 12-second one do not share one; pack: false keeps one per window."""
    clips = check.load_clips(REPO, "clips/whisper/clips.yaml")
    (one,) = check.pack_windows(clips, pack=True)
    assert [c.name for c in one] == [c.name for c in clips]
    assert [len(w) for w in check.pack_windows(clips, pack=False)] == [1, 1, 1, 1]
    audio = check.window_audio([str(c.path) for c in one])
    lengths = [len(runtime.read_wav(c.path)) for c in clips]
    gap = int(check.GAP_SECONDS * runtime.SAMPLE_RATE)
    assert len(audio) == sum(lengths) + 3 * gap and not audio[lengths[0]:lengths[0] + gap].any()
    long = []
    for name, seconds in (("a.wav", 20), ("b.wav", 12), ("c.wav", 9)):
        with wave.open(str(tmp_path / name), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(b"\0\0" * 16000 * seconds)
        long.append(check.Clip(path=tmp_path / name, text=name, sha256=""))
    assert [[c.text for c in w] for w in check.pack_windows(long, pack=True)] == [["a.wav"], ["b.wav", "c.wav"]]


def test_a_transcript_too_far_from_cpu_fails_both_graphs():
    model = load_matrix(REPO / "matrix" / "whisper.yaml").matrix.model("whisper-base")
    rs = [TargetRecord.make(id=f"whisper-base.{g}.sm8750.fp16", model="whisper-base", graph=g, soc="SM8750",
                            precision="fp16", status="ok") for g in ("encoder", "decoder")]
    clip = {"file": "lights.wav", "cpu": "Turn off the lights.", "htp": "Turn of the lights.", "wer_vs_cpu": 0.25}
    result = {"clips": [clip], "wer_vs_cpu": 0.25, "parity": {}, "emulator_seconds_per_encoder_run": 1.0,
              "emulator_seconds_per_decoder_step": 0.1}
    judged = check._apply(model, rs, check.ChipResult(**result), None)
    assert [r.id for r in judged] == [r.id for r in rs]
    for r in judged:
        assert r.status == "failed" and r.exit_code == 7 and not r.verified
        assert "WER 0.250 > 0.0" in r.error and "lights.wav" in r.error and "Turn of the" in r.error


def test_decoding_along_another_transcript_says_where_it_leaves_the_best_tokens(tiny):
    """What the near-tie judge runs on CPU: decode along HTP's tokens, and name each step that is not the best."""
    root, _, _ = tiny
    model = runtime.Whisper(root / "exp", device="cpu")
    audio = runtime.read_wav(CLIPS / "compile.wav")
    own = model.transcribe(audio, max_tokens=6)
    follow = own.tokens + ([model.eot] if own.ended else [])
    assert model.transcribe(audio, max_tokens=6, follow=follow).departures == []
    other = next(t for t in range(256) if t != own.tokens[1])
    changed = [own.tokens[0], other, *own.tokens[2:]]
    again = model.transcribe(audio, max_tokens=6, follow=changed)
    assert again.tokens == changed[:len(again.tokens)] and again.departures[0]["token"] == other
    first = again.departures[0]
    assert first["offset"] == len(model.prompt) and first["best"] == own.tokens[1] and first["gap"] > 0


def test_a_transcript_that_differs_only_by_near_ties_passes_and_says_where():
    """The HTP transcript differs from CPU's, and at the one step where it parted CPU, decoding along HTP's
    tokens, rated HTP's token within NEAR_TIE_NATS of its own: a near-tie, not an error. Anything else in a
    differing window fails as before, saying why it is not a near-tie."""
    model = load_matrix(REPO / "matrix" / "whisper.yaml").matrix.model("whisper-base")
    rs = [TargetRecord.make(id=f"whisper-base.{g}.sm8650.fp16", model="whisper-base", graph=g, soc="SM8650",
                            precision="fp16", status="ok") for g in ("encoder", "decoder")]
    tie = {"offset": 9, "cpu": " Cloves", "htp": " Clothes", "gap": round(check.NEAR_TIE_NATS / 2, 4),
           "htp_gap": 0.02, "end_of_text": False}
    differs = {"file": "002.wav", "cpu": "Four Queen of Cloves.", "htp": "Four Queen of Clothes.",
               "wer_vs_cpu": 0.25, "htp_ended": True, "divergent_steps": [tie]}
    same = {"file": "001.wav", "cpu": "Ten of clubs.", "htp": "Ten of Clubs.", "wer_vs_cpu": 0.0,
            "htp_ended": True, "divergent_steps": []}  # a capital: the same words, judged by WER as before
    result = {"clips": [differs, same], "wer_vs_cpu": 0.125, "parity": {}, "emulator_seconds_per_encoder_run": 1.0,
              "emulator_seconds_per_decoder_step": 0.1}
    for r in check._apply(model, rs, check.ChipResult(**result), None, recorded=True):
        assert r.status == "ok" and r.verified and r.verified_on == "real-samples"
        assert r.recipe["near_ties"] == [{"file": "002.wav", **{k: v for k, v in tie.items()
                                                                    if k != "end_of_text"}}]
        assert r.recipe["near_tie_nats"] == check.NEAR_TIE_NATS
    beyond = {**tie, "offset": 12, "gap": check.NEAR_TIE_NATS * 4}
    for bad, why in (
            ({**differs, "divergent_steps": [tie, beyond]}, "step 12: HTP ' Clothes' for CPU's ' Cloves': 0.4 nats"),
            ({**differs, "divergent_steps": [{**tie, "gap": None}]}, "a token CPU never picks"),
            # an end of text where CPU reads on drops words: never a near-tie, however close
            ({**differs, "htp": "Four Queen.", "divergent_steps": [{**tie, "htp": "<|endoftext|>",
                                                                   "end_of_text": True}]}, "an end of text"),
            ({**differs, "htp_ended": False}, "HTP stopped at the token limit"),
            ({**differs, "htp": "Four Queens of Clothes and Hearts."}, "words differ for 1 near-tie step"),
            ({**differs, "divergent_steps": []}, "no step where HTP left"),
            ({k: v for k, v in differs.items() if k != "divergent_steps"}, "checked before near-ties")):
        for r in check._apply(model, rs, check.ChipResult(**{**result, "clips": [bad, same]}), None):
            assert r.status == "failed" and "WER 0.125 > 0.0" in r.error and why in r.error, (why, r.error)


def test_whisper_matrix_every_chip_fp16_and_one_w8a16():
    loaded = load_matrix(REPO / "matrix" / "whisper.yaml")
    targets = plan(loaded)
    assert {(t.soc.name, t.precision) for t in targets} == {
        (s, "fp16") for s in ("SM8550", "SM8650", "SM8750", "SM8850", "QCS9100")} | {("SM8750", "w8a16")}
    assert len(targets) == 12 and {t.graph for t in targets} == {"encoder", "decoder"}
    m = loaded.matrix.model("whisper-base")
    assert m.source.kind == "parts" and m.verify.kind == "transcript"
    assert len(check.load_clips(loaded.root, m.verify.clips)) >= 4


def test_decoder_calibration_holds_every_prompt_step_of_every_clip(tiny):
    root, _, _ = tiny
    clips = check.load_clips(REPO, "clips/whisper/clips.yaml")[:2]
    prompt = len(runtime.Whisper(root / "exp", device="cpu").prompt)
    for asked in (2, 12):
        samples = check.calibration(root / "exp", clips, "decoder", asked, max_tokens=16)
        offsets = [int(s["offset"][0]) for s in samples]
        # the prompt steps (start, language, task, no timestamps) of both clips, whatever was asked
        assert sorted(o for o in offsets if o < prompt) == sorted(list(range(prompt)) * 2)
        assert len(samples) == max(asked, 2 * prompt)
    mels = check.calibration(root / "exp", clips, "encoder", 12, max_tokens=4)
    assert len(mels) == 2 and mels[0]["mel"].shape[-1] == 3000


def test_transcript_verification_needs_encoder_and_decoder(tmp_path):
    data = yaml.safe_load((REPO / "matrix" / "whisper.yaml").read_text())
    data["models"][0]["graphs"][1]["name"] = "dec"
    data["models"][0]["exclude"] = []
    (tmp_path / "matrix").mkdir()
    (tmp_path / "matrix" / "w.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="needs two graphs named encoder and decoder"):
        load_matrix(tmp_path / "matrix" / "w.yaml")


def test_a_long_recording_is_cut_in_its_pauses_into_windows_of_at_most_30_seconds():
    rate, rng = runtime.SAMPLE_RATE, np.random.default_rng(0)
    # "words": bursts of noise 1.7-3.1 s long, 0.3 s pauses; 95 s in all
    words = [rng.normal(0, 0.1, int(rng.uniform(1.7, 3.1) * rate)).astype(np.float32) for _ in range(40)]
    audio, where = _speech_with_pauses(words, pause=0.3, lead=0.5)
    audio = audio[:95 * rate]
    cuts = runtime.windows(audio)
    assert cuts[0][0] == 0 and cuts[-1][1] == audio.size and len(cuts) == 4
    assert all(a == b for (_, a), (b, _) in itertools.pairwise(cuts))  # end to end, nothing dropped or repeated
    assert all(0 < b - a <= runtime.N_SAMPLES for a, b in cuts)
    for _, cut in cuts[:-1]:  # every cut in a pause, none in a word; in the window's last 10 s
        assert not any(s < cut < e for s, e in where), cut / rate
    assert all(b - a >= (30 - runtime.CUT_SEARCH_SECONDS) * rate for a, b in cuts[:-1])
    # Whisper's own timestamp-free rule (a cut every 30 s) would have cut words here
    assert any(s < k * runtime.N_SAMPLES < e for k in (1, 2, 3) for s, e in where)
    assert runtime.windows(audio[:runtime.N_SAMPLES]) == [(0, runtime.N_SAMPLES)]
    # just over 30 s: the last window is not a sliver (each window costs a whole encoder run)
    tail = runtime.windows(np.concatenate([words[0], np.zeros(30 * rate, np.float32)])[:30 * rate + 160])
    assert len(tail) == 2 and tail[1][1] - tail[1][0] >= runtime.MIN_TAIL_SECONDS * rate
    # no pause at all (constant noise, or silence): still windows of at most 30 s
    flat = runtime.windows(np.zeros(61 * rate, np.float32))
    assert len(flat) == 3 and all(b - a <= runtime.N_SAMPLES for a, b in flat) and flat[-1][1] == 61 * rate


def test_a_silent_window_is_dropped_without_running_the_model(tiny, tmp_path):
    root, _, _ = tiny
    model = runtime.Whisper(root / "exp", device="cpu")
    speech = runtime.read_wav(CLIPS / "compile.wav")
    alone = model.transcribe(speech, max_tokens=4)
    audio = np.concatenate([np.zeros(33 * runtime.SAMPLE_RATE, np.float32), speech])
    r = model.transcribe_long(audio, max_tokens=4)
    first, second = r.segments
    assert first.no_speech and first.text == "" and first.end > 29  # the silence: no encoder run
    assert not second.no_speech and second.end == pytest.approx(audio.size / runtime.SAMPLE_RATE)
    assert len(r.decoder_seconds) == len(alone.decoder_seconds)  # the model ran once: on the speech
    assert r.text == second.text
    assert runtime.segment_lines(r)[0] == f"[0.00 -> {first.end:.2f}] (no speech)"


def test_recordings_are_what_chips_transcribe_and_count_as_real_samples(tmp_path):
    """verify.recordings: pinned recorded speech with reference texts; the file names in the source label
    them, a text for a file the source does not have is refused naming it, and WER reads numbers spelled."""

    from ci_tools.errors import ConfigError
    from ci_tools.matrix.schema import load_matrix
    from ci_tools.recipes.whisper.check import verify_clips, wer
    from ci_tools.sources.store import sha256_file

    (tmp_path / "rec").mkdir()
    wav = Path(shutil.copy(CLIPS / "lights.wav", tmp_path / "rec" / "take1.wav"))
    model = yaml.safe_load((REPO / "matrix" / "whisper.yaml").read_text())["models"][0]
    model["verify"]["recordings"] = {
        "description": "a recording", "license": "CC0-1.0",
        "source": {"kind": "path", "path": "rec/take1.wav", "sha256": sha256_file(wav)},
        "texts": {"take1.wav": "Turn off the kitchen lights at 7 in the morning."}}
    path = tmp_path / "matrix" / "whisper.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": [model]}, sort_keys=False))
    loaded = load_matrix(path)
    clips, recorded = verify_clips(loaded, loaded.matrix.models[0], tmp_path / "cache")
    assert recorded and [c.name for c in clips] == ["take1.wav"] and clips[0].sha256 == sha256_file(wav)
    assert wer([(clips[0].text, "Turn off the kitchen lights at seven in the morning")]) == 0.0
    model["verify"]["recordings"]["texts"] = {"take2.wav": "x"}
    path.write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": [model]}, sort_keys=False))
    with pytest.raises(ConfigError, match=r"'take2\.wav' is not one of the recordings' source files"):
        load_matrix(path)
