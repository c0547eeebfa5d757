"""Real samples drive prepare's check and inspect (#40 item 4), and a padded sample that makes CPU NaN never
passes (#40 item 1): an index input whose generated values go past its table, and a masked mean whose padded
sample divides 0 by 0."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models
from tests.test_real_samples import _path_samples

pytestmark = pytest.mark.emulator


def _build(tmp_path, model):
    matrix = write_matrix(tmp_path, [model])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    return r, json.loads((out / "build-report.json").read_text())["targets"][0]


def test_an_index_input_builds_from_its_real_samples_and_inspect_takes_samples_or_ranges(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    (tmp_path / "models").mkdir()
    f = models.indexed_rows(tmp_path / "models" / "rows.onnx")
    # inspect on generated values: prepare cannot run, and inspect says so with a non-zero exit
    r = run_cli("inspect", str(f), "--soc", "SM8750")
    assert r.returncode == 5 and "prepare:" in r.stdout and "HTP takes" not in r.stdout, r.stdout + r.stderr
    assert "--range" in r.stdout or "range" in r.stdout
    # --range gives the input its valid values: the HTP row is shown, and the entry carries the range
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--range", "ids=0,4", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["prepare"]["ok"] and report["htp"][0]["ok"]
    assert report["suggested_graph"]["inputs"]["ids"]["range"] == [0.0, 4.0]
    # --samples: prepare's check runs on them
    folder = tmp_path / "samples"
    folder.mkdir()
    for i, ids in enumerate(([[0, 1, 3]], [[2, 2, 1]])):
        np.savez(folder / f"s{i}.npz", ids=np.array(ids, dtype=np.int64))
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--samples", str(folder))
    assert r.returncode == 0 and "HTP takes all" in r.stdout, r.stdout + r.stderr
    # the build: its real samples drive prepare's check (the generated values once failed it)
    (tmp_path / "s.npz").write_bytes((folder / "s0.npz").read_bytes())
    model = path_model(tmp_path, "rows", f, chips=["SM8750"], samples=_path_samples(tmp_path, ["s.npz"]))
    r, t = _build(tmp_path, model)
    assert r.returncode == 0, r.stdout + r.stderr
    assert t["status"] == "ok" and t["verified_on"] == "real-samples"


def test_a_padded_sample_that_makes_cpu_nan_fails_naming_it(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    (tmp_path / "models").mkdir()
    f = models.masked_mean(tmp_path / "models" / "masked.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "padded.npz", x=np.zeros((1, 16, 8), np.float32), mask=np.zeros((1, 16), np.float32))
    np.savez(tmp_path / "speech.npz", x=rng.standard_normal((1, 16, 8)).astype(np.float32),
             mask=np.ones((1, 16), np.float32))
    model = path_model(tmp_path, "masked", f, chips=["SM8750"],
                       samples=_path_samples(tmp_path, ["speech.npz", "padded.npz"]))
    r, t = _build(tmp_path, model)
    assert r.returncode == 8 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert t["status"] == "failed" and "cos 1.0" not in r.stdout
    assert "CPU itself answers NaN/Inf (8 value(s)) on padded.npz" in t["error"], t["error"]
    # what package would ship: nothing (a failed target is never packaged)
    r = run_cli("package", "--out", str(tmp_path / "dist"), "--require-verified",
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    assert r.returncode != 0
