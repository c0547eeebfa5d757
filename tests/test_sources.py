"""Model sources over real HTTP: a Hugging Face-compatible server (HF_ENDPOINT) and a plain URL."""

from __future__ import annotations

import functools
import hashlib
from http.server import SimpleHTTPRequestHandler

import pytest

from ci_tools.errors import SourceError
from ci_tools.matrix.schema import UrlSource
from ci_tools.sources.store import SourceStore
from tests.fakes.fake_hf import FakeHub
from tests.fakes.local_server import LocalServer
from tests.support.sources import _model


def test_hf_source_downloads_pinned_revision_and_checks_sha(tmp_path, onnx_bytes, monkeypatch):
    with FakeHub() as hub:
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", hub.url)
        monkeypatch.setattr("huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.url + "/{repo_id}/resolve/{revision}/{filename}")
        commit = hub.state.add_file("acme/vad", "m.onnx", onnx_bytes)
        sha = hashlib.sha256(onnx_bytes).hexdigest()
        store = SourceStore(tmp_path / "cache", tmp_path)
        files = store.fetch(_model({"kind": "hf", "repo": "acme/vad", "revision": commit, "files": {"m.onnx": sha}}))
        assert files["m.onnx"].read_bytes() == onnx_bytes and files["m.onnx"].name == sha
        # a warm cache holds that sha256, but only what named it is served from there: a wrong file name (or
        # revision) fails as it does on a fresh machine, never "found in the cache"
        with pytest.raises(SourceError, match=r"EntryNotFound|not found|404"):
            store.fetch(_model({"kind": "hf", "repo": "acme/vad", "revision": commit, "files": {"typo.onnx": sha}}))
        assert store.fetch(_model({"kind": "hf", "repo": "acme/vad", "revision": commit,
                                   "files": {"m.onnx": sha}}))["m.onnx"].name == sha
        # a corrupted download of the right size is refused after one fresh retry; nothing bad is stored
        hub.state.corrupt.add("m.onnx")
        store2 = SourceStore(tmp_path / "cache2", tmp_path)
        with pytest.raises(SourceError, match="does not match the pin"):
            store2.fetch(_model({"kind": "hf", "repo": "acme/vad", "revision": commit, "files": {"m.onnx": sha}}))
        assert not (tmp_path / "cache2" / "blobs" / sha).exists()
        gets = [p for m, p in hub.state.log if m == "GET" and p.endswith("/m.onnx")]
        assert len(gets) >= 2  # the cached bad copy was dropped and downloaded again
        with pytest.raises(SourceError, match=r"EntryNotFound|not found|404"):
            store2.fetch(_model({"kind": "hf", "repo": "acme/vad", "revision": commit,
                                 "files": {"missing.onnx": sha}}))


def test_url_source(tmp_path, onnx_bytes):
    served = tmp_path / "www"
    served.mkdir()
    (served / "m.onnx").write_bytes(onnx_bytes)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    with LocalServer(functools.partial(Quiet, directory=str(served))) as server:
        url = f"{server.url}/m.onnx"
        sha = hashlib.sha256(onnx_bytes).hexdigest()
        files = SourceStore(tmp_path / "c", tmp_path).fetch(_model({"kind": "url", "url": url, "sha256": sha}))
        assert files["m.onnx"].read_bytes() == onnx_bytes
        with pytest.raises(SourceError, match="does not match the pin"):
            SourceStore(tmp_path / "c2", tmp_path).fetch(_model({"kind": "url", "url": url, "sha256": "1" * 64}))
        with pytest.raises(SourceError, match="download failed"):
            SourceStore(tmp_path / "c3", tmp_path).fetch(_model({"kind": "url", "url": url + "x", "sha256": sha}))
    assert isinstance(_model({"kind": "url", "url": "https://x/y.onnx", "sha256": sha}).source, UrlSource)
