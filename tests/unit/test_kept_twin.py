"""A twin as the build keeps it and package copies it (#45 item 2): its files in ``<out>/twins/<stem>/`` (graphs
linked, weights copied), its record beside them, written last; package archives exactly those, and refuses one
missing, failed, or of other graphs or another chip, in one line naming it, with the build as the fix."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from ci_tools.builder.twin import TwinOf, _keep, failed_twin, no_twin, twin_record
from ci_tools.errors import PackageError, QnnReleaseError
from ci_tools.release.twin import twin_archive


def _kept(tmp_path: Path) -> tuple[Path, dict]:
    graph, weights = tmp_path / "cache" / "graph.onnx", tmp_path / "cache" / "graph.onnx.data"
    graph.parent.mkdir()
    graph.write_bytes(b"graph")
    weights.write_bytes(b"weights")
    of = TwinOf(SimpleNamespace(name="m"), SimpleNamespace(name="SM8750"), tmp_path / "cache", tmp_path / "dist")
    values = {"model": "m", "kind": "float", "what": "w", "graphs": [
        {"name": "g", "file": "g/graph.onnx", "sha256": "a" * 64, "inputs": [], "outputs": [],
         "on_device_compile": {"not_measured": "here"}}]}
    _keep(of, "m-float-onnx", [("g/graph.onnx", graph), ("g/graph.onnx.data", weights),
                               ("sample/g/inputs/x.npy", b"npy")],
          {"values": values, "readme": "twin_readme.md.j2", "context": {}})
    return tmp_path / "dist", values


def test_the_build_keeps_the_twins_files_and_its_record_last(tmp_path):
    out, values = _kept(tmp_path)
    folder = out / "twins" / "m-float-onnx"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        "g/graph.onnx", "g/graph.onnx.data", "sample/g/inputs/x.npy"]
    assert (folder / "g" / "graph.onnx").stat().st_nlink == 2  # a link to the cache's graph: no second copy
    assert (folder / "g" / "graph.onnx.data").stat().st_nlink == 1  # weights: a copy of their own
    record = json.loads(twin_record(out, "m-float-onnx").read_text())
    assert record["values"] == values and record["soc"] == "SM8750" and record["files"][0] == "g/graph.onnx"
    assert not [p for p in (out / "twins").iterdir() if p.name.startswith(".")]  # no staging folder left


def test_package_archives_what_was_kept_and_nothing_else(tmp_path):
    out, values = _kept(tmp_path)
    model = SimpleNamespace(name="m", description="d", license="MIT")
    got = twin_archive(tmp_path, out, "m-float-onnx", {"model": model, "soc": "SM8750", "graphs": {"g": "a" * 64}},
                       b"licence")
    assert got is not None
    archive, shipped = got
    assert shipped == values
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        assert json.loads(tar.extractfile("m-float-onnx/twin.json").read()) == values  # type: ignore[union-attr]
    assert sorted(names) == [f"m-float-onnx/{n}" for n in ("LICENSE", "README.md", "g/graph.onnx", "g/graph.onnx.data",
                                                          "sample/g/inputs/x.npy", "twin.json")]


@pytest.mark.parametrize("change, words", [
    ("missing", "m-float-onnx: the build kept no twin"),
    ("failed", "the twin could not be run through the QNN EP"),
    ("other graph", "is not of this build's graphs for SM8750"),
    ("other chip", "is not of this build's graphs for SM8650"),
    ("file gone", "is gone from the twin the build kept"),
])
def test_package_refuses_a_twin_the_build_did_not_keep_whole(tmp_path, change, words):
    out, _ = _kept(tmp_path)
    expect = {"model": SimpleNamespace(name="m"), "soc": "SM8750", "graphs": {"g": "a" * 64}}
    if change == "missing":
        twin_record(out, "m-float-onnx").unlink()
    elif change == "failed":
        failed_twin(out, "m-float-onnx", "SM8750", QnnReleaseError("m: the twin could not be run through the QNN EP"))
    elif change == "other graph":
        expect["graphs"] = {"g": "b" * 64}
    elif change == "other chip":
        expect["soc"] = "SM8650"
    else:
        (out / "twins" / "m-float-onnx" / "g" / "graph.onnx").unlink()
    with pytest.raises(PackageError) as e:
        twin_archive(tmp_path, out, "m-float-onnx", expect, b"")
    assert words in e.value.message and "\n" not in e.value.message
    assert change == "failed" or "qnn-release build" in (e.value.hint or "")


def test_a_recipe_without_a_twin_ships_none(tmp_path):
    out, _ = _kept(tmp_path)
    no_twin(out, "m-float-onnx", "SM8750")
    assert not (out / "twins" / "m-float-onnx").exists()
    assert twin_archive(tmp_path, out, "m-float-onnx", {"model": None, "soc": "SM8750", "graphs": {}}, b"") is None
