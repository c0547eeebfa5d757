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


def step_done(what: str, unit: str, done: int, total: int, started: float) -> None:
    """One line on stderr per finished step of a long check (a sentence, a clip window), with an estimate of what
    is left from the steps so far: a check of many minutes is never silent."""
    import sys
    import time

    elapsed = time.monotonic() - started
    left = f", about {elapsed / done * (total - done):.0f} s left" if 0 < done < total else ""
    sys.stderr.write(f"  {what}: {unit} {done}/{total} done ({elapsed:.0f} s{left})\n")
    sys.stderr.flush()
