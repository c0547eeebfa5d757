"""What tests/test_prepare.py and tests/unit/test_prepare.py share."""

from __future__ import annotations

from ci_tools.matrix.schema import load_matrix
from ci_tools.prepare.graph import prepare
from ci_tools.sources.store import SourceStore


def _prepare(matrix_path, cache, name="m"):
    loaded = load_matrix(matrix_path)
    model = loaded.matrix.model(name)
    store = SourceStore(cache, loaded.root)
    src = store.materialize(model, cache / "src" / name)
    return [prepare(model, g, src, cache / "prepared", "test") for g in model.graphs]
