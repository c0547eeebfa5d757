"""The records between stages (issue #22): a target record and the build report are typed, and their JSON is
what it was as plain dicts: a key with a value is written, a key set to None on purpose is written as null,
an absent key stays absent, an error's own fields stay at the top level."""

from __future__ import annotations

import json

import pytest

from ci_tools.compile.records import (
    BuildReport,
    TargetRecord,
    read_target,
    verdict,
    verdict_label,
    weakest,
    write_target,
)

WHO = {"id": "m.g.sm8750.fp16", "model": "m", "graph": "g", "soc": "SM8750", "precision": "fp16"}


def test_a_record_writes_what_was_set_and_nulls_only_on_purpose():
    r = TargetRecord.make(**WHO, status="ok", key="k", verified=False, verified_on=None, parity=None, size=10)
    data = r.to_json()
    assert data == {**WHO, "status": "ok", "key": "k", "verified": False, "verified_on": None, "parity": None,
                    "size": 10}
    assert "error" not in data and "emulator_seconds" not in data  # never set: not written
    assert TargetRecord.from_json(data) == r and TargetRecord.from_json(data).to_json() == data


def test_with_makes_a_new_record_and_keeps_the_old_one():
    r = TargetRecord.make(**WHO, status="ok", parity={"cosine": 1.0})
    failed = r.with_(status="failed", parity=None, error="boom", exit_code=7)
    assert r.status == "ok" and r.parity == {"cosine": 1.0}
    assert failed.to_json()["parity"] is None and failed.error == "boom" and failed.exit_code == 7
    again = failed.with_(parity={"cosine": 0.5})
    assert again.to_json()["parity"] == {"cosine": 0.5}
    with pytest.raises(AttributeError):
        r.status = "failed"  # frozen: a stage that changes a record makes a new one


def test_an_errors_details_stay_at_the_top_level():
    diagnosis = {"rejected_nodes": 1, "ops": {"Erf": 1}}
    r = TargetRecord.failure(WHO, "rejected", 6, {"diagnosis": diagnosis})
    assert r.details == {"diagnosis": diagnosis}
    assert r.to_json()["diagnosis"] == diagnosis
    assert TargetRecord.from_json(json.loads(json.dumps(r.to_json()))) == r
    # a failure from an error whose details name a field too: the details win, as in a merged dict
    f = TargetRecord.failure(WHO, "failed", 7, {"worst_output": "probs", "diagnosis": diagnosis})
    assert f.status == "failed" and f.worst_output == "probs" and f.to_json()["diagnosis"] == diagnosis


def test_target_json_and_the_build_report_round_trip(tmp_path):
    ok = TargetRecord.make(**WHO, status="ok", key="k", verified=True, verified_on="real-samples",
                           files=[{"name": "g_ctx.onnx", "size": 3}], context_onnx="g_ctx.onnx")
    write_target(tmp_path, ok)
    assert read_target(tmp_path) == ok
    (tmp_path / "target.json").write_text("{half")
    assert read_target(tmp_path) is None  # unreadable: not a finished target
    failed = TargetRecord.make(**{**WHO, "id": "m.g.sm8550.fp16", "soc": "SM8550"}, status="failed", error="x",
                               exit_code=6)
    report = BuildReport(records=[ok, failed], prepared=[{"model": "m", "graph": "g"}], path=tmp_path / "r.json",
                         backend="ort", sdk_version="2.51", seconds=1.5, timings={"total": 1.5}, matrix="m.yaml",
                         started="2026-12-02T10:00:00+00:00", toolkit="qnn-release 0.1.0", exports={"m": "/x"})
    report.write()
    data = json.loads(report.path.read_text())
    assert data["status"] == "failed" and data["targets"][1] == failed.to_json() and data["version"] == 1
    back = BuildReport.read(report.path)
    assert back.records == [ok, failed] and back.failed == [failed] and back.exports == {"m": "/x"}
    assert back.matrix == "m.yaml" and back.sdk_version == "2.51" and back.seconds == 1.5


def test_verdicts_of_records_and_of_manifest_assets():
    assert verdict(TargetRecord.make(**WHO, status="ok", verified=True, verified_on="real-samples")) == "real-samples"
    assert verdict(TargetRecord.make(**WHO, status="ok", verified=True)) == "generated-inputs"
    assert verdict_label({"verified": False}) == "not verified"  # a manifest asset is a plain dict
    assert weakest(["real-samples", "generated-inputs"]) == "generated-inputs" and weakest([]) == "not-verified"


def test_a_misspelt_field_is_refused_not_written():
    import pytest

    r = TargetRecord.make(id="m.g.sm8750.fp16", model="m", graph="g", soc="SM8750", precision="fp16", status="ok")
    with pytest.raises(TypeError, match="did you mean 'verified'"):
        r.with_(verfied=True)
    with pytest.raises(TypeError, match="no field 'colour'"):
        TargetRecord.make(id="x", model="m", graph="g", soc="s", precision="fp16", status="ok", colour=1)
    # an error's own fields (QnnReleaseError.details) are kept, at the top level, as written
    failed = TargetRecord.failure({"id": "x", "model": "m", "graph": "g", "soc": "s", "precision": "fp16"},
                                  "boom", 5, {"diagnosis": {"node": "n1"}})
    assert failed.to_json()["diagnosis"] == {"node": "n1"}
    assert TargetRecord.from_json(failed.to_json()) == failed
