"""Verification on real data: samples from pinned files through a front end, streams for stateful graphs,
the fp16 range check before any chip, honest verdicts, and a cache that re-verifies when samples change."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from ci_tools.errors import ConfigError
from tests.conftest import REPO, path_model, run_cli, write_matrix
from tests.support import models
from tests.support.real_samples import _path_samples, _wav


def _npz_samples(folder, scale: float, n: int = 3):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    for i in range(n):
        np.savez(folder / f"s{i}.npz", x=(rng.standard_normal((1, 64)) * scale).astype(np.float32))


def _build(tmp_path, model, *extra):
    matrix = write_matrix(tmp_path, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), *extra,
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    return r, json.loads((out / "build-report.json").read_text())["targets"][0]


@pytest.mark.emulator
def test_adding_real_samples_reverifies_and_fp16_overflow_is_named_before_any_chip(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    (tmp_path / "models").mkdir()
    f = models.rms_norm(tmp_path / "models" / "rms.onnx")
    base = path_model(tmp_path, "rms", f, chips=["SM8750"])
    r, t = _build(tmp_path, base)  # generated [-1, 1): squares stay small, HTP agrees
    assert r.returncode == 0, t.get("error")
    assert t["verified_on"] == "generated-inputs" and "generated only" in r.stdout
    env = {**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")}
    r = run_cli("package", "--matrix", str(tmp_path / "matrix" / "models.yaml"), "--out", str(tmp_path / "dist"),
                "--require-verified", env=env)
    assert r.returncode == 9 and "rms verified on generated inputs only" in r.stderr
    assert "generated_inputs_ok" in r.stderr

    _npz_samples(tmp_path / "samples", scale=400.0)  # real activations of a few hundred: mean of squares 1.6e5
    files = [f"samples/s{i}.npz" for i in range(3)]
    r, t = _build(tmp_path, {**base, "samples": _path_samples(tmp_path, files)})
    assert r.returncode == 8 and t["status"] == "failed", "new samples must re-verify, never come back cached"
    assert "fp16 refused" in t["error"] and "mean_of_squares" in t["error"] and "beyond fp16's 65504" in t["error"]
    assert "options.fp16_overflow_ok" in t["error"] and t["fp16_range"][0]["path"][-1] == "output 'y'"
    r, t = _build(tmp_path, {**base, "samples": _path_samples(tmp_path, files)})  # and again: still failed
    assert r.returncode == 8 and t["status"] == "failed"
    assert not (tmp_path / "dist" / "rms.main.sm8750.fp16" / "target.json").exists(), "a failed target looks built"

    # the offered rewrite: the norm on x / 16 with eps / 256, the same output on CPU, squares 256x smaller
    assert "normalisation of 'x': add `prescale: {x: 16}` to graph 'main'" in r.stderr
    graphs = [{"name": "main", "file": "rms.onnx", "prescale": {"x": 16}}]
    r, t = _build(tmp_path, {**base, "graphs": graphs, "samples": _path_samples(tmp_path, files)})
    assert r.returncode == 0, t.get("error")
    assert t["verified_on"] == "real-samples" and t["parity"]["cosine"] > 0.999
    graphs[0]["prescale"] = {"y": 4.0}
    r, t = _build(tmp_path, {**base, "graphs": graphs, "samples": _path_samples(tmp_path, files)})
    assert r.returncode != 0 and "prescale: 'y' is not the input of a LayerNorm or RMSNorm" in t["error"]
    assert "the normalised tensors of this graph: x" in r.stderr + json.dumps(t)

    _npz_samples(tmp_path / "samples", scale=1.0)  # samples in range: verified on real samples
    r, t = _build(tmp_path, {**base, "samples": _path_samples(tmp_path, files)})
    assert r.returncode == 0, t.get("error")
    assert t["verified_on"] == "real-samples" and t["verify_samples"] == 3 and "real samples" in r.stdout


WRITE_AUDIO = """
import sys, numpy as np, soundfile
x = (np.sin(np.arange(4000) / 7) * 0.5).astype(np.float32)
for name, fmt, subtype in (("ext24.wav", "WAVEX", "PCM_24"), ("pcm8.wav", "WAV", "PCM_U8"),
                           ("float.wav", "WAV", "FLOAT"), ("double.wav", "WAV", "DOUBLE"),
                           ("speech.flac", "FLAC", "PCM_16"), ("speech.ogg", "OGG", "VORBIS")):
    soundfile.write(sys.argv[1] + "/" + name, x, 16000, format=fmt, subtype=subtype)
soundfile.write(sys.argv[1] + "/stereo.wav", np.stack([x, -x / 2], axis=1), 16000, format="WAVEX", subtype="PCM_16")
"""


def test_audio_reader_takes_what_recorders_write(tmp_path):
    """WAVE_FORMAT_EXTENSIBLE (sox/ffmpeg's 24-bit and multichannel WAV), FLAC, Ogg, float and 8-bit WAV, stereo
    averaged; a file nothing can decode is one line naming it, with the fix. (The files are written by libsndfile
    in a fresh process: an xdist worker may hold libQnnHtp.so, whose libffi breaks cffi; see
    ci_tools/sources/audio.py.)"""
    import subprocess
    import sys

    from ci_tools.sources.samples import read_wav

    subprocess.run([sys.executable, "-c", WRITE_AUDIO, str(tmp_path)], check=True)
    x = (np.sin(np.arange(4000) / 7) * 0.5).astype(np.float32)
    for name, tol in {"ext24.wav": 1e-6, "pcm8.wav": 1e-2, "float.wav": 0.0, "double.wav": 1e-7,
                      "speech.flac": 1e-4, "speech.ogg": 0.05}.items():
        y, rate = read_wav(tmp_path / name, name)
        assert rate == 16000 and y.dtype == np.float32 and len(y) == len(x) and np.max(np.abs(y - x)) <= tol, name
    assert (tmp_path / "ext24.wav").read_bytes()[20:22] == b"\xfe\xff"  # the format tag of EXTENSIBLE
    y, _ = read_wav(tmp_path / "stereo.wav", "stereo.wav")
    assert np.max(np.abs(y - x / 4)) < 1e-4
    (tmp_path / "notes.wav").write_text("not audio")
    with pytest.raises(ConfigError, match=r"^samples: notes.wav: not a recording libsndfile reads") as e:
        read_wav(tmp_path / "notes.wav", "samples: notes.wav")
    assert "sox notes.wav out.wav" in e.value.hint and str(tmp_path) not in str(e.value)
    (tmp_path / "cut.wav").write_bytes((tmp_path / "float.wav").read_bytes()[:40])
    with pytest.raises(ConfigError, match=r"cut.wav: a WAV file without a data chunk"):
        read_wav(tmp_path / "cut.wav", "samples: cut.wav")


@pytest.mark.network
def test_demo_vad_streams_recorded_speech_and_a_fixed_graph_passes(tmp_path, cache_dir):
    """The demo's silero-vad, streamed over a committed speech clip on which the unrewritten graph gives
    -98304 on HTP (compile.wav step 20): the build verifies it on real samples, with no value outside [0, 1]."""
    pytest.importorskip("onnxruntime_qnn")
    import yaml

    demo = yaml.safe_load((REPO / "matrix" / "models.yaml").read_text())
    vad = next(m for m in demo["models"] if m["name"] == "silero-vad")
    shutil.copy(REPO / "clips" / "whisper" / "compile.wav", tmp_path / "compile.wav")
    vad["samples"] = {**vad["samples"], **_path_samples(tmp_path, ["compile.wav"], **vad["samples"]["front_end"]),
                      "stream": vad["samples"]["stream"]}
    vad["chips"] = ["SM8550"]
    matrix = write_matrix(tmp_path, [vad])
    r = run_cli("build", "--matrix", str(matrix), "--out", str(tmp_path / "dist"),
                env={**os.environ, "QNN_RELEASE_CACHE": str(cache_dir)})
    t = json.loads((tmp_path / "dist" / "build-report.json").read_text())["targets"][0]
    assert r.returncode == 0, t.get("error")
    out = t["per_output"]["output"]
    assert t["verified_on"] == "real-samples" and "outside_range" not in out and out["decision_flips"] == 0
    assert out["worst_step"]["max_abs"] < 0.03 and t["verify_samples"] > 100


def test_inspect_names_the_nodes_that_leave_fp16_range_on_real_samples(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    f = models.rms_norm(tmp_path / "rms.onnx")
    _npz_samples(tmp_path / "s", scale=400.0, n=2)
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--samples", str(tmp_path / "s"), "--json")
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)["fp16_range"]["findings"]
    assert found[0]["node"] == "square" and found[0]["kind"] == "overflow" and found[0]["path"][-1] == "output 'y'"
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--samples", str(tmp_path / "nowhere"))
    assert r.returncode != 0 and "--samples" in r.stderr and "Traceback" not in r.stderr


def test_sample_mistakes_are_one_line_errors_on_their_model_and_never_switch_a_check_off(tmp_path):
    """A misspelt front-end input, carried output or range, an empty recording: each fails its model's targets
    with a line naming the key, the build goes on and writes its report."""
    pytest.importorskip("onnxruntime_qnn")
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    _npz_samples(tmp_path / "s", scale=1.0, n=1)
    base = path_model(tmp_path, "m", f, chips=["SM8750"])
    r, t = _build(tmp_path, {**base, "samples": {**_path_samples(tmp_path, ["s/s0.npz"]),
                                                 "front_end": {"kind": "image", "input": "pixels"}}})
    assert r.returncode == 8 and "samples feed no graph: no graph has the input 'pixels'" in t["error"]
    assert "Traceback" not in r.stderr
    r, t = _build(tmp_path, {**base, "samples": {**_path_samples(tmp_path, ["s/s0.npz"]), "argmax": {"yy": 0.1}}})
    assert r.returncode == 8 and "samples.argmax: no graph has the output 'yy'" in t["error"]
    _wav(tmp_path / "empty.wav", np.zeros(0, np.float32), rate=8000)
    audio = _path_samples(tmp_path, ["empty.wav"], kind="audio", input="x", window=32)
    r, t = _build(tmp_path, {**base, "samples": audio})
    assert r.returncode == 8 and "empty.wav: the recording holds no samples" in t["error"]


def test_slices_name_an_output_of_the_model(tmp_path):
    model = path_model(tmp_path, "mlp", models.mlp(tmp_path / "mlp.onnx", dynamic_batch=False), chips=["SM8750"])
    model["options"] = {"slices": {"nope": {"a": {"stop": 2}}}}
    r = run_cli("build", "--matrix", str(write_matrix(tmp_path, [model])), "--out", str(tmp_path / "dist"))
    t = json.loads((tmp_path / "dist" / "build-report.json").read_text())["targets"][0]
    assert r.returncode != 0 and "options.slices: no graph has the output 'nope'" in t["error"]


@pytest.mark.emulator
def test_feature_streams_run_many_steps_and_each_graph_takes_its_own_samples(tmp_path):
    """A stateful model over feature frames: one .npz per stream, the features [steps, 1, F], the carried state left
    out; every step runs with the state the previous one gave, and the drift at each stream's end is judged. The
    same model's other graph (a plain MLP) takes its own samples from a second entry."""
    pytest.importorskip("onnxruntime_qnn")
    (tmp_path / "models").mkdir()
    models.feature_rnn(tmp_path / "models" / "rnn.onnx")
    models.mlp(tmp_path / "models" / "head.onnx", dynamic_batch=False)
    rng = np.random.default_rng(5)
    (tmp_path / "feats").mkdir()
    for i in range(2):
        np.savez(tmp_path / "feats" / f"utt{i}.npz", feat=rng.standard_normal((30, 1, 8)).astype(np.float32))
    (tmp_path / "xs").mkdir()
    for i in range(2):  # the MLP takes x [1, 32]
        np.savez(tmp_path / "xs" / f"s{i}.npz", x=rng.uniform(-1, 1, (1, 32)).astype(np.float32))
    from ci_tools.sources.store import sha256_file

    parts = [{"kind": "path", "path": f"models/{f}", "sha256": sha256_file(tmp_path / "models" / f)}
             for f in ("rnn.onnx", "head.onnx")]
    model = path_model(tmp_path, "kws", tmp_path / "models" / "rnn.onnx", chips=["SM8750"], graphs=[
        {"name": "step", "file": "rnn.onnx"}, {"name": "head", "file": "head.onnx"}])
    model["source"] = {"kind": "parts", "sources": parts}
    feats = _path_samples(tmp_path, ["feats/utt0.npz", "feats/utt1.npz"])
    model["samples"] = [{**feats, "graphs": ["step"], "description": "log-mel frames",
                         "stream": {"carry": {"state_out": "state"}, "range": {"prob": [0, 1]},
                                    "max_drift": {"state_out": 0.05}}},
                        {**_path_samples(tmp_path, ["xs/s0.npz", "xs/s1.npz"]), "graphs": ["head"],
                         "description": "head inputs"}]
    matrix = write_matrix(tmp_path, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    targets = {t["graph"]: t for t in json.loads((out / "build-report.json").read_text())["targets"]}
    step, head = targets["step"], targets["head"]
    assert step["verified_on"] == head["verified_on"] == "real-samples"
    assert step["verify_samples"] == 60 and "2 streams, 60 steps" in step["verify_inputs"], step["verify_inputs"]
    assert "log-mel frames" in step["verify_inputs"] and "head inputs" in head["verify_inputs"]
    assert step["per_output"]["state_out"]["state_drift"] > 0  # judged after 30 steps, not after one
    assert head["verify_samples"] == 2


def test_a_samples_list_names_each_entrys_graphs_once(tmp_path):
    from ci_tools.matrix.schema import load_matrix

    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    _npz_samples(tmp_path / "xs", scale=1.0, n=1)
    block = _path_samples(tmp_path, ["xs/s0.npz"])
    for samples, wanted in (([block], "each entry of a samples list names the graphs it feeds"),
                            ([{**block, "graphs": ["main"]}, {**block, "graphs": ["main"]}],
                             "graph 'main' is fed by samples[0] already"),
                            ([{**block, "graphs": ["mian"]}], "the model has no graph 'mian'")):
        matrix = write_matrix(tmp_path, [{**path_model(tmp_path, "m", f, chips=["SM8750"]), "samples": samples}])
        with pytest.raises(ConfigError, match=wanted.replace("[", r"\[")):
            load_matrix(matrix)
