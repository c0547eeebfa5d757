"""Sources made of parts: a file is the concatenation of files of several pinned sources.

The unit tier of tests/test_parts_source.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import pytest
import yaml

from ci_tools.errors import ConfigError
from ci_tools.matrix.schema import load_matrix
from tests.support.parts_source import _matrix


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda s: s["join"]["model.bin"].update(parts=["model.bin.part1", "nope.bin"]), "'nope.bin' is not a file"),
    (lambda s: s["join"]["model.bin"].update(parts=["model.bin.part1"]), "at least 2"),
    (lambda s: s["join"].update({"model.bin.part1": s["join"]["model.bin"]}), "also a file of sources"),
    (lambda s: s["sources"].append(dict(s["sources"][0])), "two sources give a file named 'model.bin.part1'"),
])
def test_parts_matrix_mistakes_are_one_line_with_the_key(parts, mutate, message):
    repo, whole, a, b = parts
    path = _matrix(repo, "https://example.invalid/model.bin.part2", a, b, whole)
    data = yaml.safe_load(path.read_text())
    mutate(data["models"][0]["source"])
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=message) as e:
        load_matrix(path)
    assert str(e.value).startswith(f"{path}:") and "source" in str(e.value)
