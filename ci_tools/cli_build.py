"""``qnn-release build``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .errors import BuildFailed, UsageError


def cmd_build(args: argparse.Namespace) -> int:
    from .build import build, summary
    from .matrix import load_matrix
    from .progress import Progress

    if args.jobs < 1:
        raise UsageError(f"-j {args.jobs}: expected at least 1 worker")
    loaded = load_matrix(args.matrix)
    from .plan import plan

    total = len(plan(loaded, model=args.model, soc=args.soc, precision=args.precision))
    report = build(loaded, out=args.out, model=args.model, soc=args.soc, precision=args.precision,
                   backend=args.backend, jobs=args.jobs, force=args.force,
                   cache=args.cache, progress=Progress(total))
    print(summary(report))
    if report.failed:
        codes = {r.get("exit_code") for r in report.failed}
        raise BuildFailed(f"{len(report.failed)} of {len(report.records)} targets failed"
                          + (f" (exit codes {sorted(c for c in codes if c)})" if codes else ""),
                          hint=f"details per target in {report.path}")
    return 0


def register(sub, matrix_arg) -> None:
    p = sub.add_parser("build", help="prepare, compile and verify every target of the matrix")
    matrix_arg(p)
    p.add_argument("--model")
    p.add_argument("--soc", help="a chip or a group")
    p.add_argument("--precision", choices=["fp16", "w8a16", "int8"])
    p.add_argument("--backend", default="ort", help="compile route: ort (default) or qairt")
    p.add_argument("-j", "--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                   help="targets compiled at once, each in its own process")
    p.add_argument("--out", type=Path, default=Path("dist"))
    p.add_argument("--cache", type=Path, default=None, help="sources, prepared graphs (default ~/.cache/qnn-release)")
    p.add_argument("--force", action="store_true", help="rebuild targets even when cached")
    p.set_defaults(func=cmd_build)
