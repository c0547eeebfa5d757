import json

from ci_tools.catalog.socs import load_catalog
from tests.conftest import run_cli

EXPECTED = {"SM8550": (43, "v73"), "SM8650": (57, "v75"), "SM8750": (69, "v79"),
            "SM8850": (87, "v81"), "QCS9100": (77, "v73"), "SM8350": (30, "v68")}


def test_socs_json_lists_catalog_ids():
    r = run_cli("socs", "--json")
    assert r.returncode == 0, r.stderr
    socs = {s["name"]: s for s in json.loads(r.stdout)["socs"]}
    for name, (soc_model, arch) in EXPECTED.items():
        assert (socs[name]["soc_model"], socs[name]["htp_arch"]) == (soc_model, arch)
        assert socs[name]["htp_arch_number"] == int(arch[1:])
    assert socs["SM8350"]["fp16"] is False
    assert socs["SM8350"]["disputed"] == {"sh": 35}  # old shape: source -> the soc_model it gives
    assert socs["SM8350"]["disputes"] == {"soc_model": {"sh": 35}}


def test_cli_resolve_and_unknown_exit_code():
    r = run_cli("socs", "--resolve", "sm8750-ac")
    assert r.returncode == 0 and "SM8750" in r.stdout
    r = run_cli("socs", "--resolve", "SM9999")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "unknown chip 'SM9999'" in r.stderr and "Traceback" not in r.stderr


def test_cli_filters_and_stable_json():
    r = run_cli("socs", "--json", "--kind", "iot", "--arch", "v73")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    socs = data["socs"]
    assert socs and all(s["kind"] == "iot" and s["htp_arch"] == "v73" for s in socs)
    cat = load_catalog()
    assert [s["name"] for s in socs] == [s.name for s in cat.socs if s.kind == "iot" and s.htp_arch == 73]
    old_keys = {"name", "marketing", "kind", "soc_model", "htp_arch", "htp_arch_number", "dsp_arch", "vtcm_mb",
                "fp16", "aliases", "sources", "disputed", "decision"}
    assert old_keys <= set(socs[0]) and set(data) == {"socs", "groups"}
    r = run_cli("socs", "--arch", "v99")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "expected an HTP arch" in r.stderr


def test_cli_resolve_names_the_build():
    r = run_cli("socs", "--resolve", "qcs9075")
    assert r.returncode == 0 and "QCS9075 (Dragonwing IQ-9075, soc_model 77, v73); builds as QCS9100" in r.stdout
    r = run_cli("socs", "--resolve", "lemans")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "names several chips" in r.stderr


def test_adb_falls_back_to_the_kernel_soc_id(tmp_path, monkeypatch):
    """A device with no ro.soc.model: `fetch --adb` reads /sys/devices/soc0/soc_id, which the catalog resolves."""
    from ci_tools.release.fetch import soc_from_adb

    adb = tmp_path / "adb"
    adb.write_text('#!/bin/sh\ncase "$*" in\n  *getprop*) echo ;;\n  *soc0/soc_id*) echo 639 ;;\n'
                   '  *) exit 1 ;;\nesac\n')
    adb.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    spelling = soc_from_adb("R5CX")
    assert spelling == "soc_id:639" and load_catalog().resolve(spelling).name == "SM8750"
