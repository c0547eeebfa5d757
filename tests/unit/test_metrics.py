import math

import numpy as np
import pytest

from ci_tools.compile.verify import Runs, check, thresholds_for
from ci_tools.errors import VerifyError
from ci_tools.matrix.schema import Options
from ci_tools.util.metrics import compare


def test_zero_outputs_give_no_nan():
    p = compare(np.zeros(10), np.zeros(10))
    assert (p.cosine, p.max_abs, p.snr_db, p.nan_count) == (1.0, 0.0, 200.0, 0)
    q = compare(np.zeros(10), np.ones(10))
    assert q.cosine == 0.0 and q.snr_db == -200.0 and not any(map(math.isnan, (q.cosine, q.max_abs, q.snr_db)))


def test_nan_in_output_is_counted():
    p = compare(np.ones(4), np.array([1.0, np.nan, 1.0, np.inf]))
    assert p.nan_count == 2 and not math.isnan(p.cosine)


def test_snr_and_cosine_values():
    ref = np.array([1.0, 2.0, 3.0, 4.0])
    p = compare(ref, ref + 0.1)
    assert p.max_abs == pytest.approx(0.1)
    assert p.snr_db == pytest.approx(10 * math.log10(30 / 0.04))
    assert compare(ref, -ref).cosine == pytest.approx(-1.0)


def test_an_override_changes_only_its_precision_and_field():
    base = {p: thresholds_for(Options(), p) for p in ("fp16", "w8a16", "int8")}
    opts = Options.model_validate({"verify": {"int8": {"min_cosine": 0.5}}})
    assert thresholds_for(opts, "int8") == base["int8"].model_copy(update={"min_cosine": 0.5})
    assert thresholds_for(opts, "fp16") == base["fp16"] and thresholds_for(opts, "w8a16") == base["w8a16"]
    # the stricter precision keeps the stricter defaults
    assert base["fp16"].min_cosine > base["w8a16"].min_cosine > base["int8"].min_cosine


def test_check_fails_below_threshold_and_passes_above():
    ref = [[np.linspace(-1, 1, 100, dtype=np.float32)]]
    good = [[ref[0][0] + 1e-4]]
    bad = [[ref[0][0][::-1].copy()]]
    t = thresholds_for(Options(), "fp16")
    assert check("t", ["y"], Runs(ref, good, emulator_seconds=0.1), t).parity.cosine > 0.999
    with pytest.raises(VerifyError, match="all-zero output would pass too"):  # within max_abs, but so is zero
        check("t", ["y"], Runs([[ref[0][0] * 1e-4]], [[ref[0][0][::-1] * 1e-4]], emulator_seconds=0.1), t)
    # within max_abs << peak
    assert check("t", ["y"], Runs([[ref[0][0] * 1e-2]], [[ref[0][0] * 1e-2 + 5e-4]], emulator_seconds=0.1), t)
    with pytest.raises(VerifyError, match="cosine"):
        check("t", ["y"], Runs(ref, bad, emulator_seconds=0.1), t)
    with pytest.raises(VerifyError, match="elements"):
        check("t", ["y"], Runs(ref, [[np.zeros(3)]], emulator_seconds=0.1), t)


def test_a_flat_answer_fails_where_the_output_varies_little_around_a_large_value():
    """Issue #34 item 9: 0.27 +- 0.02 answered 0.268 everywhere scores cosine 0.9997 and SNR 32 dB."""
    from ci_tools.compile.verify import DEFAULT_THRESHOLDS, judge

    rng = np.random.default_rng(0)
    ref = 0.27 + 0.01 * np.sin(np.linspace(0, 20, 512))  # within +-0.02 of 0.27
    flat = np.full_like(ref, 0.268)
    d = judge(ref, flat, DEFAULT_THRESHOLDS["fp16"])
    assert d["cosine"] > 0.999 and d["snr_db"] > 20  # what passed it before
    assert d["failures"] and "variation is not carried" in d["failures"][0] and d["deviation_snr_db"] < 3
    # the right values shifted by their own spread: also not what the model says
    assert judge(ref, ref + 0.01, DEFAULT_THRESHOLDS["fp16"])["failures"]
    # an fp16-accurate answer passes, with the number recorded
    good = judge(ref, ref.astype(np.float16).astype(np.float64) + rng.normal(0, 1e-4, ref.size),
                 DEFAULT_THRESHOLDS["fp16"])
    assert not good["failures"] and good["deviation_snr_db"] > 30
    # an output that is constant on CPU has nothing to carry: judged by cosine and SNR as before
    const = np.full(64, 0.5)
    assert not judge(const, const + 1e-5, DEFAULT_THRESHOLDS["fp16"])["failures"]
