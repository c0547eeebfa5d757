"""The AI Hub stand-in (tests/fakes/fake_aihub.py) against the REAL client, qai-hub 0.56.0: every call a release step

The unit tier of tests/test_fake_aihub.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import yaml

from tests.fakes.fake_aihub import DEFAULT_DEVICES
from tests.support.fake_aihub import ELITE, REPO


def test_default_devices_agree_with_the_chip_catalog():
    """hexagon: and soc-model: of every default device are the project's own catalog numbers."""
    chip = {"Samsung Galaxy S23": "SM8550", "Samsung Galaxy S24": "SM8650", ELITE: "SM8750",
            "Samsung Galaxy S25": "SM8750", "Snapdragon 8 Elite Gen 5 QRD": "SM8850", "SA8775P ADP": "SA8775P"}
    socs = {s["name"]: s for s in yaml.safe_load((REPO / "matrix" / "socs.yaml").read_text())["socs"]}
    for d in DEFAULT_DEVICES:
        s = socs[chip[d["name"]]]
        assert f"hexagon:v{s['htp_arch']}" in d["attributes"], d["name"]
        assert f"soc-model:{s['soc_model']}" in d["attributes"], d["name"]
