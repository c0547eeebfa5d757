"""Saying where the NPU is wrong: a parity failure names the first node whose output leaves CPU's, with the
numbers before and after, the known quirk and the declared fix (real compiles on the HTP emulator)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests import models
from tests.conftest import path_model, run_cli, write_matrix

pytest.importorskip("onnxruntime_qnn")


def _env(cache):
    return {**os.environ, "QNN_RELEASE_CACHE": str(cache)}


def test_a_parity_failure_names_the_first_divergent_node_and_its_fix(tmp_path):
    (tmp_path / "models").mkdir()
    f = models.upsampling_decoder(tmp_path / "models" / "dec.onnx")
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "dec", f, chips=["SM8750"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    assert t["status"] == "failed" and t["exit_code"] == 7, t
    # the relu before it agrees, the ConvTranspose is the first to leave CPU, and its fix is named
    assert "first divergent node: up (ConvTranspose" in t["error"], t["error"]
    assert "in 'hr' cosine 1.0" in t["error"] and "fixes: [convtranspose-output-padding]" in t["error"]
    assert "repeat the hunt: `qnn-release bisect" in t["error"] and "overflows above 65504" not in t["error"]
    b = t["bisect"]
    assert b["first"]["tensor"] == "u" and b["first"]["cosine"] < 0.9 and b["first"]["adjacent"]
    assert b["last_agreeing"]["tensor"] == "hr" and b["compiles"] == 1
    # the failed target keeps the sample and the command that repeats the hunt
    folder = out / "failed" / t["id"]
    sample = folder / "bisect" / "sample.npz"
    assert sample.is_file() and (folder / "bisect" / "bisect.json").is_file()
    with np.load(sample) as z:
        assert set(z.files) == {"x"}
    import shlex

    again = shlex.split(t["bisect_again"])  # the command the error gives, as a user pastes it
    assert again[:2] == ["qnn-release", "bisect"] and again[again.index("--sample") + 1] == str(sample)
    graph = again[2]
    r = run_cli(*again[1:])
    assert r.returncode == 7, r.stderr
    assert "first divergent node: up (ConvTranspose" in r.stdout and "DIFFERS" in r.stdout
    # two intermediates per compile: the conv and the output conv first, then the stretch between them
    r = run_cli("bisect", graph, "--soc", "SM8750", "--sample", str(sample), "--budget", "2")
    assert r.returncode == 7 and "2 probe compile(s), 4 of 4 intermediates" in r.stdout, r.stdout
    assert "first divergent node: up (ConvTranspose" in r.stdout

    # declared, the fix makes the same graph verify
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "dec", f, chips=["SM8750"], graphs=[
        {"name": "main", "file": "dec.onnx", "fixes": ["convtranspose-output-padding"]}])])
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 0, r.stderr
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    assert t["status"] == "ok" and t["verified"] and t["parity"]["cosine"] > 0.999


def test_bisect_on_a_graph_htp_computes_right_says_so(tmp_path):
    f = models.mlp(tmp_path / "mlp.onnx", dynamic_batch=False)
    r = run_cli("bisect", str(f), "--soc", "SM8750")
    assert r.returncode == 0, r.stderr
    assert "agrees with CPU" in r.stdout and "generated inputs" in r.stdout
    r = run_cli("bisect", str(tmp_path / "missing.onnx"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr
    for arrays, wanted in (({"y": np.zeros((1, 32), np.float32)}, "no array for input(s) x"),
                           ({"x": np.zeros((1, 5), np.float32)}, "input 'x' has shape [1, 5]")):
        np.savez(tmp_path / "bad.npz", **arrays)
        r = run_cli("bisect", str(f), "--sample", str(tmp_path / "bad.npz"))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and wanted in r.stderr, r.stderr
