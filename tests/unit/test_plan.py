"""test_plan

The unit tier of tests/test_plan.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from ci_tools.matrix.plan import plan
from ci_tools.matrix.schema import load_matrix
from tests.support.plan import V85_MODEL


def test_plan_is_sorted_and_stable():
    a = [t.id for t in plan(load_matrix())]
    assert a == sorted(a) == [t.id for t in plan(load_matrix())]


def test_plan_filters():
    loaded = load_matrix()
    only = plan(loaded, model="rapidocr", soc="sm8750-ac")
    assert [t.id for t in only] == ["rapidocr.cls.sm8750.fp16", "rapidocr.rec.sm8750.fp16"]
    assert {t.soc.name for t in plan(loaded, soc="flagship")} == {"SM8550", "SM8650", "SM8750", "SM8850"}


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
