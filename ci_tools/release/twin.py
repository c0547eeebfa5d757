"""A model's twin as a release asset: ``<model>-<precision>-onnx.tar.bz2``, copied from what the build measured and
kept (``builder/twin.py``): its files, ``twin.json`` from its record, the README rendered from it, the licence.
Nothing is run or measured here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..builder.twin import TWINS, twin_record
from ..errors import PackageError
from .archive import make_tar_bz2
from .templating import render

AGAIN = "run `qnn-release build` again: it measures the twins (nothing recompiles)"


def twin_archive(tmp: Path, out: Path, stem: str, expect: dict[str, Any], licence: bytes
                 ) -> tuple[Path, dict] | None:
    """``<stem>.tar.bz2`` in ``tmp`` from the twin the build kept in ``out``; ``expect``: what it must be (the
    model, the chip it is measured for, each graph's sha256 the build report names, or None, the build: its
    report's ``started``). Returns (the archive,
    twin.json's values), or None when the model's recipe ships no twin."""
    record = kept_twin(out, stem, expect)
    if record.get("none"):
        return None
    values, folder = record["values"], out / TWINS / stem
    members: list[tuple[str, Path | bytes]] = []
    for name in record["files"]:
        if not (folder / name).is_file():
            raise PackageError(f"{stem}: {folder / name} is gone from the twin the build kept", hint=AGAIN)
        members.append((f"{stem}/{name}", folder / name))
    readme = render(record["readme"], model=expect["model"], twin=values, **record["context"])
    members += [(f"{stem}/twin.json", (json.dumps(values, indent=2, sort_keys=True) + "\n").encode()),
                (f"{stem}/README.md", readme.encode()), (f"{stem}/LICENSE", licence)]
    return make_tar_bz2(tmp / f"{stem}.tar.bz2", members), values


def kept_twin(out: Path, stem: str, expect: dict[str, Any]) -> dict:
    """The build's record of a twin, refused when it is missing, failed, or not of this build's graphs and chip."""
    path = twin_record(out, stem)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise PackageError(f"{stem}: the build kept no twin ({path})", hint=AGAIN) from None
    except (OSError, ValueError) as e:
        raise PackageError(f"{path}: unreadable ({type(e).__name__})", hint=AGAIN) from None
    if not isinstance(record, dict):
        raise PackageError(f"{path}: not a twin record", hint=AGAIN)
    if record.get("build") != expect["build"]:  # an earlier build's (this one was interrupted before its twins)
        raise PackageError(f"{stem}: the twin kept in {path} is of another build (started {record.get('build')}, "
                           f"not {expect['build']})", hint=AGAIN)
    if record.get("error"):
        raise PackageError(f"{record['error']} (the build's record: {path})", hint=record.get("hint") or AGAIN)
    if record.get("none"):  # the recipe ships none
        return record
    graphs = {g.get("name"): g.get("sha256") for g in record.get("values", {}).get("graphs", [])}
    # a graph's sha256 is checked where the report names it (a QDQ graph's: the build's record of this build)
    if record.get("soc") != expect["soc"] or graphs.keys() != expect["graphs"].keys() or any(
            sha is not None and graphs[g] != sha for g, sha in expect["graphs"].items()):
        raise PackageError(f"{stem}: the twin the build kept ({path}) is not of this build's graphs for "
                           f"{expect['soc']}", hint=AGAIN)
    return record
