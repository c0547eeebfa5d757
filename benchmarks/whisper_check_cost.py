"""What the Whisper transcript check costs per target, one clip per window against packed windows, measured
side by side in one run on the same machine and the same binaries (timing lives here, not in tests).

Usage: python benchmarks/whisper_check_cost.py [--matrix matrix/whisper.yaml] [--soc SM8750 ...] [-j 2]
           [--cache DIR] [--json OUT]

The matrix is built twice into one cache with `--force`, `verify.pack: false` first, then `verify.pack: true`:
each run compiles every target and checks every chip build on the HTP emulator afresh (nothing is reused).
Prints a Markdown table: per target, windows, encoder runs, decoder steps and the check's seconds both ways,
with the verdicts (transcripts equal to CPU, near-ties).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _matrix(src: Path, root: Path, pack: bool) -> Path:
    data = yaml.safe_load(src.read_text())
    for model in data["models"]:
        if (model.get("verify") or {}).get("kind") == "transcript":
            model["verify"]["pack"] = pack
    path = root / "matrix" / f"{src.stem}-{'packed' if pack else 'one-per-window'}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _build(matrix: Path, out: Path, socs: list[str], jobs: int, env: dict) -> tuple[float, dict]:
    args = [sys.executable, "-m", "ci_tools", "build", "--matrix", str(matrix), "--out", str(out), "-j", str(jobs),
            "--force"]
    for soc in socs:
        args += ["--soc", soc]
    start = time.monotonic()
    r = subprocess.run(args, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
    if not (out / "build-report.json").is_file():
        sys.exit(f"whisper_check_cost: the build of {matrix.name} wrote no build-report.json (exit {r.returncode})")
    report = json.loads((out / "build-report.json").read_text())
    chips = {}
    for t in report["targets"]:
        tr = t.get("recipe")
        if t["graph"] != "encoder" or not tr:
            continue
        chips[f"{t['soc']} {t['precision']}"] = {
            "status": t["status"], "windows": len(tr["clips"]),
            "clips": sum(len(c.get("files") or [c["file"]]) for c in tr["clips"]),
            "decoder_steps": sum(c["decoder_steps"] for c in tr["clips"]),
            "encoder_seconds": round(sum(c["encoder_seconds"] for c in tr["clips"]), 1),
            "check_seconds": tr["seconds"], "agree": tr["agree"], "wer_vs_cpu": tr["wer_vs_cpu"],
            "near_ties": [f"{n['cpu'].strip()}/{n['htp'].strip()} ({n['gap']})" for n in tr.get("near_ties") or []]}
    return wall, chips


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--matrix", type=Path, default=REPO / "matrix" / "whisper.yaml")
    p.add_argument("--soc", action="append", default=[])
    p.add_argument("-j", "--jobs", type=int, default=2)
    p.add_argument("--cache", type=Path, default=None, help="default: a new temporary folder")
    p.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="whisper-check-cost.") as tmp:
        root = Path(tmp)
        (root / "matrix").mkdir()
        (root / "clips").symlink_to(REPO / "clips")
        env = {**os.environ, "QNN_RELEASE_CACHE": str(a.cache or root / "cache")}
        runs = {}
        for pack in (False, True):
            matrix = _matrix(a.matrix.resolve(), root, pack)
            wall, chips = _build(matrix, root / ("dist-packed" if pack else "dist"), a.soc, a.jobs, env)
            runs["packed" if pack else "one_per_window"] = {"wall_seconds": round(wall, 1), "chips": chips}
            print(f"{'packed' if pack else 'one clip per window'}: {wall:.0f} s wall", file=sys.stderr)
    one, packed = runs["one_per_window"]["chips"], runs["packed"]["chips"]
    print("| target | clips | windows (one per clip -> packed) | decoder steps | encoder s | check s "
          "(one per clip -> packed) | change | HTP = CPU | near-ties |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(one):
        b, f = one[key], packed.get(key, {})
        change = f"{(f['check_seconds'] / b['check_seconds'] - 1) * 100:+.0f} %" if f else "-"
        print(f"| {key} | {b['clips']} | {b['windows']} -> {f.get('windows', '-')} | {b['decoder_steps']} -> "
              f"{f.get('decoder_steps', '-')} | {b['encoder_seconds']} -> {f.get('encoder_seconds', '-')} | "
              f"{b['check_seconds']:.0f} -> {f.get('check_seconds', 0):.0f} | {change} | "
              f"{b['agree']}/{b['windows']} -> {f.get('agree', '-')}/{f.get('windows', '-')} | "
              f"{', '.join(f.get('near_ties') or []) or '-'} |")
    tb, tf = (sum(c["check_seconds"] for c in r.values()) for r in (one, packed))
    print(f"| all | | | | | {tb:.0f} -> {tf:.0f} | {(tf / tb - 1) * 100:+.0f} % | | |" if tb else "")
    print(f"\nwall, compiles and checks: one clip per window {runs['one_per_window']['wall_seconds']:.0f} s, "
          f"packed {runs['packed']['wall_seconds']:.0f} s")
    if a.json:
        a.json.write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
