"""Text as an error line shows it."""

from __future__ import annotations


def clip(text: object, limit: int = 200) -> str:
    """The first non-empty line of ``text``, at most ``limit`` characters, cut at a word boundary with an ellipsis
    when it is longer: a message from a library is never cut mid-word ("... multiple hard links, indicat")."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    if len(line) <= limit:
        return line
    head = line[:limit - 1]
    cut = head.rsplit(" ", 1)[0] if " " in head[limit // 2:] else head
    return cut.rstrip(" ,;:") + "…"
