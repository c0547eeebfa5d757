"""No error message is cut mid-word (#40 item 2: onnx's "... it has multiple hard links, indicat")."""

from __future__ import annotations

import re
from pathlib import Path

from ci_tools.util.text import clip

PKG = Path(__file__).resolve().parents[2] / "ci_tools"

ONNX_SAYS = ("Data of TensorProto ( tensor name: w1) should be stored in /tmp/pytest-of-root/pytest-8/test_external_"
             "data_from_a_pip_0/cache/work/src/ext/ext_model/model.onnx.data, but it has multiple hard links, "
             "indicating a potential hardlink attack.")


def test_clip_cuts_at_a_word_and_says_so():
    got = clip(ONNX_SAYS, 200)
    assert len(got) <= 200 and got.endswith("…")
    assert ONNX_SAYS.startswith(got[:-1]) and ONNX_SAYS[len(got) - 1] in " ,"  # the word is whole
    assert clip("\n\n  first line  \nsecond", 200) == "first line"
    assert clip("short", 10) == "short" and clip("", 10) == ""
    assert clip("x" * 50, 20) == "x" * 19 + "…"  # one long word: cut, and said


# text sliced by length for a message: any [:N] of 20 or more (a hash's first 12 characters are not text), unless the
# line says what else it is
SLICED = re.compile(r"\[:(?:[2-9]\d|\d{3,})\]")
NOT_TEXT = ("# a job name", "# a list", "# a name: the matrix's limit")


def test_no_error_text_is_sliced_by_length():
    """Every place that shortens text for a message goes through clip (or the standalone runtime's twin)."""
    found = [f"{p.relative_to(PKG.parent)}:{n}: {line.strip()}" for p in sorted(PKG.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if SLICED.search(line) and not line.rstrip().endswith(NOT_TEXT)]
    assert not found, "shorten with ci_tools.util.text.clip:\n" + "\n".join(found)
