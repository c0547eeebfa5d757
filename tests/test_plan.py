import json

import pytest

from tests.conftest import run_cli
from tests.support.plan import V85_MODEL


def test_plan_json_on_demo_lists_five_chips():
    r = run_cli("plan", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    chips = {t["soc"] for t in data["targets"]}
    assert {"SM8550", "SM8650", "SM8750", "SM8850", "QCS9100"} <= chips
    assert data["count"] == len(data["targets"]) == len({t["id"] for t in data["targets"]})
    t = next(t for t in data["targets"] if t["id"] == "silero-vad.vad.sm8750.fp16")
    assert (t["soc_model"], t["htp_arch"], t["graph"]) == (69, "v79", "vad")


def test_plan_unknown_filters_are_usage_errors():
    r = run_cli("plan", "--model", "silero")
    assert r.returncode == 2 and "did you mean 'silero-vad'?" in r.stderr
    r = run_cli("plan", "--soc", "SM8751")
    assert r.returncode == 2 and "did you mean SM8750?" in r.stderr


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
