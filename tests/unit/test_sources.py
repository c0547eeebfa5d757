"""Model sources over real HTTP: a Hugging Face-compatible server (HF_ENDPOINT) and a plain URL.

The unit tier of tests/test_sources.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import hashlib

import pytest

from ci_tools.errors import SourceError
from ci_tools.sources.store import SourceStore
from tests.support.sources import _model


def test_a_file_the_matrix_no_longer_names_is_gone_from_the_source_folder(tmp_path, onnx_bytes):
    """Files an earlier matrix laid out (a renamed graph) are not there for a graph to find by accident."""
    (tmp_path / "m.onnx").write_bytes(onnx_bytes)
    sha = hashlib.sha256(onnx_bytes).hexdigest()
    store = SourceStore(tmp_path / "cache", tmp_path)
    dest = tmp_path / "work" / "src" / "m"
    (dest / "old").mkdir(parents=True)
    (dest / "old" / "m_v1.onnx").write_bytes(b"from an earlier matrix")
    store.materialize(_model({"kind": "path", "path": "m.onnx", "sha256": sha}), dest)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == ["m.onnx"]
    (tmp_path / "m.onnx").write_bytes(onnx_bytes + b"changed")  # the committed file changed, its pin did not
    with pytest.raises(SourceError, match=r"m\.onnx: sha256 .* does not match the pin"):
        store.fetch(_model({"kind": "path", "path": "m.onnx", "sha256": sha}))
