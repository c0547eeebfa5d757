"""`socs --check` compiles one-node graphs with the real QNN EP (fast: no emulator run)."""

import json
import os

import pytest

from ci_tools.catalog.socs import load_catalog
from ci_tools.compile.socs_check import check
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
    from ci_tools.catalog.socs import DEFAULT_CATALOG

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


FAKE_BACKEND_INFO = '''
# Stands in for the QAIRT SDK's compiled module (same names: PyBackendInfo, get_soc_info_subset, socModel...).
import json, os
TABLE = json.loads(os.environ["FAKE_SOC_TABLE"])

def is_backend_supported(backend):
    return backend == "HTP"

class _Info:
    def __init__(self, name, row):
        self.socName, self.socModel, self.socDspArch = name, row[0], row[1]
        self.vtcmSizeinMB, self.numOfHvxThreads, self.supportsFp16 = row[2], 4, row[3]

class PyBackendInfo:
    def __init__(self, backend, soc):
        self.soc = soc
    def is_backend_supported_in_soc(self):
        if self.soc not in TABLE:
            raise RuntimeError(f"Unsupported SnapdragonModel {self.soc}")
        return True
    def get_soc_info_subset(self):
        return _Info(self.soc, TABLE[self.soc])
'''


def test_check_compares_the_qairt_sdks_own_backend_info(tmp_path, monkeypatch):
    import sys

    root = tmp_path / "qairt" / "2.45.0.250101"
    pkg = root / "lib" / "python" / "qti" / "aisw" / "converters" / "common"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent, pkg.parent.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "backend_info.py").write_text(FAKE_BACKEND_INFO)
    # SM8750 as the catalog says; SA8295 with fp16 false and VTCM 4; SM8975 unknown to this (older) SDK
    monkeypatch.setenv("FAKE_SOC_TABLE", json.dumps({"SM8750": [69, "v79", 8, True], "SA8295": [39, 68, 4, False]}))
    monkeypatch.setenv("QNN_SDK_ROOT", str(root))
    monkeypatch.setenv("QNN_PYTHON", sys.executable)
    cat = load_catalog()
    report = check(cat, [cat.get("SM8750"), cat.get("SA8295"), cat.get("SM8975")])
    assert "QAIRT 2.45.0.250101 (backend_info)" in report.toolchains
    qairt = {(f.soc, f.field): f for f in report.findings if f.source == "qairt"}
    assert set(qairt) == {("SA8295", "fp16"), ("SA8295", "vtcm_mb"), ("SM8975", "name")}
    assert (qairt[("SA8295", "fp16")].catalog, qairt[("SA8295", "fp16")].toolchain) == ("true", "false")
    assert qairt[("SA8295", "fp16")].known is None  # a real SDK saying so would settle it: unexplained
    assert qairt[("SM8975", "name")].known == "needs QNN >= 2.50"
