"""Verification on real data: samples from pinned files through a front end, streams for stateful graphs,

The unit tier of tests/test_real_samples.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ci_tools.compile.verify import Judging, Runs, check_streams, judge
from ci_tools.errors import ConfigError
from ci_tools.matrix.schema import Thresholds
from tests.conftest import path_model
from tests.support import models
from tests.support.real_samples import TH, VAD_STREAM, _path_samples, _streams, _wav


def test_a_stream_with_htp_garbage_fails_naming_the_output_the_sample_and_the_step():
    cpu = _streams([0.01, 0.2, 0.9, 0.95, 0.3, 0.05])
    htp = _streams([0.01, 0.2, 0.9, 0.95, 0.3, 0.05])
    htp[3][0] = np.array([[-98304.01]], np.float32)  # what HTP's Pow(-0, 2) cascade made of silero-vad
    with pytest.raises(Exception) as e:
        check_streams("vad", ["output", "stateN"],
                      Runs([cpu], [htp], sample_names=["speech.wav"], emulator_seconds=0.01), TH,
                      Judging(stream=VAD_STREAM))
    msg = str(e.value)
    assert "output 'output'" in msg and "speech.wav step 3" in msg
    assert "outside [0, 1]" in msg and "beyond fp16" in msg


def test_one_ulp_above_one_is_in_range_and_decision_flips_count():
    probs = [0.1, 0.6, 0.9, 1.0, 0.4, 0.2] * 20
    cpu = _streams(probs)
    htp = _streams([float(np.nextafter(np.float32(p), np.float32(2))) for p in probs])  # HTP's +1 ulp
    v = check_streams("vad", ["output", "stateN"], Runs([cpu], [htp], sample_names=["a.wav"], emulator_seconds=0.01),
                      TH, Judging(stream=VAD_STREAM))
    assert v.per_output["output"]["decision_flips"] == 0 and v.samples == len(probs)
    assert "state_drift" in v.per_output["stateN"]
    flipped = _streams([0.49 if p == 0.6 else p for p in probs])  # 20 of 120 decisions at 0.5 differ
    with pytest.raises(Exception) as e:
        check_streams("vad", ["output", "stateN"],
                      Runs([cpu], [flipped], sample_names=["a.wav"], emulator_seconds=0.01),
                      Thresholds(max_abs=0.2), Judging(stream=VAD_STREAM))
    assert "20 of 120 decisions at 0.5 differ" in str(e.value)


def test_a_declared_state_drift_bound_fails_the_stream_that_drifts():
    probs = [0.1, 0.6, 0.9] * 10
    cpu, htp = _streams(probs), _streams(probs, state_scale=1.005)  # HTP's state 0.5 % off at every step
    v = check_streams("vad", ["output", "stateN"],
                      Runs([cpu, cpu], [cpu, htp], sample_names=["a.wav", "b.wav"], emulator_seconds=0.01),
                      TH, Judging(stream=VAD_STREAM))
    assert abs(v.per_output["stateN"]["state_drift"] - 0.0045) < 1e-5  # recorded, not judged
    bounded = VAD_STREAM.model_copy(update={"max_drift": {"stateN": 0.002}})
    with pytest.raises(Exception, match=r"carried state drifts 0.0045 from CPU by the end of b.wav"):
        check_streams("vad", ["output", "stateN"],
                      Runs([cpu, cpu], [cpu, htp], sample_names=["a.wav", "b.wav"], emulator_seconds=0.01),
                      TH, Judging(stream=bounded))
    per_stream = {(d["sample"], d["output"]) for d in v.per_sample}
    assert per_stream == {(a, b) for a in ("a.wav", "b.wav") for b in ("output", "stateN")}


def test_max_abs_is_no_pass_when_an_all_zero_output_would_pass_too():
    ref = np.full(16, 3.7e-4)  # a detector's map on generated inputs: its peak is below the tolerance
    assert judge(ref, np.zeros(16), Thresholds(min_cosine=0.999))["failures"]
    d = judge(ref, np.zeros(16), Thresholds(min_cosine=0.999, max_abs=1e-3))
    assert d["failures"] and "an all-zero output would pass too" in d["failures"][-1]
    ref = np.linspace(0, 1, 16)  # a real range: the tolerance is meaningful
    d = judge(ref, ref + 5e-4 * np.sign(np.sin(np.arange(16))), Thresholds(min_cosine=1.0, max_abs=1e-3))
    assert d["failures"] == [] and d["passed_by"] == "max_abs"


def test_prepare_rewrites_integer_powers_exactly(tmp_path):
    import onnx

    from ci_tools.matrix.schema import Graph, Model
    from ci_tools.prepare.graph import prepare, run_cpu

    f = models.rms_norm(tmp_path / "rms.onnx")
    m = Model.model_validate(path_model(tmp_path, "rms", f, chips=["SM8750"]))
    p = prepare(m, Graph(name="main", file="rms.onnx"), tmp_path, tmp_path / "work", "x" * 64)
    ops = {n.op_type for n in onnx.load(str(p.path)).graph.node}
    assert "Pow" not in ops and "Mul" in ops
    x = {"x": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    assert np.array_equal(run_cpu(p.path, [x])[0][0], run_cpu(f, [x])[0][0])  # bit-identical on CPU
    assert any("Pow(x, n)" in n for n in p.notes)


def test_audio_front_end_windows_with_context_and_resampling(tmp_path):
    from ci_tools.matrix.schema import AudioFrontEnd
    from ci_tools.sources.samples import audio_windows, read_wav, resample

    x = np.sin(np.arange(8000) / 8000 * 2 * np.pi * 440).astype(np.float32) * 0.5
    _wav(tmp_path / "a.wav", x, rate=8000)
    y, rate = read_wav(tmp_path / "a.wav", "a.wav")
    assert rate == 8000 and np.max(np.abs(y - x)) < 1e-4
    z = resample(y, 8000, 16000)
    assert len(z) == 16000 and abs(float(np.max(np.abs(z))) - 0.5) < 0.01
    fe = AudioFrontEnd(kind="audio", input="input", window=576, context=64)
    w = audio_windows(fe, z, 576)
    assert all(len(a) == 576 for a in w) and np.all(w[0][:64] == 0) and np.array_equal(w[1][:64], w[0][-64:])
    assert len(w) == 16000 // 512


def test_image_front_end_crops_keeps_the_ratio_pads_and_normalises_in_bgr(tmp_path):
    from PIL import Image

    from ci_tools.matrix.schema import Model
    from ci_tools.prepare.graph import TensorInfo
    from ci_tools.sources.samples import make_samples

    a = np.zeros((20, 100, 3), np.uint8)
    a[:, :, 0] = 255  # pure red
    a[:, 50:, 2] = 255  # right half: red + blue
    Image.fromarray(a).save(tmp_path / "line.png")
    model = Model.model_validate({**path_model(tmp_path, "ocr", tmp_path / "line.png", chips=["SM8750"]),
                                  "samples": {**_path_samples(tmp_path, ["line.png"], kind="image", input="x",
                                                              channels="bgr", resize="keep-ratio-pad",
                                                              mean=[0.5] * 3, std=[0.5] * 3, pad=-9.0,
                                                              crops={"line.png": [[0, 0, 40, 20], [50, 0, 100, 20]]})}})
    ss = make_samples(model, "main", [TensorInfo("x", [1, 3, 48, 320], "float32")], {"line.png": tmp_path / "line.png"})
    assert [n for n, _ in ss.streams] == ["line.png#0", "line.png#1"] and ss.note.startswith("real samples")
    first, second = (steps[0]["x"] for _, steps in ss.streams)
    assert first.shape == (1, 3, 48, 320)
    # 40x20 at height 48 keeps its ratio: 96 columns of image, then the pad value
    assert np.allclose(first[0, :, :, :96].mean(axis=(1, 2)), [-1, -1, 1]) and np.all(first[0, :, :, 97:] == -9.0)
    assert np.allclose(second[0, :, :, :100].mean(axis=(1, 2)), [1, -1, 1])  # B, G, R: blue came in
    with pytest.raises(Exception, match=r"not inside line\.png"):
        bad = model.samples.front_end.model_copy(update={"crops": {"line.png": [[0, 0, 200, 20]]}})
        make_samples(model.model_copy(update={"samples": model.samples.model_copy(update={"front_end": bad})}),
                     "main", [TensorInfo("x", [1, 3, 48, 320], "float32")], {"line.png": tmp_path / "line.png"})


def test_argmax_outputs_are_judged_by_the_class_they_pick():
    from ci_tools.compile.verify import Runs, check

    rng = np.random.default_rng(3)
    ref = [[rng.dirichlet(np.ones(6), size=(1, 40)).astype(np.float32)] for _ in range(2)]
    shifted = [[np.clip(r[0] + rng.normal(0, 0.05, r[0].shape), 0, 1).astype(np.float32)] for r in ref]
    keep = [r[0].argmax(-1) for r in ref]
    for s, k in zip(shifted, keep):  # probabilities move a lot, the picked class stays
        s[0][np.arange(1)[:, None], np.arange(40)[None], k] += 1.0
    th = Thresholds(min_cosine=0.999, min_snr_db=20.0)
    with pytest.raises(Exception, match="cosine"):
        check("rec", ["p"], Runs(ref, shifted, emulator_seconds=0.1), th)
    v = check("rec", ["p"], Runs(ref, shifted, emulator_seconds=0.1), th, how=Judging(argmax={"p": 0.05}))
    assert v.passed_by == "argmax" and v.per_output["p"]["argmax_flips"] == 0
    flipped = [[r[0][:, :, ::-1].copy()] for r in ref]  # another class almost everywhere
    with pytest.raises(Exception, match=r"positions pick another class than CPU .* worst sample"):
        check("rec", ["p"], Runs(ref, flipped, emulator_seconds=0.1), th, how=Judging(argmax={"p": 0.05}))


def test_a_route_without_an_emulator_session_runs_a_stream_one_step_per_run():
    """The qairt route runs qnn-net-run once per call: a stream goes through it step by step, the state fed
    back; a route with no emulator at all leaves the target unverified (None), never judged on nothing."""
    from ci_tools.compile.backends import Backend
    from ci_tools.compile.backends import NoEmulator as _NoEmulator
    from ci_tools.sources.samples import run_stream

    class NetRun(Backend):  # stands in for QairtBackend.run: one process per call, outputs of each feed
        calls = 0

        def run(self, job, result, feeds):
            NetRun.calls += 1
            (f,) = feeds
            return [[f["x"] * 2, f["state"] + 1]], 0.01

    steps = [{"x": np.full((1, 2), float(i), np.float32), "state": np.zeros((1, 2), np.float32)} for i in range(3)]
    with NetRun().stepper(None, None) as step:
        fed, outs = run_stream(step, steps, {"stateN": "state"}, ["y", "stateN"])
    assert [float(o[0][0, 0]) for o in outs] == [0.0, 2.0, 4.0]
    assert NetRun.calls == 3 and [float(f["state"][0, 0]) for f in fed] == [0.0, 1.0, 2.0]

    class NoEmulator(Backend):
        def run(self, job, result, feeds):
            return None

    with pytest.raises(_NoEmulator), NoEmulator().stepper(None, None) as step:
        step(steps[0])


def test_an_output_that_mixes_scales_is_judged_by_declared_slice_and_every_sample_is_kept():
    """A detector head [1, anchors, 4 box pixels + 2 class scores]: the boxes (hundreds of pixels) hide class
    scores that HTP got wrong when the output is judged whole; judged by slice, the scores fail, named."""
    from ci_tools.compile.verify import Runs, check
    from ci_tools.errors import VerifyError
    from ci_tools.matrix.schema import OutputSlice

    rng = np.random.default_rng(3)
    ref, got = [], []
    for _ in range(3):
        boxes = rng.uniform(0, 640, (1, 50, 4)).astype(np.float32)
        scores = rng.uniform(0, 1, (1, 50, 2)).astype(np.float32)
        ref.append([np.concatenate([boxes, scores], axis=-1)])
        got.append([np.concatenate([boxes + 0.05, 1 - scores], axis=-1)])  # the classes swapped
    th = Thresholds(min_cosine=0.999, min_snr_db=20.0)
    whole = check("det", ["output0"], Runs(ref, got, sample_names=["a.jpg", "b.jpg", "c.jpg"], emulator_seconds=0.1),
                  th)
    assert whole.per_output["output0"]["cosine"] > 0.999  # the boxes hide it
    assert [(d["sample"], d["output"]) for d in whole.per_sample] == [("a.jpg", "output0"), ("b.jpg", "output0"),
                                                                      ("c.jpg", "output0")]
    slices = {"output0": {"boxes": OutputSlice(stop=4), "scores": OutputSlice(start=4)}}
    with pytest.raises(VerifyError, match=r"output 'output0\[scores\]' differs from CPU on .\.jpg") as e:
        check("det", ["output0"], Runs(ref, got, sample_names=["a.jpg", "b.jpg", "c.jpg"], emulator_seconds=0.1), th,
              how=Judging(slices=slices))
    numbers = {(d["sample"], d["output"]): d for d in e.value.details["per_sample"]}
    assert len(numbers) == 6 and numbers[("b.jpg", "output0[boxes]")]["passed"]
    assert not numbers[("b.jpg", "output0[scores]")]["passed"] and numbers[("b.jpg", "output0[scores]")]["cosine"] < 0.9
    with pytest.raises(ConfigError, match=r"options.slices.output0.scores: .*outside the output's shape \[1, 50, 6\]"):
        check("det", ["output0"], Runs(ref, got, emulator_seconds=0.1), th,
              how=Judging(slices={"output0": {"scores": OutputSlice(start=6)}}))


def test_prescale_runs_a_layernorm_on_a_scaled_input_with_the_same_output(tmp_path):
    """The declared rewrite on a LayerNorm made of plain ops (mean, centre, square, variance, eps, sqrt, div)
    whose input also feeds a residual: the norm reads x / 32 (the residual still reads x), eps is / 1024, and
    the output on CPU is the same; the squares that overflowed fp16 stay in range."""
    import onnx

    from ci_tools.prepare.fp16_range import scan
    from ci_tools.prepare.graph import run_cpu
    from ci_tools.prepare.prescale import apply, find_norms, offer

    f = models.layer_norm(tmp_path / "ln.onnx")
    m = onnx.load(str(f))
    (norm,) = find_norms(m)
    assert norm.kind == "layernorm" and norm.x == "x" and {"square", "variance", "normalise"} <= norm.nodes
    feeds = [{"x": (np.random.default_rng(i).standard_normal((1, 4, 64)) * 600).astype(np.float32)} for i in range(3)]
    first = scan(f, feeds, ["a", "b", "c"])[0]
    assert first.node == "square" and first.value > 65504
    assert offer(m, first.node, first.value) == ("x", 32)
    notes = apply(m, {"x": 32}, "ln/main")
    assert "layernorm of 'x' now runs on x / 32 with eps / 1024" in notes[0]
    onnx.checker.check_model(m)
    onnx.save(m, str(tmp_path / "scaled.onnx"))
    before, after = run_cpu(f, feeds), run_cpu(tmp_path / "scaled.onnx", feeds)
    assert all(np.allclose(a[0], b[0], rtol=1e-4, atol=1e-3) for a, b in zip(before, after))
    assert not scan(tmp_path / "scaled.onnx", feeds, ["a", "b", "c"])
    residual = next(n for n in m.graph.node if n.name == "residual")
    assert list(residual.input) == ["b", "x"]


def test_the_range_check_watches_what_shape_inference_cannot_type(tmp_path):
    """After a contrib op (com.microsoft Gelu) ONNX shape inference types nothing; the squares that overflow
    fp16 there are still found and named."""
    import onnx
    from onnx import TensorProto, helper

    from ci_tools.prepare.fp16_range import scan

    nodes = [helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft", name="gelu"),
             helper.make_node("Mul", ["g", "g"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq"], ["y"], keepdims=1, name="mean")]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    assert not onnx.shape_inference.infer_shapes(m).graph.value_info  # nothing typed
    onnx.save(m, str(tmp_path / "g.onnx"))
    found = scan(tmp_path / "g.onnx", [{"x": np.full((1, 8), 300, np.float32)}], ["loud.npz"])
    assert [(f.node, f.kind, f.sample) for f in found] == [("square", "overflow", "loud.npz"),
                                                           ("mean", "overflow", "loud.npz")]
    assert found[0].path == ["square", "mean", "output 'y'"]


def test_every_samples_numbers_agree_with_the_verdict_of_an_argmax_output():
    """An output judged by the class it picks: its per-sample record passes or fails by that, not by cosine."""
    from ci_tools.compile.verify import Runs, check

    ref = [[np.array([[[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]], np.float32)] for _ in range(2)]
    got = [[np.array([[[0.4, 0.6], [0.6, 0.4], [0.45, 0.55]]], np.float32)] for _ in range(2)]  # same classes
    v = check("rec", ["probs"], Runs(ref, got, sample_names=["a.png", "b.png"], emulator_seconds=0.1),
              Thresholds(min_cosine=0.999), how=Judging(argmax={"probs": 0.05}))
    assert v.passed_by == "argmax"
    assert [(d["sample"], d["passed"], d["judged_by"], d["flip_rate"]) for d in v.per_sample] == [
        ("a.png", True, "argmax", 0.0), ("b.png", True, "argmax", 0.0)]


def test_a_route_that_cannot_carry_state_in_one_process_carries_the_first_steps_and_batches_the_rest():
    """qnn-net-run cannot feed an output back as the next input: past ``carried_steps`` a stream's steps run in
    ONE process fed the state CPU carried into them (1 + streams x carried processes, not one per step); every
    step's outputs are judged, and the drift is judged after the carried steps, where the emulator's own state
    stops."""
    from types import SimpleNamespace

    from ci_tools.compile.backends import Backend
    from ci_tools.compile.target_job import _run_streams, carried_note
    from ci_tools.matrix.schema import Stream
    from ci_tools.sources.samples import run_stream

    class NetRun(Backend):  # a state update 1 % too large, as an fp16 recurrence may compute it
        name, carried_steps, calls = "qairt", 4, []

        def run(self, job, result, feeds):
            NetRun.calls.append(len(feeds))
            return [[f["x"] * 2, f["state"] * 1.01 + 1] for f in feeds], 0.01

    def cpu(f):
        return [f["x"] * 2, f["state"] + 1]

    stream = Stream(carry={"stateN": "state"}, max_drift={"stateN": 0.05})
    steps = [{"x": np.full((1, 2), float(i), np.float32), "state": np.zeros((1, 2), np.float32)} for i in range(10)]
    ss = SimpleNamespace(streams=[("a.npz", steps), ("b.npz", steps[:3])], stream=stream)
    ran = [run_stream(cpu, st, stream.carry, ["y", "stateN"]) for _, st in ss.streams]
    compiled, carried = _run_streams(NetRun(), None, None, ss, [fed for fed, _ in ran], ["y", "stateN"])
    assert NetRun.calls == [1] * 4 + [1] * 3 + [6]  # a.npz carried 4 steps, b.npz whole, a's last 6 in one run
    assert carried == {"a.npz": 4} and [len(c) for c in compiled] == [10, 3]
    # the batched steps were fed CPU's state (step 9: 9 -> 9 * 1.01 + 1), not the emulator's own
    assert abs(float(compiled[0][9][1][0, 0]) - (9 * 1.01 + 1)) < 1e-5
    reference = [outs for _, outs in ran]
    with pytest.raises(Exception, match=r"drifts 0.06\d* from CPU after step 4 of a.npz"):
        check_streams("rnn", ["y", "stateN"],
                      Runs(reference, compiled, sample_names=["a.npz", "b.npz"], emulator_seconds=0.01),
                      TH, Judging(stream=stream, carried=carried))
    v = check_streams("rnn", ["y", "stateN"],
                      Runs(reference, compiled, sample_names=["a.npz", "b.npz"], emulator_seconds=0.01),
                      TH,
                      Judging(stream=stream.model_copy(update={"max_drift": {}}), carried=carried))
    assert v.samples == 13 and v.per_output["stateN"]["state_drift_after_steps"] == 4
    assert "first 4 steps" in carried_note(NetRun(), ss) and carried_note(NetRun(), SimpleNamespace(
        streams=[("b.npz", steps[:3])], stream=stream)) == ""
