"""Sources made of parts: a file is the concatenation of files of several pinned sources."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from http.server import SimpleHTTPRequestHandler

import pytest
import yaml

from ci_tools.errors import SourceError
from ci_tools.matrix.schema import load_matrix
from ci_tools.sources.store import SourceStore
from tests.conftest import SDK_SECTION, run_cli
from tests.fakes.local_server import LocalServer


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def parts(tmp_path):
    """A 'model' split in two: part 1 in the repository (path source), part 2 behind a URL."""
    whole = bytes(range(256)) * 4001
    a, b = whole[:600_000], whole[600_000:]
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.bin.part1").write_bytes(a)
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "model.bin.part2").write_bytes(b)
    return tmp_path, whole, a, b


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def _matrix(repo, url, a, b, whole, order=("weights/model.bin.part1", "model.bin.part2"), **extra):
    # `path` sources are named by their file name; the parts are those names
    names = [o.rsplit("/", 1)[-1] for o in order]
    model = {"name": "m", "description": "m", "license": "MIT",
             "source": {"kind": "parts", "sources": [
                 {"kind": "path", "path": "weights/model.bin.part1", "sha256": _sha(a)},
                 {"kind": "url", "url": url, "sha256": _sha(b)}],
                 "join": {"model.bin": {"parts": names, "sha256": _sha(whole)}}},
             "graphs": [{"name": "g", "file": "model.bin"}], "chips": ["SM8750"], **extra}
    path = repo / "matrix" / "models.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": [model]}, sort_keys=False))
    return path


def test_parts_are_fetched_pinned_joined_and_pinned_again(parts):
    repo, whole, a, b = parts
    with LocalServer(functools.partial(_Quiet, directory=str(repo / "www"))) as server:
        loaded = load_matrix(_matrix(repo, f"{server.url}/model.bin.part2", a, b, whole))
        store = SourceStore(repo / "cache", loaded.root)
        files = store.fetch(loaded.matrix.models[0])
        assert set(files) == {"model.bin"}  # the parts are consumed by the join
        assert files["model.bin"].read_bytes() == whole and files["model.bin"].name == _sha(whole)
        folder = store.materialize(loaded.matrix.models[0], repo / "src")
        assert (folder / "model.bin").read_bytes() == whole
    # the joined file is in the store: no part is downloaded again (the server is gone)
    assert SourceStore(repo / "cache", loaded.root).fetch(loaded.matrix.models[0])["model.bin"].read_bytes() == whole


def test_wrong_part_order_is_one_line_naming_the_order(parts):
    repo, whole, a, b = parts
    with LocalServer(functools.partial(_Quiet, directory=str(repo / "www"))) as server:
        matrix = _matrix(repo, f"{server.url}/model.bin.part2", a, b, whole,
                         order=("model.bin.part2", "weights/model.bin.part1"))
        with pytest.raises(SourceError, match=r"join to sha256 .* not the pin .*order of join.parts") as e:
            SourceStore(repo / "cache", repo).fetch(load_matrix(matrix).matrix.models[0])
        assert "\n" not in str(e.value)
        assert not list((repo / "cache" / "blobs").glob(_sha(whole)))
        # and through the CLI: the model fails with exit code 4 in the report, no traceback
        r = run_cli("build", "--matrix", str(matrix), "--out", str(repo / "dist"),
                    env={**os.environ, "QNN_RELEASE_CACHE": str(repo / "cache2")})
    assert r.returncode == 8, r.stderr
    assert "Traceback" not in r.stderr and "order of join.parts" in r.stdout
    (target,) = json.loads((repo / "dist" / "build-report.json").read_text())["targets"]
    assert target["exit_code"] == 4
