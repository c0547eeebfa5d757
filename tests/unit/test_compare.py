"""compare's judging of a recipe's own measures, and what it cannot judge against a published manifest."""

from __future__ import annotations

from ci_tools.matrix.schema import Regressions
from ci_tools.release.compare import Numbers, _from_metadata, judge


def _voice(snr: float, wer: float) -> Numbers:
    n = Numbers(status="released", verdict="real-samples")
    _from_metadata(n, {"numbers": {}, "recipe": {"kind": "speech", "worst_chunk_snr_db": snr, "wer": wer}})
    return n


def test_a_voice_that_got_worse_is_a_regression():
    row = judge("voice/SM8750/fp16", _voice(30.0, 0.0), _voice(8.0, 0.6), Regressions())
    assert "voice SNR 30.0 -> 8.0 dB" in row.regressions and "WER 0.0% -> 60.0%" in row.regressions


def test_against_a_published_manifest_snr_is_said_not_judged():
    old = Numbers(status="released", verdict="real-samples")  # a manifest has no per-graph SNR
    new = Numbers(status="released", verdict="real-samples", snr_db=10.0)
    row = judge("m/SM8750/fp16", old, new, Regressions())
    assert not row.regressions and any("SNR not judged" in c for c in row.changes)


def test_an_older_release_s_recipe_result_is_read_under_its_kind():
    """metadata.json version 2 kept a recipe's result under a top-level key named after its kind: compare still
    judges a release packaged then against one packaged now."""
    old = Numbers(status="released", verdict="real-samples")
    _from_metadata(old, {"numbers": {}, "speech": {"worst_chunk_snr_db": 30.0, "wer": 0.0}})
    assert old.recipe == {"wer": 0.0, "voice_snr_db": 30.0}
    row = judge("voice/SM8750/fp16", old, _voice(8.0, 0.0), Regressions())
    assert row.regressions == ["voice SNR 30.0 -> 8.0 dB"]
