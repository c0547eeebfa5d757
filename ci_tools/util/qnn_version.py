"""QNN / QAIRT version strings, read in one place.

They come in many spellings: the matrix's pin ``2.40.0.251030``, a binary's ``v2.45.40.251225135753_193295``,
a route label ``onnxruntime-qnn 2.7.0 (QNN 2.51.0)``, a chip's minimum ``2.45``, AI Hub's ``2.45``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class QnnVersion:
    major: int
    minor: int
    patch: int | None = None
    build: str | None = None  # the build stamp's digits, as written (251030, 251225135753)

    @property
    def core(self) -> str | None:
        """``major.minor.patch.build`` with the build's date (its first 6 digits), or None when it has none."""
        if self.patch is None or self.build is None or len(self.build) < 6:
            return None
        return f"{self.major}.{self.minor}.{self.patch}.{self.build[:6]}"


def parse(text: str | None) -> QnnVersion | None:
    """The first version in ``text`` (after any word and a ``v``), or None."""
    m = _VERSION.search(text or "")
    if m is None:
        return None
    return QnnVersion(int(m[1]), int(m[2]), int(m[3]) if m[3] else None, m[4])


def core(text: str | None) -> str | None:
    """``major.minor.patch.build`` of a QNN version, whatever build stamp follows (v2.40.0.251030123456_1)."""
    v = _leading(text)
    return v.core if v else None


def triple(text: str | None) -> tuple[int, int, int] | None:
    """major.minor.patch ("2.45.40.251225135753_193295" -> (2, 45, 40)); None without a patch number."""
    v = _leading(text)
    return (v.major, v.minor, v.patch) if v and v.patch is not None else None


def major_minor(text: str | None) -> tuple[int, int] | None:
    v = _leading(text)
    return (v.major, v.minor) if v else None


def numbers(text: str | None) -> tuple[int, ...]:
    """The version in a label as numbers to compare ("QNN 2.51.0" -> (2, 51, 0); "2.45" -> (2, 45))."""
    v = parse(text)
    if v is None:
        return ()
    return (v.major, v.minor) if v.patch is None else (v.major, v.minor, v.patch)


def _leading(text: str | None) -> QnnVersion | None:
    """A version that the text starts with (a ``v`` allowed): a bare version string, not a label."""
    text = (text or "").strip()
    return parse(text) if re.match(r"v?\d", text) else None
