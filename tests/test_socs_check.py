"""`socs --check` compiles a one-node graph per chip with the real QNN EP (fast: no emulator run)."""

import json

import pytest

from tests.conftest import run_cli

pytest.importorskip("onnxruntime_qnn")


def test_socs_check_against_installed_qnn():
    r = run_cli("socs", "--check", "--json")
    assert r.returncode == 0, r.stderr
    findings = json.loads(r.stdout[r.stdout.index("["):])
    by_soc = {f["soc"]: f for f in findings}
    # the EP's name table knows the phones (SM8350 -> 30, our decision) ...
    assert "SM8350" not in by_soc and "SM8750" not in by_soc
    # ... and not the IoT/auto names, which is why we always pass the numeric soc_model
    assert by_soc["QCS9100"]["toolchain"] == "unknown name (0)"
    assert not [f for f in findings if f["field"] == "htp_arch/soc_model"]
