"""What tests/test_fake_aihub.py and tests/unit/test_fake_aihub.py share."""

from __future__ import annotations

from tests.conftest import REPO  # noqa: F401 (theirs)

ELITE = "Snapdragon 8 Elite QRD"
