"""Numbers from real devices: a real build measured through AI Hub's real client against a stand-in server

The unit tier of tests/test_device_numbers.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import pytest

from ci_tools.device.numbers import DeviceRun, Latency, on_device
from tests.support.device_numbers import _whisper_like_model


def test_a_speech_model_gets_its_real_time_factor_and_time_to_first_token():
    def run(ms):
        return DeviceRun(via="ai-hub", status="ok", latency=Latency(median_ms=ms, min_ms=ms, max_ms=ms, runs=3))

    transcript = {"clips": [{"audio_seconds": 4.0, "decoder_steps": 20}, {"audio_seconds": 6.0, "decoder_steps": 30}]}
    from ci_tools.recipes import recipe_for

    recipe = recipe_for(_whisper_like_model())
    d = on_device({"encoder": run(200.0), "decoder": run(10.0)},
                  lambda runs: {"kind": recipe.kind, **recipe.device_summary(runs, transcript)})
    # (2 encoder runs + 50 decoder steps) / 10 s of audio; first token after the encoder and the 4 prompt steps
    assert d.recipe.kind == "transcript" and d.recipe.real_time_factor == pytest.approx((2 * 200 + 50 * 10) / 10000)
    assert d.recipe.time_to_first_token_ms == pytest.approx(200 + 4 * 10)
    assert d.latency_ms == 210.0 and d.status == "ok"
    assert recipe.device_text(d.recipe.model_dump()) == "real-time factor 0.090, first token 240.0 ms"
    worse = on_device({"encoder": run(1.0), "decoder": DeviceRun(via="ai-hub", status="timeout", reason="slow")})
    assert worse.status == "timeout" and worse.latency_ms is None and worse.recipe is None


def test_the_catalog_names_a_device_for_a_chip_through_its_twin():
    from ci_tools.catalog.socs import load_catalog

    cat = load_catalog()
    assert [s.name for _, s in cat.hub_chipsets(cat.get("QCS9100"))] == ["QCS9075"] * 3
    assert cat.hub_chipsets(cat.get("SM8750"))[0] == ("qualcomm-snapdragon-8-elite-for-galaxy", cat.get("SM8750"))


def test_a_call_that_outlives_the_budget_is_left_behind_as_a_timeout():
    import threading
    import time

    from ci_tools.device.hub import Hub, HubFault

    hub = Hub("t0k3n", "http://127.0.0.1:9", deadline=time.monotonic())  # the budget has ended
    never = threading.Event()
    with pytest.raises(HubFault) as e:
        hub.call("devices", never.wait)
    assert e.value.status == "timeout" and "within the budget" in e.value.reason
    never.set()
