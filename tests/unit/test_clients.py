"""The clients without Python: qnn-fetch.sh under dash and busybox sh, and the Java resolver (javac + java).

The unit tier of tests/test_clients.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

from ci_tools.catalog.socs import load_catalog
from ci_tools.release.clients import FETCH_SH, JAVA, MARKER, norm, render_clients, spelling_table
from tests.conftest import REPO
from tests.support.clients import _python_chip


def test_generated_clients_are_current_and_marked():
    files = render_clients(load_catalog())
    assert set(files) == {FETCH_SH, JAVA}
    for rel, text in files.items():
        assert MARKER in text.splitlines()[1 if rel == FETCH_SH else 0] and "do not edit" in text
        assert (REPO / rel).read_text() == text, f"{rel} is stale: run `qnn-release render`"


def test_spelling_table_is_what_the_python_resolver_answers():
    cat = load_catalog()
    table, binned = spelling_table(cat)
    assert len(table) >= 3 * len(cat.socs)
    for key, chip in table.items():
        assert key == norm(key) and _python_chip(cat, key) == (chip or "none")
    assert binned["sm8750"] == "SM8750" and _python_chip(cat, "sm8750-zz") == "SM8750"
