"""``qnn-release pin``: every sha256 of a matrix's sources and samples filled in or updated in one go.

Each file of each model's source and samples (pip and Hub files, a URL, a repository path; the sources of a
``parts`` source) is fetched as a build would fetch it, with the store told the pins are being found
(``SourceStore.pinning``), and its digest is written onto the line that pins it: the value replaced, the key,
comments and layout kept. What it changed is said line by line. A model of an included matrix file is pinned from
that file (``pin --matrix matrix/tts.yaml``). Not covered: the digests of ``join`` and ``unpack`` entries (the
joined or unpacked file's own pin), which a build then names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..matrix.schema import HfSource, LoadedMatrix, PartsSource, PathSource, PipSource, UrlSource
from ..util.files import write_atomic
from ..util.yaml_lines import load_with_lines
from .store import SourceStore

Loc = tuple


@dataclass(frozen=True)
class Pin:
    loc: Loc  # where the pin is in the matrix (models, 0, source, files, <name>)
    old: str | None
    new: str

    @property
    def where(self) -> str:
        return ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in self.loc).replace(".[", "[")


def _pins_of(store: SourceStore, model, src, at: Loc) -> list[Pin]:
    """(where, the pin, the file's digest) for every file ``src`` pins."""
    if isinstance(src, PartsSource):
        return [p for j, sub in enumerate(src.sources) for p in _pins_of(store, model, sub, (*at, "sources", j))]
    got = {name: blob.name for name, blob in store.fetch_source(model, src).items()}
    if isinstance(src, (PipSource, HfSource)):
        return [Pin((*at, "files", name), sha, got[name]) for name, sha in src.files.items()]
    if isinstance(src, (UrlSource, PathSource)):
        (digest,) = got.values()
        return [Pin((*at, "sha256"), src.sha256, digest)]
    return []


def find_pins(loaded: LoadedMatrix, cache: Path, models: list[str] | None = None) -> list[Pin]:
    """Every pin of the matrix file's own models (not its includes'), with the digest the file has."""
    store = SourceStore(cache, loaded.root)
    store.pinning = True
    own = len(load_with_lines(loaded.path, "matrix file")[0].get("models") or [])
    out: list[Pin] = []
    for i, model in enumerate(loaded.matrix.models[:own]):
        if models and model.name not in models:
            continue
        out += _pins_of(store, model, model.source, ("models", i, "source"))
        samples = getattr(model, "samples", None)
        if samples is not None and getattr(samples, "source", None) is not None:
            out += _pins_of(store, model, samples.source, ("models", i, "samples", "source"))
    return out


VALUE = re.compile(r"^(?P<head>\s*(?:-\s+)?[^#]*?:\s+)(?P<value>\"[^\"]*\"|'[^']*'|[^\s#]+)(?P<tail>.*)$")


def write_pins(path: Path, pins: list[Pin]) -> list[Pin]:
    """The changed pins written onto their own lines of ``path`` (atomically); the ones written."""
    _, lines = load_with_lines(path, "matrix file")
    text = path.read_text().splitlines(keepends=True)
    done = []
    for p in pins:
        if p.old == p.new or p.loc not in lines:
            continue
        n = lines[p.loc] - 1
        m = VALUE.match(text[n].rstrip("\n"))
        if m is None:
            continue
        text[n] = f"{m['head']}{p.new}{m['tail']}" + ("\n" if text[n].endswith("\n") else "")
        done.append(p)
    if done:
        write_atomic(path, "".join(text))
    return done
