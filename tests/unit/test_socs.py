"""test_socs

The unit tier of tests/test_socs.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

import json

import pytest

from ci_tools.catalog.socs import DEFAULT_CATALOG, UnknownSocError, load_catalog
from ci_tools.errors import ConfigError
from tests.support.socs import BUILT, RESEARCH, _research_spellings


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


@pytest.mark.parametrize("row", BUILT, ids=[r["name"] for r in BUILT])
def test_every_researched_chip_resolves_from_each_spelling_to_its_numbers(row):
    cat = load_catalog()
    chip = cat.get(row["name"])
    for spelling in _research_spellings(row):
        assert cat.lookup(spelling) is chip, spelling
    assert (chip.soc_model, chip.htp_arch) == (row["soc_model"], row["htp"])
    if row["vtcm"] is not None:
        assert chip.vtcm_mb == row["vtcm"]
    inferred = "inferred" in json.dumps(row.get("src"))
    if isinstance(row["fp16"], bool) and not inferred:
        assert chip.fp16 == row["fp16"] or "fp16" in chip.disputed
    target = cat.resolve(row["name"])  # its build: itself, or the chip with the same soc_model
    assert (target.soc_model, target.htp_arch) == (chip.soc_model, chip.htp_arch)


def test_research_chips_without_a_soc_model_or_arch_are_explained():
    cat = load_catalog()
    for row in RESEARCH:
        if row in BUILT:
            continue
        try:
            chip = cat.lookup(row["name"])
        except UnknownSocError as e:
            assert "known but not built" in str(e), row["name"]
            continue
        assert chip.decision or chip.sources.get("htp_arch"), row["name"]  # an alias, or a newer source


def test_chips_that_share_a_soc_model_build_once():
    cat = load_catalog()
    by_model = {}
    for s in cat.socs:
        by_model.setdefault(s.soc_model, set()).add(cat.target(s).name)
    assert all(len(targets) == 1 for targets in by_model.values())
    assert cat.resolve("qualcomm-dragonwing-iq-9075").name == cat.resolve("QCS9100").name
    assert {s.name for s in cat.sharing(cat.get("SA8255"))} >= {"SA8255", "SA8775P", "SA8650P"}


def test_kernel_soc_ids_codenames_and_platforms():
    cat = load_catalog()
    assert cat.lookup("soc_id:639") is cat.lookup("SM8750P") is cat.get("SM8750")
    assert cat.lookup("soc_id 660").name == "SM8850"
    assert cat.lookup("sun") is cat.get("SM8750") and cat.lookup("pakala") is cat.get("SM8750")
    with pytest.raises(UnknownSocError, match=r"'lemans' names several chips: .*QCS9100.*SA8255"):
        cat.lookup("lemans")
    with pytest.raises(UnknownSocError, match="unknown kernel soc_id 12345"):
        cat.lookup("soc_id:12345")
    with pytest.raises(UnknownSocError, match=r"SM8735 \(soc_model 85\) is known but not built: no source"):
        cat.lookup("sm8735")


def test_groups_hold_every_chip_of_their_kind():
    cat = load_catalog()
    kinds = {"phones": {"phone"}, "iot": {"iot"}, "auto": {"auto"}, "compute": {"compute"}, "xr": {"xr", "wear"}}
    for group, wanted in kinds.items():
        assert set(cat.groups[group]) == {s.name for s in cat.socs if s.kind in wanted}, group
    flagship = [cat.get(n) for n in cat.groups["flagship"]]
    assert all(s.kind == "phone" and s.fp16 and not s.qnn_min for s in flagship)
    assert len({s.htp_arch for s in flagship}) == len(flagship)  # one per HTP generation


@pytest.mark.parametrize("edit,error", [
    (("    build_as: QCS9100\n", ""), r"QCS9075: soc_model 77 is also QCS9100's .*build_as: QCS9100"),
    (("    build_as: SM7750\n", "    build_as: SM8750\n"), r"QCS7790 builds as SM8750 but its soc_model is 86, not 69"),
])
def test_catalog_rejects_inconsistent_builds(tmp_path, edit, error):
    bad = tmp_path / "socs.yaml"
    text = DEFAULT_CATALOG.read_text()
    assert edit[0] in text
    bad.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError, match=error):
        load_catalog(bad)


def test_catalog_rejects_a_number_without_a_source(tmp_path):
    bad = tmp_path / "socs.yaml"
    text = DEFAULT_CATALOG.read_text()
    start = text.index("  - name: QCS8625")
    block = text[start:text.index("  - name:", start + 5)]
    bad.write_text(text.replace(block, block.replace("vtcm_mb: null", "vtcm_mb: 8")))
    with pytest.raises(ConfigError, match=r"QCS8625.vtcm_mb: a number without a source"):
        load_catalog(bad)


def test_readme_chip_table_is_generated_from_the_catalog():
    from ci_tools.catalog.readme import README, render, section

    text = README.read_text()
    start, end = section(text, README)
    assert text[start:end] == render(load_catalog()), "stale: run `qnn-release socs --readme`"
    assert "| SM8750 | Snapdragon 8 Elite | 69 | v79 |" in text[start:end]


def test_readme_drift_is_caught_and_rewritten(tmp_path):
    from ci_tools.catalog.readme import README, update

    copy = tmp_path / "README.md"
    copy.write_text(README.read_text().replace("| SM8750 | Snapdragon 8 Elite | 69 |",
                                               "| SM8750 | Snapdragon 8 Elite | 68 |"))
    assert update(copy, load_catalog()) is True
    assert copy.read_text() == README.read_text()
    assert update(copy, load_catalog()) is False
