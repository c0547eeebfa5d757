"""What tests/test_guards.py and tests/unit/test_guards.py share."""

from __future__ import annotations

from ci_tools.matrix.schema import load_matrix
from ci_tools.prepare.graph import prepare
from ci_tools.sources.store import SourceStore
from tests.conftest import path_model, write_matrix


def _prepared(tmp_path, onnx_file, name="m", **extra):
    matrix = write_matrix(tmp_path, [path_model(tmp_path, name, onnx_file, **{"chips": ["SM8750"], **extra})])
    loaded = load_matrix(matrix)
    model = loaded.matrix.model(name)
    src = SourceStore(tmp_path / "c", loaded.root).materialize(model, tmp_path / "c" / "src")
    return loaded, model, prepare(model, model.graphs[0], src, tmp_path / "c" / "prepared", "t")
