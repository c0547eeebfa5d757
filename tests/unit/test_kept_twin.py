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

BUILD = "2026-12-06T12:00:00+00:00"  # the build's report's ``started``


def _of(out: Path) -> TwinOf:
    return TwinOf(SimpleNamespace(name="m"), SimpleNamespace(name="SM8750"), out.parent / "cache", out, BUILD)


def _kept(tmp_path: Path) -> tuple[Path, dict]:
    graph, weights = tmp_path / "cache" / "graph.onnx", tmp_path / "cache" / "graph.onnx.data"
    graph.parent.mkdir()
    graph.write_bytes(b"graph")
    weights.write_bytes(b"weights")
    of = _of(tmp_path / "dist")
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
    got = twin_archive(tmp_path, out, "m-float-onnx", {"model": model, "soc": "SM8750", "graphs": {"g": "a" * 64},
                                                       "build": BUILD}, b"licence")
    assert got is not None
    archive, shipped = got
    assert shipped == values
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        member = tar.extractfile("m-float-onnx/twin.json")
        assert member is not None and json.loads(member.read()) == values
    assert sorted(names) == [f"m-float-onnx/{n}" for n in ("LICENSE", "README.md", "g/graph.onnx", "g/graph.onnx.data",
                                                          "sample/g/inputs/x.npy", "twin.json")]


@pytest.mark.parametrize("change, words", [
    ("missing", "m-float-onnx: the build kept no twin"),
    ("failed", "the twin could not be run through the QNN EP"),
    ("other graph", "is not of this build's graphs for SM8750"),
    ("other chip", "is not of this build's graphs for SM8650"),
    ("file gone", "is gone from the twin the build kept"),
    ("another build", "is of another build (started 2026-12-06T12:00:00+00:00"),
])
def test_package_refuses_a_twin_the_build_did_not_keep_whole(tmp_path, change, words):
    out, _ = _kept(tmp_path)
    expect = {"model": SimpleNamespace(name="m"), "soc": "SM8750", "graphs": {"g": "a" * 64}, "build": BUILD}
    if change == "missing":
        twin_record(out, "m-float-onnx").unlink()
    elif change == "failed":
        failed_twin(_of(out), "m-float-onnx",
                    QnnReleaseError("m-float-onnx: the twin could not be run through the QNN EP"))
        assert not (out / "twins" / "m-float-onnx").exists()  # never a failed twin's files beside its record
    elif change == "other graph":
        expect["graphs"] = {"g": "b" * 64}
    elif change == "other chip":
        expect["soc"] = "SM8650"
    elif change == "another build":  # this one was interrupted before its twins: the earlier one's stay behind
        expect["build"] = "2026-12-06T13:00:00+00:00"
    else:
        (out / "twins" / "m-float-onnx" / "g" / "graph.onnx").unlink()
    with pytest.raises(PackageError) as e:
        twin_archive(tmp_path, out, "m-float-onnx", expect, b"")
    assert words in e.value.message and "\n" not in e.value.message
    assert "qnn-release build" in (e.value.hint or "") or change == "failed"
    if change == "failed":
        assert str(twin_record(out, "m-float-onnx")) in e.value.message  # where the build said it


def test_a_recipe_without_a_twin_ships_none(tmp_path):
    out, _ = _kept(tmp_path)
    no_twin(_of(out), "m-float-onnx")
    assert not (out / "twins" / "m-float-onnx").exists()
    expect = {"model": None, "soc": "SM8750", "graphs": {}, "build": BUILD}
    assert twin_archive(tmp_path, out, "m-float-onnx", expect, b"") is None


def test_a_qdq_twin_is_the_builds_own_by_its_record(tmp_path):
    """A quantized twin's graphs are checked by name: its record, of this build, says which QDQ graph it holds."""
    out, _ = _kept(tmp_path)
    expect = {"model": SimpleNamespace(name="m", description="d", license="MIT"), "soc": "SM8750",
              "graphs": {"g": None}, "build": BUILD}
    assert twin_archive(tmp_path, out, "m-float-onnx", expect, b"") is not None
    with pytest.raises(PackageError, match="is not of this build's graphs"):
        twin_archive(tmp_path, out, "m-float-onnx", {**expect, "graphs": {"other": None}}, b"")


def test_an_interrupted_build_is_never_packaged(tmp_path):
    from ci_tools.compile.records import BuildReport
    from ci_tools.release.package import package

    report = BuildReport(records=[], prepared=[], path=tmp_path / "build-report.json", backend="ort",
                         sdk_version="2.51", seconds=1.0, interrupted=True, matrix="m.yaml", started=BUILD)
    report.write()
    with pytest.raises(PackageError) as e:
        package(tmp_path)
    assert e.value.message == f"{report.path}: the build was interrupted"
    assert "qnn-release build" in (e.value.hint or "")
