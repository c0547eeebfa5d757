"""The matrix file: the demo validates; every broken variant gives one line, exit code 2, no traceback.

The unit tier of tests/test_matrix.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

import json

import pytest

from ci_tools.matrix.plan import plan
from ci_tools.matrix.schema import SCHEMA_FILE, load_matrix
from tests.support.matrix import SRC, VAD_TAIL


def test_fp16_on_v68_allowed_when_excluded(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SRC.replace(VAD_TAIL, VAD_TAIL.replace(
        "precisions: [fp16]\n    chips: [flagship, QCS9100]\n",
        "precisions: [fp16, w8a16]\n    chips: [phones]\n    exclude: [{soc: SM8350, precision: fp16}]\n")))
    targets = plan(load_matrix(path), model="silero-vad")
    ids = {t.id for t in targets}
    assert "silero-vad.vad.sm8350.w8a16" in ids and "silero-vad.vad.sm8350.fp16" not in ids
    assert "silero-vad.vad.sm8450.fp16" in ids


def test_demo_matrix_validates_against_committed_schema():
    import jsonschema
    import yaml

    jsonschema.validate(yaml.safe_load(SRC), json.loads(SCHEMA_FILE.read_text()))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(SRC.replace("precisions: [fp16]", "precisions: [fp8]", 1)),
                            json.loads(SCHEMA_FILE.read_text()))


def test_fp16_unknown_try_lets_the_model_compile_it(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SRC.replace(VAD_TAIL, VAD_TAIL.replace("chips: [flagship, QCS9100]\n", "chips: [SM8845]\n"))
                    .replace("    options:\n      verify:", "    options:\n      fp16_unknown: try\n      verify:", 1))
    assert [t.id for t in plan(load_matrix(path), model="silero-vad")] == ["silero-vad.vad.sm8845.fp16"]


def test_group_members_without_fp16_are_refused_by_plan_with_the_reason(tmp_path):
    from ci_tools.catalog.socs import load_catalog
    from ci_tools.matrix.plan import make_plan

    path = tmp_path / "m.yaml"
    path.write_text(SRC.replace(VAD_TAIL, VAD_TAIL.replace("chips: [flagship, QCS9100]", "chips: [phones]")))
    result = make_plan(load_matrix(path), model="silero-vad")
    cat = load_catalog()
    built = {t.soc.name for t in result.targets}
    refused = {r.soc: r.reason for r in result.refused}
    phones = {s.name for s in cat.expand("phones")}
    assert built | set(refused) == phones and not built & set(refused)
    assert built == {n for n in phones if cat.get(n).fp16 is True}
    assert "has no fp16" in refused["SM8350"] and "no source says" in refused["SM8475"]


def test_a_sha256_yaml_reads_as_a_number_says_to_quote_it(tmp_path):
    """#46: an unquoted placeholder sha256 (000...0) is the integer 0 to YAML: the message says so, with the fix."""
    from ci_tools.errors import ConfigError
    from tests.conftest import REPO

    text = (REPO / "matrix" / "models.yaml").read_text()
    pin = "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87"
    (tmp_path / "matrix").mkdir()
    (tmp_path / "matrix" / "models.yaml").write_text(text.replace(pin, "0" * 64))
    with pytest.raises(ConfigError) as e:
        load_matrix(tmp_path / "matrix" / "models.yaml")
    assert "expected a string, got int 0" in e.value.message and "quote it" in (e.value.hint or "")
