"""Build benchmark on the demo matrix (timing lives here, not in tests).

Prints three ratios measured in one run:
  no-op rebuild / full build              (target <= 5 %)
  -j 1 wall time / -j 2 wall time         (target >= 1.6x on 2 cores)
  time outside the backend's compile and emulator calls / full build (target <= 15 %)

Usage: python benchmarks/build_bench.py [--matrix F] [--model M]
Sources are fetched once before timing; every full build starts with no prepared graphs and
an empty target store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(args: list[str], env: dict) -> float:
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ci_tools", *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"benchmark build failed:\n{r.stdout}\n{r.stderr}")
    return time.monotonic() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--matrix", default=None)
    p.add_argument("--model", default=None)
    a = p.parse_args()
    base = ["build"] + (["--matrix", a.matrix] if a.matrix else []) + (["--model", a.model] if a.model else [])
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        env = {**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")}
        run([*base, "--out", str(tmp_path / "warm"), "-j", "2"], env)  # fetch sources once
        results = {}
        for jobs in (1, 2):
            # a full build: no prepared graphs and no finished targets in the store (sources stay)
            shutil.rmtree(tmp_path / "cache" / "work" / "prepared")
            shutil.rmtree(tmp_path / "cache" / "targets", ignore_errors=True)
            out = tmp_path / f"out-j{jobs}"
            results[jobs] = run([*base, "--out", str(out), "-j", str(jobs)], env)
        report = json.loads((tmp_path / "out-j1" / "build-report.json").read_text())
        j1 = report["timings"]
        timings = json.loads((tmp_path / "out-j2" / "build-report.json").read_text())["timings"]
        noop = run([*base, "--out", str(tmp_path / "out-j1"), "-j", "2"], env)
        full = results[1]
        backend = j1["compile"] + j1["emulator"] + j1["precompile"]
    targets = len(report["targets"])
    print(f"demo matrix: {targets} targets, {os.cpu_count()} cores")
    print(f"full build -j1: {results[1]:.1f}s (compile {j1['compile']:.1f}s, emulator {j1['emulator']:.1f}s, "
          f"prepare {j1['prepare']:.1f}s); -j2: {results[2]:.1f}s (compile {timings['compile']:.1f}s, "
          f"emulator {timings['emulator']:.1f}s)")
    print(f"no-op rebuild / full build:        {noop:.2f}s / {full:.1f}s = {100 * noop / full:.1f} %   (target <= 5 %)")
    print(f"-j1 / -j2:                         {results[1] / results[2]:.2f}x            (target >= 1.6x)")
    print(f"outside compile+emulator (-j1):    {100 * (full - backend) / full:.1f} %          (target <= 15 %)")


if __name__ == "__main__":
    main()
