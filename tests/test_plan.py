import json

from ci_tools.matrix import load_matrix
from ci_tools.plan import plan
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
    from ci_tools.matrix import load_matrix
    from tests.conftest import write_matrix

    m = write_matrix(tmp_path, [{"name": "x", "description": "x", "license": "MIT", "graphs": [
        {"name": "g", "file": "m.onnx"}], "chips": ["SM8750"],
        "source": {"kind": "path", "path": "m.onnx", "sha256": "0" * 64}}])
    assert load_matrix(m).root == tmp_path
    loose = tmp_path / "elsewhere" / "my-matrix.yaml"
    loose.parent.mkdir()
    loose.write_text(m.read_text())
    assert load_matrix(loose).root == loose.parent
