"""A packaged release folder made with the real archive writer, for publish/fetch tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ci_tools.release.archive import make_tar_bz2
from ci_tools.sources.store import sha256_file

SDK = "2.51.0.260929181845"


def make_release(folder: Path, tag: str = "v1.0.0", socs=("SM8750", "SM8550"), payload: int = 300_000,
                 seed: int | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    assets = []
    rnd = os.urandom if seed is None else (lambda n: (bytes([seed]) * n))
    for soc in socs:
        stem = f"vad-{soc.lower()}-fp16-qnn{SDK}"
        path = make_tar_bz2(folder / f"{stem}.tar.bz2", [
            (f"{stem}/vad_ctx.onnx", b"stub for " + soc.encode()),
            (f"{stem}/vad_ctx_qnn.bin", rnd(payload) + soc.encode()),
            (f"{stem}/metadata.json", json.dumps({"chip": {"name": soc}}).encode())])
        aliases = {"SM8750": ["sm8750", "sm8750-ac", "qualcomm-snapdragon-8-elite"],
                   "SM8550": ["sm8550", "qualcomm-snapdragon-8gen2"]}[soc]
        assets.append({"name": path.name, "kind": "model", "model": "vad", "soc": soc, "soc_aliases": aliases,
                       "precision": "fp16", "sdk_version": SDK, "graphs": ["vad"], "cosine": 0.9999,
                       "compile_seconds": 1.0})
    libs = make_tar_bz2(folder / f"qnn-libs-{SDK}.tar.bz2", [
        (f"qnn-libs-{SDK}/libQnnHtp.so", b"\x7fELF htp"),
        (f"qnn-libs-{SDK}/libQnnHtpV79Skel.so", b"\x7fELF skel")])
    assets.append({"name": libs.name, "kind": "qnn-libs", "sdk_version": SDK, "htp_archs": ["v73", "v79"]})
    for a in assets:
        a["size"], a["sha256"] = (folder / a["name"]).stat().st_size, sha256_file(folder / a["name"])
    manifest = {"manifest_version": 1, "tag": tag, "toolkit": "qnn-release test", "sdk_versions": [SDK],
                "skipped": [], "assets": sorted(assets, key=lambda a: a["name"])}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (folder / "SHA256SUMS").write_text("".join(f"{a['sha256']}  {a['name']}\n" for a in manifest["assets"]))
    (folder / "RELEASE_NOTES.md").write_text(f"# {tag}\n\ntest release\n")
    return folder
