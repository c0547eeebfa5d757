"""The release page at catalogue size: a synthetic release of 10, 100 and 1,000 models on five chips (fp16), each
archive's metadata a copy of a real one (the numbers a real cell shows), about 3 % of the targets incomplete and 2 %
verified on generated inputs only. Prints, per size, the page's bytes and the seconds to make it, side by side in
one run, and with --shots DIR a headless Chromium screenshot of the overview and of one model's page at each size
(docs/measurements.md holds the last run).

Usage: python benchmarks/page_scale.py [--archive A.tar.bz2] [--shots DIR]   (A: a model archive, default the first
of dist/release)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHIPS = ["SM8550", "SM8650", "SM8750", "SM8850", "QCS9100"]


def synthetic(n_models: int, meta, chips: list[str] = CHIPS):
    """(manifest, metas) of a release of ``n_models`` x ``chips`` at fp16, each metadata a copy of ``meta``."""
    from ci_tools.catalog.socs import load_catalog
    from ci_tools.release.manifest import Manifest, ModelAsset

    cat = load_catalog()
    assets, metas, skipped = [], {}, []
    for i in range(n_models):
        model = f"model-{i:04d}"
        for j, chip in enumerate(chips):
            k = i * len(chips) + j
            if k % 33 == 7:  # about 3 %: a graph not built
                skipped.append(f"{model}/{chip}/fp16 (1 of 2 graphs built)")
                continue
            name = f"{model}-{chip.lower()}-fp16-qnn2.51.0.260929.tar.bz2"
            assets.append(ModelAsset(kind="model", name=name, size=7_000_000 + k, sha256=f"{k:064x}", model=model,
                                     soc=chip, soc_aliases=[chip.lower()], precision="fp16",
                                     sdk_version="2.51.0.260929181845", qnn_runtime="2.51.0", graphs=["main"],
                                     verified=True, cosine=0.9999,
                                     verified_on="generated-inputs" if k % 50 == 11 else "real-samples",
                                     compile_seconds=2.5))
            metas[name] = meta.model_copy(update={"model": meta.model.model_copy(update={"name": model}),
                                                  "chip": meta.chip.model_copy(update={
                                                      "name": chip, "marketing": cat.get(chip).marketing,
                                                      "htp_arch": cat.get(chip).arch})})
    manifest = Manifest(manifest_version=2, tag="v9.9.9", toolkit="qnn-release synthetic", sdk_versions=[
        "2.51.0.260929181845"], skipped=skipped, assets=assets)
    return manifest, metas


def page(manifest, metas) -> str:
    from ci_tools.release.page import page_data, render_page

    return render_page(page_data(manifest, metas, None, {}, None))


def shot(html: Path, fragment: str, out: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--no-first-run", f"--user-data-dir={out.parent / '.profile'}", "--hide-scrollbars",
                    "--window-size=1400,1000", f"--screenshot={out}", f"file://{html}{fragment}"],
                   capture_output=True, timeout=300, check=True)


def main() -> int:
    sys.path.insert(0, str(REPO))
    from ci_tools.release.page import read_metadata

    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", type=Path)
    ap.add_argument("--shots", type=Path)
    args = ap.parse_args()
    archive = args.archive or next(p for p in sorted((REPO / "dist" / "release").glob("*-fp16-*.tar.bz2")))
    meta = read_metadata(archive)
    print(f"each cell's metadata: {archive.name}\n")
    print("| models | targets | page | made in | chromium (overview) |\n|---:|---:|---:|---:|---:|")
    for n in (10, 100, 1000):
        manifest, metas = synthetic(n, meta)
        start = time.monotonic()
        text = page(manifest, metas)
        made = time.monotonic() - start
        shown = ""
        if args.shots:
            args.shots.mkdir(parents=True, exist_ok=True)
            html = args.shots / f"page-{n}.html"
            html.write_text(text)
            start = time.monotonic()
            shot(html.resolve(), "", args.shots / f"page-{n}.png")
            shown = f"{time.monotonic() - start:.1f} s"
            shot(html.resolve(), "#model-model-0003", args.shots / f"page-{n}-model.png")
            shot(html.resolve(), "#chip-SM8750", args.shots / f"page-{n}-chip.png")
        print(f"| {n:,} | {len(manifest.assets) + len(manifest.skipped):,} | {len(text.encode()) / 1e6:.2f} MB "
              f"| {made:.2f} s | {shown} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
