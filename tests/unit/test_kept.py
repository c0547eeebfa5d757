"""What a build keeps beside its output for package (#45): a prepared folder's graphs as hard links, their
weights as copies of their own (onnx refuses to read weights from a file with more than one hard link), nothing
else, and a folder that is current left alone."""

from __future__ import annotations

import json
from pathlib import Path

from ci_tools.builder.kept import is_current, keep, kept_graph, kept_licence
from ci_tools.prepare.graph import Prepared


def _prepared(root: Path, sha: str = "a" * 64) -> Prepared:
    folder = root / "cache" / "work" / "prepared" / "m" / "g" / "key"
    folder.mkdir(parents=True)
    (folder / "graph.onnx").write_bytes(b"graph")
    (folder / "graph.onnx.data").write_bytes(b"weights")
    (folder / "graph.w8a16.qdq.onnx").write_bytes(b"qdq")
    (folder / "convert.log").write_text("log")
    (folder / ".graph.quant.123.tmp").write_bytes(b"half")
    prep = Prepared.load_dict({"model": "m", "graph": "g", "path": str(folder / "graph.onnx"), "sha256": sha,
                               "source_sha256": "b" * 64, "inputs": [], "outputs": [], "parity": None, "seconds": 0.0})
    (folder / "prepared.json").write_text(json.dumps(prep.as_dict()))
    return prep


def test_the_graphs_are_kept_their_weights_copied_and_nothing_else(tmp_path):
    prep = _prepared(tmp_path)
    licence = tmp_path / "LICENSE"
    licence.write_text("MIT")
    out = tmp_path / "dist"
    keep(out, [prep], {"m": licence})
    kept = kept_graph(out, prep).parent
    assert sorted(p.name for p in kept.iterdir()) == ["graph.onnx", "graph.onnx.data", "graph.w8a16.qdq.onnx",
                                                      "prepared.json"]
    assert (kept / "graph.onnx").stat().st_ino == prep.path.stat().st_ino  # a link: no second copy
    assert (kept / "graph.onnx.data").stat().st_nlink == 1 and prep.path.with_suffix(".onnx.data").stat().st_nlink == 1
    assert kept_licence(out, "m").read_text() == "MIT" and is_current(out, prep)


def test_a_kept_folder_of_another_graph_is_not_taken_and_is_replaced(tmp_path):
    old = _prepared(tmp_path / "old", sha="c" * 64)
    out = tmp_path / "dist"
    keep(out, [old], {})
    new = _prepared(tmp_path / "new", sha="d" * 64)
    assert not is_current(out, new)  # package falls back to the cache rather than ship the old graph
    keep(out, [new], {})
    assert is_current(out, new)
    assert json.loads((kept_graph(out, new).parent / "prepared.json").read_text())["sha256"] == "d" * 64
