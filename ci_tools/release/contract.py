"""The manifest contract, written once: what every client accepts from a release's ``manifest.json``.

``qnn-release fetch`` (``check_manifest``), ``qnn-fetch.sh`` (its awk reader) and the Java resolver enforce the
same rules before any download, each refusal naming its rule (``rule parts``), exit code 9. The JSON Schema
(``ci_tools/schemas/manifest.schema.json``) says the fields; these rules say what a schema cannot: names are
exactly what ``package`` makes (a name from a manifest goes into a URL and a path), counts, sizes and depth are
bounded (a manifest cannot make a client write, download or parse without end). The bounds here are rendered
into the sh and Java clients and into docs/reference/manifest-contract.md, so the three cannot drift apart;
tests/test_contract.py runs the same hostile manifests against all of them.
"""

from __future__ import annotations

import json
import re
from typing import TypeGuard

from ..errors import PackageError
from ..util.precision import PRECISIONS
from ..util.text import clip

MAX_MANIFEST_BYTES = 128 << 20  # 100,000 assets at ~640 bytes each (measured: 28 MB for 44,000)
MAX_DEPTH = 16  # what package writes: 5 (manifest > assets > asset > pieces > piece)
MAX_STRING = 4096  # characters in one JSON string (no name, version or note of a manifest comes near)
MAX_NUMBER = 32  # characters in one JSON number
MAX_GAP = 256  # characters between two strings, a run of blanks counted as one (what package writes: 22 at most)
MAX_ASSETS_LISTED = 100_000  # 100 linked releases of GitHub's 1,000 assets
MAX_PARTS = 100
MAX_PIECES = 999  # <name>.001 ... .999
MAX_ASSET_BYTES = 1 << 40  # what a manifest may declare for one asset (1 TiB): bounds what a download writes
NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]*"  # a tag or file name: no '/', no leading '.', nothing to escape
ASSET = re.compile(NAME + r"\.tar\.bz2")
SHA = re.compile(r"[0-9a-f]{64}")
VERSION = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6}){1,3}")  # a QNN runtime: 2.50.40

# rule -> what it says; the order is the order clients check in
RULES: dict[str, str] = {
    "json": f"`manifest.json` is one strict JSON object (RFC 8259: no NaN, no trailing commas, no key twice in one "
            f"object) in ASCII text (package writes every other character as `\\uXXXX`), of at most "
            f"{MAX_MANIFEST_BYTES >> 20} MiB, nested at most {MAX_DEPTH} deep, no string longer than {MAX_STRING:,} "
            f"characters, no number longer than {MAX_NUMBER}, at most {MAX_GAP} characters between two strings (a "
            "run of blanks counted as one): parsing is bounded and linear in every client.",
    "version": "`manifest_version` is 1 or 2 (absent: 1).",
    "tag": "`tag`, when present, is the tag the manifest was read from (`publish` refuses to put a manifest under "
           "another tag).",
    "parts": f"`parts`, when present, is a list of at most {MAX_PARTS} tags, exactly `<tag>-part2`, `<tag>-part3` "
             "... in order: a part's tag goes into a URL, so nothing else is ever followed.",
    "assets": f"`assets` is a list of at most {MAX_ASSETS_LISTED:,} objects.",
    "name": "every asset's `name` is a plain file name (`[A-Za-z0-9][A-Za-z0-9._+-]*.tar.bz2`: no `/`, no leading "
            "`.`), listed once, with a `sha256` of 64 lower-case hex digits.",
    "size": f"every asset's `size` is an integer from 0 to {MAX_ASSET_BYTES:,} (1 TiB): a download "
            "never writes more than its declared size.",
    "release": "an asset's `release`, when present, is one of `parts`.",
    "pieces": f"an asset's `pieces`, when present, are 1 to {MAX_PIECES} objects named exactly `<name>.001`, "
              "`.002` ... in order, each with a `sha256` and an integer `size`, the sizes adding up to the asset's "
              "`size`.",
    "model": "a `model` asset has a `precision` of " + ", ".join(f"`{p}`" for p in PRECISIONS)
             + ", an `sdk_version` string and, when present, a `qnn_runtime` of dotted numbers (`2.50.40`).",
}
HINT = "the release was not made by qnn-release package; nothing was downloaded from it"


def refuse(rule: str, detail: str) -> PackageError:
    assert rule in RULES, rule
    return PackageError(f"manifest.json: {detail} (rule {rule})", hint=HINT)


STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
BLANKS = re.compile(r"[ \t\r\n]+")
TEXT = re.compile(rb"[^\t\n\r\x20-\x7e]")


class _NotStrict(ValueError):
    pass


def _pairs(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _NotStrict("a key listed twice in one object")
    return dict(pairs)


def _constant(name: str):
    raise _NotStrict(f"{name} is not JSON")


def _number(kind):
    def parse(text: str):
        if len(text) > MAX_NUMBER:
            raise _NotStrict(f"a number of {len(text):,} characters (at most {MAX_NUMBER})")
        return kind(text)
    return parse


def parse_manifest(data: bytes) -> object:
    """The manifest's JSON, parsed within the ``json`` rule's bounds (size, text, gaps, then the parse itself)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise refuse("json", f"{len(data):,} bytes (at most {MAX_MANIFEST_BYTES:,})")
    if TEXT.search(data):  # tab, line feed, carriage return and printable ASCII: nothing else
        raise refuse("json", "not ASCII text (package writes every other character as \\uXXXX)")
    text = data.decode("ascii")
    if any(len(BLANKS.sub(" ", gap)) > MAX_GAP for gap in STRING.split(text)):
        raise refuse("json", f"more than {MAX_GAP} characters between two strings")
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_number(int),
                           parse_float=_number(float))
    except _NotStrict as e:
        raise refuse("json", f"not strict JSON: {e}") from None
    except (ValueError, RecursionError):  # nested past Python's recursion limit is not JSON package writes either
        raise refuse("json", "not JSON, or nested too deep") from None
    stack = [(value, 1)]
    while stack:  # iterative: a deep document cannot exhaust the stack here
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise refuse("json", f"nested more than {MAX_DEPTH} deep")
            if isinstance(item, dict):
                stack += [(k, depth + 1) for k in item] + [(v, depth + 1) for v in item.values()]
            else:
                stack += [(v, depth + 1) for v in item]
        elif isinstance(item, str) and len(item) > MAX_STRING:
            raise refuse("json", f"a string of {len(item):,} characters (at most {MAX_STRING:,})")
    if not isinstance(value, dict):
        raise refuse("json", "not a JSON object")
    return value


def _int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _sha(x: object) -> bool:
    return isinstance(x, str) and SHA.fullmatch(x) is not None


def _parts(manifest: dict, tag: str | None) -> list[str]:
    from .layout import part_tag

    parts = manifest.get("parts")
    parts = [] if parts is None else parts
    if not isinstance(parts, list) or len(parts) > MAX_PARTS or not all(isinstance(p, str) for p in parts):
        raise refuse("parts", f"parts is not a list of at most {MAX_PARTS} tags")
    want = [part_tag(tag, k) for k in range(2, len(parts) + 2)] if tag else parts
    for got, expected in zip(parts, want):
        if got != expected or not re.fullmatch(NAME, got):
            raise refuse("parts", f"part {clip(got, 80)!r} is not a linked release of {tag or 'this tag'} "
                         f"(expected {', '.join(want[:3])} ... in order)")
    return parts


def _pieces(name: str, size: object, pieces: object) -> None:
    ok = isinstance(pieces, list) and 0 < len(pieces) <= MAX_PIECES
    listed: list = pieces if isinstance(pieces, list) and ok else []
    for i, x in enumerate(listed, 1):
        if not (isinstance(x, dict) and x.get("name") == f"{name}.{i:03d}" and _sha(x.get("sha256"))
                and _int(x.get("size")) and 0 <= x["size"] <= MAX_ASSET_BYTES):
            ok = False
            break
    if not ok or sum(x["size"] for x in listed) != size:
        raise refuse("pieces", f"asset {name!r} has pieces that are not {name}.001, .002 ... in order (at most "
                     f"{MAX_PIECES}), each with its sha256 and size, adding up to the asset's size")


def _asset(a: object, parts: list[str], seen: set[str]) -> None:
    name = a.get("name") if isinstance(a, dict) else None
    if not isinstance(a, dict) or not isinstance(name, str) or not ASSET.fullmatch(name) or name in seen \
            or not _sha(a.get("sha256")):
        raise refuse("name", f"asset {clip(name, 80)!r} has no plain .tar.bz2 name, is listed twice, or has no "
                     "sha256")
    seen.add(name)
    size = a.get("size")
    if not (_int(size) and 0 <= size <= MAX_ASSET_BYTES):
        raise refuse("size", f"asset {name!r} declares size {clip(size, 40)!r} (expected 0 to 1 TiB)")
    if a.get("pieces") is not None:
        _pieces(name, size, a["pieces"])
    if a.get("release") is not None and (not isinstance(a["release"], str) or a["release"] not in parts):
        raise refuse("release", f"asset {name!r} is in release {clip(a['release'], 80)!r}, which is not one of the "
                     "manifest's parts")
    if a.get("kind") == "model" and (a.get("precision") not in PRECISIONS or not isinstance(a.get("sdk_version"), str)
                                     or (a.get("qnn_runtime") is not None
                                         and not (isinstance(a["qnn_runtime"], str)
                                                  and VERSION.fullmatch(a["qnn_runtime"])))):
        raise refuse("model", f"model asset {name!r} has no precision or sdk_version, or a qnn_runtime that is not "
                     "a version")


def check_manifest(manifest: object, tag: str | None = None) -> list[dict]:
    """The manifest's assets, once every rule holds (``tag``: the release it was read from)."""
    if not isinstance(manifest, dict):
        raise refuse("json", "not a JSON object")
    version = manifest.get("manifest_version")
    if version is not None and (type(version) is not int or version not in (1, 2)):
        raise PackageError(f"manifest.json: manifest_version {clip(manifest.get('manifest_version'), 40)!r}; this "
                           "qnn-release reads 1 and 2 (rule version)", hint="upgrade qnn-release")
    if tag is not None and manifest.get("tag") is not None and manifest["tag"] != tag:
        raise refuse("tag", f"it says tag {clip(manifest['tag'], 80)!r}, but was read from {tag}")
    parts = _parts(manifest, tag if tag is not None else manifest.get("tag")
                   if isinstance(manifest.get("tag"), str) else None)
    assets = manifest.get("assets")
    if not isinstance(assets, list) or len(assets) > MAX_ASSETS_LISTED:
        raise refuse("assets", f"no list of at most {MAX_ASSETS_LISTED:,} assets")
    seen: set[str] = set()
    for a in assets:
        _asset(a, parts, seen)
    return assets


def contract_page() -> str:
    """docs/reference/manifest-contract.md (without its generated header)."""
    rows = "\n".join(f"| `{rule}` | {text} |" for rule, text in RULES.items())
    return ("# The manifest contract\n\n"
            "What `qnn-release fetch`, `qnn-fetch.sh` and the Java resolver accept from a release's "
            "`manifest.json`, checked in this order before anything else is downloaded. A manifest that breaks a "
            "rule is refused with exit code 9 and a one-line error naming the rule (`rule parts`); no client "
            "downloads anything it names. The fields themselves are in the JSON Schema, "
            "`ci_tools/schemas/manifest.schema.json`; the bounds below are rendered into the sh and Java clients "
            "from `ci_tools/release/contract.py`.\n\n"
            "| rule | what holds |\n|---|---|\n" + rows + "\n\n"
            "Beyond the manifest, every client: downloads only from the release's own repository, its tag and the "
            "parts above; checks each file's sha256 (and a piece's, then the joined whole's) before using it; never "
            "writes more than an asset's declared size; extracts only plain files and folders inside the archive's "
            "own folder.\n")
