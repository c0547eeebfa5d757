"""The manifest contract in Python (ci_tools/release/contract.py): each rule refused by name, what package makes
accepted, parsing bounded. tests/test_contract.py runs the same rules against every client."""

from __future__ import annotations

import json

import pytest

from ci_tools.errors import PackageError
from ci_tools.release.contract import RULES, check_manifest, parse_manifest

SHA = "0" * 64


def _manifest() -> dict:
    name = "vad-sm8750-fp16-qnn2.51.0.tar.bz2"
    return {"manifest_version": 2, "tag": "v1", "parts": ["v1-part2"], "assets": [
        {"name": name, "kind": "model", "model": "vad", "soc": "SM8750", "precision": "fp16", "sdk_version": "2.51.0",
         "size": 3, "sha256": SHA, "release": "v1-part2", "qnn_runtime": "2.51.0",
         "pieces": [{"name": f"{name}.001", "size": 2, "sha256": SHA},
                    {"name": f"{name}.002", "size": 1, "sha256": SHA}]},
        {"name": "qnn-libs-2.51.0.tar.bz2", "kind": "qnn-libs", "sdk_version": "2.51.0", "size": 9, "sha256": SHA}]}


def _rule(change, tag: str | None = "v1") -> str:
    m = _manifest()
    change(m)
    with pytest.raises(PackageError) as e:
        check_manifest(parse_manifest(json.dumps(m).encode()), tag)
    return e.value.message.rsplit("(rule ", 1)[1].rstrip(")")


def test_what_package_makes_passes():
    assert len(check_manifest(parse_manifest(json.dumps(_manifest()).encode()), "v1")) == 2


@pytest.mark.parametrize(("rule", "change"), [
    ("json", lambda m: m.update(x=json.loads("[" * 16 + "]" * 16))),
    ("json", lambda m: m.update(x="s" * 5000)),
    ("version", lambda m: m.update(manifest_version=True)),
    ("tag", lambda m: m.update(tag="v2")),
    ("parts", lambda m: m.update(parts=["v1-part2/../../x"])),
    ("assets", lambda m: m.update(assets="all")),
    ("name", lambda m: m["assets"][1].update(name="qnn-libs.zip")),
    ("size", lambda m: m["assets"][1].update(size=True)),
    ("pieces", lambda m: m["assets"][0]["pieces"].reverse()),
    ("release", lambda m: m["assets"][1].update(release="v1-part3")),
    ("model", lambda m: m["assets"][0].update(qnn_runtime="latest")),
])
def test_each_rule_is_refused_by_name(rule, change):
    assert rule in RULES and _rule(change) == rule


def test_parsing_is_bounded():
    for data in (b"[" * 100_000 + b"]" * 100_000, b"{" + b"[" * 200 + b"]" * 200 + b"}", b"{", b"[]", b'"x"'):
        with pytest.raises(PackageError, match=r"\(rule json\)"):
            parse_manifest(data)
