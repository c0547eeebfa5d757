"""What tests/test_device_numbers.py and tests/unit/test_device_numbers.py share."""

from __future__ import annotations


def _whisper_like_model():
    from types import SimpleNamespace

    return SimpleNamespace(verify=SimpleNamespace(kind="transcript"))
