"""What tests/test_parts_source.py and tests/unit/test_parts_source.py share."""

from __future__ import annotations

import hashlib

import yaml

from tests.conftest import SDK_SECTION


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def make_parts(tmp_path):
    """A 'model' split in two: part 1 in the repository (path source), part 2 behind a URL."""
    whole = bytes(range(256)) * 4001
    a, b = whole[:600_000], whole[600_000:]
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.bin.part1").write_bytes(a)
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "model.bin.part2").write_bytes(b)
    return tmp_path, whole, a, b


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
