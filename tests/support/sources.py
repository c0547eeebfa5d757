"""What tests/test_sources.py and tests/unit/test_sources.py share."""

from __future__ import annotations

from ci_tools.matrix.schema import Model
from tests.support import models


def _model(source) -> Model:
    return Model.model_validate({"name": "m", "description": "m", "license": "MIT", "source": source,
                                 "graphs": [{"name": "g", "file": "m.onnx"}], "chips": ["SM8750"]})


def make_onnx_bytes(tmp_path):
    return models.mlp(tmp_path / "m.onnx", dynamic_batch=False).read_bytes()
