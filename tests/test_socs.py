import json

import pytest

from ci_tools.errors import ConfigError
from ci_tools.socs import DEFAULT_CATALOG, UnknownSocError, load_catalog
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


@pytest.mark.parametrize("spelling", ["SM8750", "sm8750", "SM8750-AC", "sm8750-ac", " SM8750\n",
                                      "qualcomm-snapdragon-8-elite", "Snapdragon 8 Elite"])
def test_resolver_spellings(spelling):
    assert load_catalog().resolve(spelling).name == "SM8750"


def test_resolver_binned_variant_and_getprop_output():
    cat = load_catalog()
    assert cat.resolve("SM8550-AB").name == "SM8550"
    assert cat.resolve("qcs9100").soc_model == 77


@pytest.mark.parametrize("bad,suggestion", [("SM8751", "SM8750"), ("qualcom-snapdragon-8-elite", "SM8750"),
                                            ("nonsense-chip", None), ("", None)])
def test_resolver_unknown_is_clear(bad, suggestion):
    with pytest.raises(UnknownSocError) as e:
        load_catalog().resolve(bad)
    assert "unknown chip" in str(e.value) or "empty" in str(e.value)
    if suggestion:
        assert f"did you mean {suggestion}?" in str(e.value)


def test_groups_expand_to_catalog_entries():
    cat = load_catalog()
    assert [s.name for s in cat.expand("flagship")] == ["SM8550", "SM8650", "SM8750", "SM8850"]
    assert cat.expand("SM8750-AC")[0].name == "SM8750"


def test_cli_resolve_and_unknown_exit_code():
    r = run_cli("socs", "--resolve", "sm8750-ac")
    assert r.returncode == 0 and "SM8750" in r.stdout
    r = run_cli("socs", "--resolve", "SM9999")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "unknown chip 'SM9999'" in r.stderr and "Traceback" not in r.stderr


def test_catalog_rejects_alias_clash_and_unknown_group_member(tmp_path):
    src = DEFAULT_CATALOG.read_text()
    clash = tmp_path / "clash.yaml"
    clash.write_text(src.replace("aihub: [qualcomm-snapdragon-8gen3, sm8650]",
                                 "aihub: [qualcomm-snapdragon-8gen3, sm8750-ac]"))
    with pytest.raises(ConfigError, match=r"clash.yaml:\d+: 'sm8750-ac' names both"):
        load_catalog(clash)
    group = tmp_path / "group.yaml"
    group.write_text(src.replace("iot: [QCS9100, QCS9075,", "iot: [QCS9100, QCS9999,"))
    with pytest.raises(ConfigError, match=r"group.yaml:\d+: groups.iot: unknown chip 'QCS9999'"):
        load_catalog(group)
