"""A recipe's data in generic records (#45): one field tagged with the recipe's kind, validated by the recipe's own
model, with the matrix's one-line errors as precise as for any other key, and records of an earlier version read
the same."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ci_tools.compile.records import TargetRecord
from ci_tools.errors import ConfigError
from ci_tools.matrix.schema import load_matrix

REPO = Path(__file__).resolve().parents[2]


def _error(tmp_path: Path, matrix: str, change) -> ConfigError:
    data = yaml.safe_load((REPO / "matrix" / matrix).read_text())
    change(data["models"][0]["verify"])
    bad = tmp_path / "models.yaml"
    bad.write_text(yaml.safe_dump(copy.deepcopy(data)))
    with pytest.raises(ConfigError) as e:
        load_matrix(bad)
    return e.value


def test_a_misspelt_key_of_a_recipe_s_settings_is_named_with_its_recipe_s_keys(tmp_path):
    e = _error(tmp_path, "whisper.yaml", lambda v: v.update(per_chp=v.pop("per_chip", 2)))
    assert "models[0].verify.per_chp: unknown key 'per_chp'" in e.message and e.hint == "did you mean 'per_chip'?"


def test_a_key_two_recipes_share_is_described_by_the_recipe_the_model_names(tmp_path):
    e = _error(tmp_path, "tts.yaml", lambda v: v.update(per_chip=0))
    assert "models[0].verify.per_chip: expected a positive number, got 0" in e.message
    assert e.hint is not None and e.hint.startswith("sentences each chip speaks"), e.hint  # the voice's, not Whisper's


@pytest.mark.parametrize("kind", ["transcrpt", None])
def test_an_unknown_or_missing_kind_names_the_recipes_there_are(tmp_path, kind):
    def change(v):
        if kind is None:
            v.pop("kind")
        else:
            v["kind"] = kind

    e = _error(tmp_path, "whisper.yaml", change)
    assert "models[0].verify.kind: expected one of transcript, speech" in e.message, e.message


def test_a_record_of_an_earlier_version_keeps_its_recipe_result():
    """target.json written before the tagged field kept a recipe's result under a key named after its kind."""
    old = {"id": "w.encoder.sm8750.fp16", "model": "w", "graph": "encoder", "soc": "SM8750", "precision": "fp16",
           "status": "ok", "verify_kind": "transcript", "transcript": {"agree": 2, "clips": []}, "speech": None}
    r = TargetRecord.from_json(old)
    assert r.recipe == {"kind": "transcript", "agree": 2, "clips": []} and not r.details
    assert "transcript" not in r.to_json() and r.to_json()["recipe"]["agree"] == 2
