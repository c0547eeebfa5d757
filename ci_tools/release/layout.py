"""Where each file of a release goes, within GitHub's limits for a release.

GitHub holds at most 1,000 assets per release (community discussion #165616; sherpa-onnx continues its QNN
binaries in `asr-models-qnn-binary-2` and `-3` by hand), and each asset must be under 2 GiB ("Each file
included in a release must be under 2 GiB", GitHub docs, "About releases"). A catalogue goes over both:
100 models x 10 chips is 1,000 archives before the runtime libraries, notes and page. So:

- a file over the size limit is uploaded in pieces (``<name>.001``, ``.002`` ...), each with its sha256 in the
  manifest beside the whole file's; a client joins them and checks both;
- the release of the tag holds the manifest, SHA256SUMS, the notes, the page, the sh client and the runtime
  libraries, then as many archives as fit; the rest go to linked releases ``<tag>-part2``, ``-part3`` ...
  (each a pre-release, never "latest"), and each asset says in the manifest which release holds it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackageError
from ..sources.store import sha256_file
from ..util.github_limits import MAX_ASSET_BYTES, MAX_ASSETS, RESERVED
from .manifest import LibsAsset, ModelAsset, Piece

CHUNK = 1 << 20


@dataclass(frozen=True)
class Limits:
    max_assets: int = MAX_ASSETS
    max_asset_bytes: int = MAX_ASSET_BYTES


def part_tag(tag: str, k: int) -> str:
    """The tag of the k-th release of ``tag`` (k >= 2): v1.2.0-part2 (a pre-release by semver, never "latest")."""
    return f"{tag}-part{k}"


def split_large(folder: Path, assets: list, limits: Limits) -> list:
    """Every asset over ``max_asset_bytes`` written as pieces of at most that size (the whole file goes: what is
    uploaded is the pieces), with their sha256; the others as they are."""
    out = []
    for a in assets:
        path = folder / a.name
        if a.size <= limits.max_asset_bytes:
            out.append(a)
            continue
        pieces = []
        with open(path, "rb") as f:
            k = 0
            while True:
                k += 1
                piece = folder / f"{a.name}.{k:03d}"
                left = limits.max_asset_bytes
                with open(piece, "wb") as g:
                    while left > 0:
                        chunk = f.read(min(CHUNK, left))
                        if not chunk:
                            break
                        g.write(chunk)
                        left -= len(chunk)
                if piece.stat().st_size == 0:
                    piece.unlink()
                    break
                pieces.append(Piece(name=piece.name, size=piece.stat().st_size, sha256=sha256_file(piece)))
                if left > 0:
                    break
        if len(pieces) > 999:
            raise PackageError(f"{a.name}: {a.size} bytes would be {len(pieces)} pieces of "
                               f"{limits.max_asset_bytes} bytes", hint="split the model into graphs")
        os.unlink(path)
        out.append(a.model_copy(update={"pieces": pieces}))
    return out


def place(assets: list, tag: str | None, limits: Limits) -> tuple[list, list[str]]:
    """(the assets, each with the release that holds it, the part tags in order): the runtime libraries and then
    the archives by name fill the tag's release, then ``<tag>-part2``, ``-part3`` ...; an asset's pieces stay
    in one release."""
    def units(a) -> int:
        return len(a.pieces) if a.pieces else 1

    ordered = sorted(assets, key=lambda a: (not isinstance(a, LibsAsset), a.name))
    room, k, parts, placed = limits.max_assets - RESERVED, 1, [], []
    for a in ordered:
        if units(a) > limits.max_assets:
            raise PackageError(f"{a.name}: {units(a)} pieces, more than a release holds ({limits.max_assets})")
        if units(a) > room:
            if not tag:
                raise PackageError(f"the release needs more than {limits.max_assets} assets: it continues in linked "
                                   "releases named after its tag", hint="package with --tag")
            k += 1
            parts.append(part_tag(tag, k))
            room = limits.max_assets
        room -= units(a)
        placed.append(a if k == 1 else a.model_copy(update={"release": parts[-1]}))
    return placed, parts


def uploads(assets: list) -> list[tuple[str, str, int, str | None]]:
    """Every file to upload for the assets: (name, sha256, size, the release tag or None for the tag's own)."""
    out = []
    for a in assets:
        for f in (a.pieces or [a]):
            out.append((f.name, f.sha256, f.size, a.release))
    return out


__all__ = ["MAX_ASSETS", "MAX_ASSET_BYTES", "Limits", "ModelAsset", "part_tag", "place", "split_large", "uploads"]
