"""The catalog against the committed snapshot of the public tables it cites (matrix/soc_sources.yaml).

Every number a table gives for a catalog chip either agrees with the catalog or is recorded under
that chip's `disputed` (with that table as the source); a number the chip cites a table for agrees.
So an edit of matrix/socs.yaml that contradicts a public table without saying so fails here.
"""

import pytest
import yaml

from ci_tools.catalog.socs import UnknownSocError, load_catalog
from ci_tools.paths import REPO_ROOT

SNAPSHOT = yaml.safe_load((REPO_ROOT / "matrix" / "soc_sources.yaml").read_text())
FIELDS = ("soc_model", "htp_arch", "vtcm_mb", "fp16")


def _rows():
    for table, data in SNAPSHOT["tables"].items():
        for name, row in data["rows"].items():
            yield table, name, row


def _chip(name):
    try:
        return load_catalog().lookup(name)
    except UnknownSocError:
        return None


def disagreements(cat=None):
    """(table, row name, chip, field, table value, catalog value) the catalog neither shares nor disputes."""
    cat = cat or load_catalog()
    out = []
    for table, name, row in _rows():
        try:
            chip = cat.lookup(name)
        except UnknownSocError:
            continue
        for field in FIELDS:
            if field not in row:
                continue
            mine, theirs = getattr(chip, field), row[field]
            if field in ("vtcm_mb", "fp16") and mine is None and table not in chip.sources.get(field, []):
                continue  # the catalog leaves it unknown: a table it does not cite may know more
            if mine == theirs:
                continue
            if chip.disputed.get(field, {}).get(table) == theirs and table not in chip.sources.get(field, []):
                continue
            out.append((table, name, chip.name, field, theirs, mine))
    return out


def test_every_table_value_agrees_or_is_disputed():
    assert disagreements() == []


def test_a_contradicting_edit_fails(tmp_path):
    from ci_tools.catalog.socs import DEFAULT_CATALOG

    text = DEFAULT_CATALOG.read_text()
    # SM8650 is soc_model 57 in QNN's enum, executorch, sherpa-onnx and LiteRT
    edited = tmp_path / "socs.yaml"
    edited.write_text(text.replace("soc_model: 57\n", "soc_model: 59\n", 1))
    found = disagreements(load_catalog(edited))
    assert {(t, f, theirs, mine) for t, _, chip, f, theirs, mine in found if chip == "SM8650"} >= {
        ("qnnh", "soc_model", 57, 59), ("sh", "soc_model", 57, 59)}


def test_cited_tables_agree_even_when_disputed():
    """A source a chip cites for a field cannot also be the one that disputes it."""
    for soc in load_catalog().socs:
        for field, claims in soc.disputed.items():
            assert not set(claims) & set(soc.sources.get(field, [])), (soc.name, field)


@pytest.mark.parametrize("table", ["hub57", "hub65"])
def test_every_ai_hub_chipset_and_alias_resolves_to_its_numbers(table):
    cat = load_catalog()
    for name, row in SNAPSHOT["tables"][table]["rows"].items():
        for spelling in (name, *row.get("aliases", [])):
            chip = cat.lookup(spelling)  # raises for a name the catalog lacks
            assert chip.htp_arch == row["htp_arch"], spelling
            assert chip.soc_model == row["soc_model"] or chip.disputed["soc_model"][table] == row["soc_model"]


def test_current_and_dropped_ai_hub_names_are_recorded_as_such():
    cat = load_catalog()
    current = SNAPSHOT["tables"]["hub65"]["rows"]
    for name in current:
        assert name in cat.lookup(name).aihub, name
    for name, row in SNAPSHOT["tables"]["hub57"]["rows"].items():
        for spelling in (name, *row.get("aliases", [])):
            chip = cat.lookup(spelling)
            in_65 = spelling in current or any(spelling in r.get("aliases", []) for r in current.values())
            if not in_65 and spelling.lower() != chip.name.lower():
                assert spelling in chip.aihub_dropped, spelling


@pytest.mark.parametrize("table", ["qd", "qd24"])
def test_kernel_soc_ids_resolve_like_the_name_they_stand_for(table):
    cat = load_catalog()
    rows = SNAPSHOT["soc_ids"][table]["rows"]
    for soc_id, name in rows.items():
        chip = _chip(name)
        if chip is None:
            continue
        assert cat.lookup(f"soc_id:{soc_id}") is chip, (soc_id, name)
    for soc in cat.socs:
        if table in soc.sources.get("soc_ids", []):
            for soc_id in soc.soc_ids:
                assert soc_id in rows and _chip(rows[soc_id]) is soc, (soc.name, soc_id)
