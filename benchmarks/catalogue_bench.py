"""What a team's whole catalogue costs qnn-release itself: 10, 100 and 1,000 models x every catalog chip.

Synthetic small graphs: every model is the same 2-layer MLP file (a path source), on all 55 chips of the
catalog, w8a16 (the precision every HTP arch builds). For each size, in a fresh process (so its peak memory is its own):
  plan      the matrix expanded into targets (matrix/plan.py)
  render    every workflow file (workflows/render.py), with GitHub's limits checked
  archives  one tar.bz2 per model and chip (the archive writer package uses; 1 KB synthetic binaries)
  layout    pieces and linked releases for GitHub's 1,000 assets per release (release/layout.py)
  manifest  manifest.json validated and written
  page      the release page (index.html) for the whole grid, and its size
  publish   every asset uploaded to the stand-in GitHub, a draft until complete, then published
Prints a table (seconds and peak RSS per size) and the growth from one size to the next; timing lives here,
not in the tests. Usage: python benchmarks/catalogue_bench.py [--sizes 10,100,1000] [--no-publish-above 1000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def child(n: int, work: Path, publish: bool) -> dict:
    import yaml

    from ci_tools.catalog.socs import load_catalog
    from ci_tools.matrix.plan import plan
    from ci_tools.matrix.schema import load_matrix
    from ci_tools.release.archive import make_tar_bz2
    from ci_tools.release.layout import Limits, place, split_large, uploads
    from ci_tools.release.manifest import Manifest, ModelAsset, manifest_json
    from ci_tools.release.page import page_data, render_page
    from ci_tools.sources.store import sha256_file
    from ci_tools.workflows.render import render_all
    from tests.conftest import SDK_SECTION
    from tests.support import models

    cat = load_catalog()
    chips = [c.name for c in cat.socs]  # all 55; w8a16, which every HTP arch builds (fp16 needs v69+)
    (work / "models").mkdir(parents=True)
    f = models.mlp(work / "models" / "m.onnx", dynamic_batch=False)
    sha = sha256_file(f)
    entries = [{"name": f"m{i:04d}", "description": "synthetic", "license": "MIT",
                "source": {"kind": "path", "path": "models/m.onnx", "sha256": sha},
                "graphs": [{"name": "g", "file": "m.onnx"}], "chips": chips, "precisions": ["w8a16"],
                "generated_inputs_ok": "a synthetic benchmark graph"} for i in range(n)]
    (work / "matrix").mkdir()
    (work / "matrix" / "models.yaml").write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION,
                                                                  "models": entries}, sort_keys=False))
    t: dict[str, float] = {}
    start = time.perf_counter()
    loaded = load_matrix(work / "matrix" / "models.yaml")
    targets = plan(loaded)
    t["plan"] = time.perf_counter() - start

    start = time.perf_counter()
    files = render_all(loaded)
    t["render"] = time.perf_counter() - start

    release = work / "release"
    release.mkdir()
    start = time.perf_counter()
    assets = []
    payload = os.urandom(1024)
    for target in targets:
        stem = f"{target.model.name}-{target.soc.name.lower()}-w8a16-qnn2.51.0.260929"
        path = make_tar_bz2(release / f"{stem}.tar.bz2", [(f"{stem}/g_ctx_qnn.bin", payload + stem.encode())])
        assets.append(ModelAsset(kind="model", name=path.name, size=path.stat().st_size, sha256=sha256_file(path),
                                 model=target.model.name, soc=target.soc.name,
                                 soc_aliases=[target.soc.name.lower(), *target.soc.aliases], precision="w8a16",
                                 sdk_version="2.51.0.260929", graphs=["g"], verified=True,
                                 verified_on="generated-inputs", cosine=0.99999, compile_seconds=1.0))
    t["archives"] = time.perf_counter() - start

    start = time.perf_counter()
    placed, parts = place(split_large(release, assets, Limits()), "v1.0.0", Limits())
    t["layout"] = time.perf_counter() - start

    start = time.perf_counter()
    manifest = Manifest(manifest_version=2 if parts else 1, tag="v1.0.0", toolkit="bench",
                        sdk_versions=["2.51.0.260929"], parts=parts, assets=sorted(placed, key=lambda a: a.name))
    (release / "manifest.json").write_text(json.dumps(manifest_json(manifest), indent=2))
    (release / "SHA256SUMS").write_text("".join(f"{s}  {n}\n" for n, s, _, _ in uploads(manifest.assets)))
    t["manifest"] = time.perf_counter() - start

    start = time.perf_counter()
    page = render_page(page_data(manifest, {}, None, {}, None))
    (release / "index.html").write_text(page)
    t["page"] = time.perf_counter() - start

    if publish:
        from ci_tools.release.github import Connection
        from ci_tools.release.publish import publish as do_publish
        from tests.fakes.fake_github import FakeGitHub

        with FakeGitHub(page_size=100) as gh:
            start = time.perf_counter()
            do_publish(release, "acme/catalogue", "v1.0.0",
                       via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
            t["publish"] = time.perf_counter() - start
            releases = len(gh.state.releases)
    else:
        releases = 1 + len(parts)
    return {"models": n, "chips": len(chips), "targets": len(targets), "seconds": t,
            "workflow_files": len(files), "release_yaml_kb": round(len(files[Path(".github/workflows/release.yaml")])
                                                                   / 1024, 1),
            "manifest_kb": round((release / "manifest.json").stat().st_size / 1024),
            "page_kb": round(len(page.encode()) / 1024), "releases": releases,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--no-publish-above", type=int, default=1000, help="skip publish above this many models")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.work, args.publish)))
        return
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, __file__, "--child", str(n), "--work", tmp,
                                *(["--publish"] if n <= args.no_publish_above else [])],
                               capture_output=True, text=True, cwd=REPO)
            if r.returncode != 0:
                sys.exit(f"{n} models: {r.stderr[-2000:]}")
            rows.append(json.loads(r.stdout.splitlines()[-1]))
    stages = ["plan", "render", "archives", "layout", "manifest", "page", "publish"]
    print(f"{'models':>7} {'targets':>8} " + " ".join(f"{s:>9}" for s in stages)
          + f" {'peak MB':>8} {'page KB':>8} {'manifest KB':>11} {'releases':>8} {'release.yaml KB':>15}")
    for row in rows:
        print(f"{row['models']:>7} {row['targets']:>8} " + " ".join(
            f"{row['seconds'][s]:>8.2f}s" if s in row["seconds"] else f"{'-':>9}" for s in stages)
            + f" {row['peak_rss_mb']:>8} {row['page_kb']:>8} {row['manifest_kb']:>11} {row['releases']:>8}"
              f" {row['release_yaml_kb']:>15}")
    for a, b in itertools.pairwise(rows):
        k = b["targets"] / a["targets"]
        growth = ", ".join(f"{s} x{b['seconds'][s] / max(a['seconds'][s], 1e-9):.1f}" for s in stages
                           if s in a["seconds"] and s in b["seconds"])
        print(f"{a['models']} -> {b['models']} models ({k:.0f}x the targets): {growth}")


if __name__ == "__main__":
    main()
