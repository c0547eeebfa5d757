import json

import pytest

from ci_tools.matrix.plan import plan
from ci_tools.matrix.schema import load_matrix
from tests.conftest import run_cli


def test_plan_json_on_demo_lists_five_chips():
    r = run_cli("plan", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    chips = {t["soc"] for t in data["targets"]}
    assert {"SM8550", "SM8650", "SM8750", "SM8850", "QCS9100"} <= chips
    assert data["count"] == len(data["targets"]) == len({t["id"] for t in data["targets"]})
    t = next(t for t in data["targets"] if t["id"] == "silero-vad.vad.sm8750.fp16")
    assert (t["soc_model"], t["htp_arch"], t["graph"]) == (69, "v79", "vad")


def test_plan_is_sorted_and_stable():
    a = [t.id for t in plan(load_matrix())]
    assert a == sorted(a) == [t.id for t in plan(load_matrix())]


def test_plan_filters():
    loaded = load_matrix()
    only = plan(loaded, model="rapidocr", soc="sm8750-ac")
    assert [t.id for t in only] == ["rapidocr.cls.sm8750.fp16", "rapidocr.rec.sm8750.fp16"]
    assert {t.soc.name for t in plan(loaded, soc="flagship")} == {"SM8550", "SM8650", "SM8750", "SM8850"}


def test_plan_unknown_filters_are_usage_errors():
    r = run_cli("plan", "--model", "silero")
    assert r.returncode == 2 and "did you mean 'silero-vad'?" in r.stderr
    r = run_cli("plan", "--soc", "SM8751")
    assert r.returncode == 2 and "did you mean SM8750?" in r.stderr


def test_path_sources_are_relative_to_the_matrix_outside_a_matrix_folder(tmp_path):
    from ci_tools.matrix.schema import load_matrix
    from tests.conftest import write_matrix

    m = write_matrix(tmp_path, [{"name": "x", "description": "x", "license": "MIT", "graphs": [
        {"name": "g", "file": "m.onnx"}], "chips": ["SM8750"],
        "source": {"kind": "path", "path": "m.onnx", "sha256": "0" * 64}}])
    assert load_matrix(m).root == tmp_path
    loose = tmp_path / "elsewhere" / "my-matrix.yaml"
    loose.parent.mkdir()
    loose.write_text(m.read_text())
    assert load_matrix(loose).root == loose.parent


V85_MODEL = {"name": "tiny", "description": "x", "license": "MIT", "graphs": [{"name": "g", "file": "m.onnx"}],
             "precisions": ["w8a16"], "chips": ["SM8975", "SM8750"],
             "source": {"kind": "path", "path": "m.onnx", "sha256": "0" * 64}}


def test_a_v85_chip_is_refused_on_a_route_that_cannot_target_it(tmp_path):
    from ci_tools.catalog.routes import Route
    from ci_tools.matrix.plan import make_plan
    from tests.conftest import write_matrix

    loaded = load_matrix(write_matrix(tmp_path, [V85_MODEL]))
    old = Route("qairt", "QAIRT 2.40.0.251030", "2.40.0.251030")
    result = make_plan(loaded, route=old)
    assert [t.soc.name for t in result.targets] == ["SM8750"]
    assert [(r.soc, r.reason) for r in result.refused] == [
        ("SM8975", "SM8975 (HTP v85) needs QNN >= 2.50; QAIRT 2.40.0.251030 is older")]
    new = Route("qairt", "QAIRT 2.51.0.260101", "2.51.0.260101")
    assert {t.soc.name for t in make_plan(loaded, route=new).targets} == {"SM8750", "SM8975"}
    assert {t.soc.name for t in make_plan(loaded).targets} == {"SM8750", "SM8975"}  # no route: no check (render)


def test_plan_cli_refuses_v85_naming_the_version_and_the_route(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    from tests.conftest import write_matrix

    m = write_matrix(tmp_path, [V85_MODEL])
    r = run_cli("plan", "--matrix", str(m), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [t["soc"] for t in data["targets"]] == ["SM8750"]
    (refusal,) = data["refused"]
    assert refusal["soc"] == "SM8975" and "QNN >= 2.50" in refusal["reason"] and "htp_arch 85" in refusal["reason"]
    r = run_cli("plan", "--matrix", str(m), "--soc", "sm8975")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "needs QNN >= 2.50" in r.stderr
    r = run_cli("plan", "--matrix", str(m), "--backend", "qairt", "--soc", "SM8975")  # the matrix pins 2.40
    assert r.returncode == 2 and "QAIRT 2.40.0.251030" in r.stderr and "is older" in r.stderr


def test_plan_group_expands_to_build_targets_once(tmp_path):
    from ci_tools.catalog.socs import load_catalog
    from tests.conftest import write_matrix

    model = {**V85_MODEL, "chips": ["iot"]}
    loaded = load_matrix(write_matrix(tmp_path, [model]))
    cat = load_catalog()
    socs = [t.soc.name for t in plan(loaded)]
    assert sorted(socs) == sorted({cat.target(cat.get(n)).name for n in cat.groups["iot"]})
    assert "QCS9100" in socs and "QCS9075" not in socs  # QCS9075 builds as QCS9100
    assert plan(loaded, soc="QCS9075") == plan(loaded, soc="QCS9100")
