"""Archive compression throughput: qnn-release's parallel bzip2 vs single-threaded `tar cjf`.

Usage: python benchmarks/compress_bench.py [--mb 200] [--source DIR]
The payload is real context binaries when --source names a build folder (they are repeated,
each copy perturbed, up to --mb), else bytes with the statistics of weights (float16 noise).
Target: >= 1.7x on 2 cores. Prints which compressor the archive writer used.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from ci_tools.release.archive import external_compressor, make_tar_bz2


def payload(folder: Path, mb: int, source: Path | None) -> list[Path]:
    rng = np.random.default_rng(0)
    seeds = sorted(source.rglob("*.bin")) if source else []
    files, total, i = [], 0, 0
    while total < mb * 1_000_000:
        if seeds:
            data = bytearray(seeds[i % len(seeds)].read_bytes())
            data[:8] = i.to_bytes(8, "little")
        else:  # fp16 weights: compressible like real context binaries, not like random bytes
            data = (rng.standard_normal(4_000_000) * 0.05).astype(np.float16).tobytes()
        f = folder / f"graph{i:03d}_ctx_qnn.bin"
        f.write_bytes(bytes(data))
        files.append(f)
        total += len(data)
        i += 1
    return files


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--source", type=Path)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        (tmp_path / "in").mkdir()
        files = payload(tmp_path / "in", a.mb, a.source)
        size = sum(f.stat().st_size for f in files)
        t = time.monotonic()
        subprocess.run(["tar", "cjf", str(tmp_path / "ref.tar.bz2"), "-C", str(tmp_path / "in"), "."], check=True)
        ref = time.monotonic() - t
        t = time.monotonic()
        make_tar_bz2(tmp_path / "ours.tar.bz2", [(f"x/{f.name}", f) for f in files])
        ours = time.monotonic() - t
        ours_size = (tmp_path / "ours.tar.bz2").stat().st_size
        subprocess.run(["tar", "xjf", str(tmp_path / "ours.tar.bz2"), "-C", str(tmp_path)], check=True)
        t = time.monotonic()
        make_tar_bz2(tmp_path / "py.tar.bz2", [(f"x/{f.name}", f) for f in files], use_external=False)
        py = time.monotonic() - t
    tool = external_compressor()
    print(f"{size / 1e6:.0f} MB of binaries, {os.cpu_count()} cores")
    print(f"tar cjf (single-threaded bzip2): {ref:.1f}s  {size / ref / 1e6:.1f} MB/s")
    print(f"qnn-release archive ({tool[0] if tool else 'parallel bz2 in Python'}): {ours:.1f}s  "
          f"{size / ours / 1e6:.1f} MB/s  -> {ref / ours:.2f}x (target >= 1.7x), {ours_size / 1e6:.1f} MB")
    print(f"qnn-release archive (parallel bz2 in Python, forced): {py:.1f}s -> {ref / py:.2f}x")


if __name__ == "__main__":
    main()
