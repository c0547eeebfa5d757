"""`socs --check` compiles one-node graphs with the real QNN EP (fast: no emulator run)."""

import json
import os

import pytest

from ci_tools.socs import load_catalog
from ci_tools.socs_check import check
from tests.conftest import run_cli

pytest.importorskip("onnxruntime_qnn")


def _findings(report, soc):
    return {f.field: f for f in report.findings if f.soc == soc}


def test_socs_check_against_installed_qnn_has_only_explained_disagreements():
    env = {k: v for k, v in os.environ.items() if k != "QNN_SDK_ROOT"}
    r = run_cli("socs", "--check", "--json", env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    data = json.loads(r.stdout)
    assert data["unexplained"] == 0 and data["compared"] == len(load_catalog().targets())
    by = {(f["soc"], f["field"]): f for f in data["findings"]}
    # the EP's name table knows the phones it lists (SM8350 -> 30, our decision) ...
    assert ("SM8350", "soc_model") not in by and ("SM8750", "name") not in by
    # ... and not the IoT/auto names, which is why we always pass the numeric soc_model
    assert by[("QCS9100", "name")]["toolchain"] == "unknown name (0)" and by[("QCS9100", "name")]["known"]
    assert any("QAIRT: skipped" in t for t in data["toolchains"])


def test_check_reports_an_fp16_claim_the_backend_refuses(tmp_path):
    """SM7750's soc_model refuses float ops: a catalog that says fp16 true there is caught, unexplained."""
    from ci_tools.socs import DEFAULT_CATALOG

    edited = tmp_path / "socs.yaml"
    text = DEFAULT_CATALOG.read_text()
    start = text.index("  - name: SM7750")
    block = text[start:text.index("  - name:", start + 5)]
    # (QCS7790 builds as SM7750, so it must say the same)
    edited.write_text(text.replace(block, block.replace("fp16: false", "fp16: true", 1)).replace(
        "    fp16: false\n    build_as: SM7750", "    fp16: true\n    build_as: SM7750"))
    cat = load_catalog(edited)
    report = check(cat, [cat.get("SM7750")])
    f = _findings(report, "SM7750")["fp16"]
    assert (f.catalog, f.toolchain, f.known) == ("true", "float ops refused", None)
    assert report.unexplained == [f]


def test_check_on_a_v85_chip_confirms_the_ep_rejects_its_arch():
    cat = load_catalog()
    report = check(cat, [cat.get("SM8975")])
    f = _findings(report, "SM8975")["htp_arch"]
    assert "rejected" in f.toolchain and f.known
