"""An SDK bump, measured for real: the demo matrix built with two onnxruntime-qnn lines side by side, compared.

Each line gets its own venv (onnxruntime-qnn 2.6.0 = QNN 2.50.40, 2.7.0 = QNN 2.51.0 by default), qnn-release
installed editable from this checkout into both; both builds run one after the other in this run on this machine
(so their compile and emulator seconds are comparable here, as `compare` says they are not across runs), each
into its own folder with its own target store, then `qnn-release compare OLD NEW` prints the table
(docs/measurements.md holds the last one).

Usage: python benchmarks/sdk_bump.py [--old 2.6.0] [--new 2.7.0] [--matrix F] [--model M] [--soc S] [--precision P]
    [--work DIR]

A recipe on one chip: ``--matrix matrix/whisper.yaml --soc SM8750 --precision fp16`` (and ``matrix/tts.yaml``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def venv(work: Path, version: str) -> Path:
    """A venv with qnn-release (this checkout) and onnxruntime-qnn ``version`` (the constraints minus its pin)."""
    folder = work / f"venv-{version}"
    python = folder / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        constraints = work / f"constraints-{version}.txt"
        constraints.write_text("".join(line for line in (REPO / "constraints.txt").read_text().splitlines(True)
                                       if not line.startswith("onnxruntime-qnn==")))
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints), "-e", str(REPO),
                        f"onnxruntime-qnn=={version}"], check=True)
    return python


def build(python: Path, out: Path, args: list[str], work: Path) -> float:
    env = {**os.environ, "QNN_RELEASE_CACHE": str(work / f"cache-{out.name}")}
    start = time.monotonic()
    r = subprocess.run([str(python), "-m", "ci_tools", "build", *args, "--out", str(out), "--package"], env=env,
                       capture_output=True, text=True)
    if r.returncode not in (0, 8):  # 8: some targets failed; the comparison shows them
        sys.exit(f"build with {python} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return time.monotonic() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", default="2.6.0")
    p.add_argument("--new", default="2.7.0")
    p.add_argument("--matrix", default=str(REPO / "matrix" / "models.yaml"))
    p.add_argument("--model", action="append", default=[])
    p.add_argument("--soc", action="append", default=[])
    p.add_argument("--precision", action="append", default=[])
    p.add_argument("--work", type=Path, default=Path("/tmp/qnn-sdk-bump-bench"))
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    args = ["--matrix", a.matrix, *(x for k in ("model", "soc", "precision") for v in getattr(a, k)
                                    for x in (f"--{k}", v))]
    seconds = {}
    for version in (a.old, a.new):
        seconds[version] = build(venv(a.work, version), a.work / f"dist-{version}", args, a.work)
    r = subprocess.run([sys.executable, "-m", "ci_tools", "compare", str(a.work / f"dist-{a.old}"),
                        str(a.work / f"dist-{a.new}"), "--matrix", a.matrix], capture_output=True, text=True)
    print(r.stdout)
    print(r.stderr.strip())
    print(f"builds on this machine, one after the other: {a.old} {seconds[a.old]:.0f} s, {a.new} "
          f"{seconds[a.new]:.0f} s (sources fetched into each build's own cache)")


if __name__ == "__main__":
    main()
