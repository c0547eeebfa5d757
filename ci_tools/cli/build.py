"""``qnn-release build`` and ``qnn-release package``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import BuildFailed, UsageError
from . import step_summary


def cmd_build(args: argparse.Namespace) -> int:
    from ..builder.orchestrate import BuildSettings, TargetFilter, build
    from ..builder.summary import summary
    from ..matrix.schema import load_matrix

    if args.jobs is None:
        args.jobs = max(1, min(2, os.cpu_count() or 1))
    if args.jobs < 1:
        raise UsageError(f"-j {args.jobs}: expected at least 1 worker")
    loaded = load_matrix(args.matrix)
    if args.precompile_only and (args.package or args.from_store):
        raise UsageError("--precompile-only compiles nothing: it cannot be combined with --package or --from-store")
    settings = BuildSettings(out=args.out, backend=args.backend, jobs=args.jobs, force=args.force, cache=args.cache,
                             precompile_only=args.precompile_only, from_store=args.from_store,
                             isolate=True)  # -j 1 too: a stop reaches an emulator run within seconds
    report = build(loaded, settings, TargetFilter(model=args.model, soc=args.soc, precision=args.precision,
                                                  graph=args.graph))
    if args.precompile_only:
        for d in report.work["precompiled"]:
            print(f"precompiled {d['model']}.{d['graph']} {d['precision']}")
        for r in report.failed:
            print(f"FAILED {r.id}: {r.error}")
        print(f"{len(report.work['precompiled'])} graph x precision converted, {len(report.failed)} failed; "
              f"report: {report.path}")
        if report.failed:
            raise BuildFailed(f"{len(report.failed)} target(s) could not be precompiled",
                              hint=f"details in {report.path}")
        return 0
    print(summary(report))
    step_summary.append(step_summary.build(report))  # in GitHub Actions: the same table in the run's summary
    if args.package and not report.failed:
        cmd_package(args)
    if report.failed:
        codes = {r.exit_code for r in report.failed}
        raise BuildFailed(f"{len(report.failed)} of {len(report.records)} targets failed"
                          + (f" (exit codes {sorted(c for c in codes if c)})" if codes else ""),
                          hint=f"details per target in {report.path}")
    return 0


def cmd_package(args: argparse.Namespace) -> int:
    from ..release.package import PackageSettings, package

    result = package(args.out, PackageSettings(tag=args.tag, qnn_sdk=args.qnn_sdk, previous=args.previous,
                                               matrix=args.matrix, device_numbers=args.device_numbers,
                                               require_verified=args.require_verified))
    step_summary.append(step_summary.package(result))
    for a in result.assets:
        print(f"{a.sha256[:12]}  {a.size / 1e6:8.2f} MB  {a.name}")
    import sys

    for w in result.manifest.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if not any(a.kind == "qnn-libs" for a in result.assets):
        print("note: no QNN runtime libraries in this release (no --qnn-sdk / QNN_SDK_ROOT): the release notes "
              "say which ones the app needs", file=sys.stderr)
    print(f"\n{len(result.assets)} assets, manifest.json and SHA256SUMS in {result.release}"
          + (f"; release notes {result.notes}" if result.notes else ""))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from ..release.page import report

    page = report(args.dist, repo=args.repo)
    print(f"wrote {page}")
    return 0


def _package_args(p) -> None:
    p.add_argument("--tag", help="release tag: also writes release_notes/<tag>.md")
    p.add_argument("--qnn-sdk", type=Path, default=os.environ.get("QNN_SDK_ROOT") or None,
                   help="QAIRT SDK tree for qnn-libs-<version>.tar.bz2 (default: $QNN_SDK_ROOT)")
    p.add_argument("--previous", type=Path, help="the previous release's manifest.json, for the changes")
    p.add_argument("--require-verified", action="store_true",
                   help="refuse targets that were never run on the HTP emulator (the release workflow sets it)")
    p.add_argument("--device-numbers", type=Path,
                   help="device-numbers.json of `qnn-release device-numbers` (default: the one in --out, if any), "
                        "into metadata.json, the manifest, the notes and the page")


def register(sub, matrix_arg, target_filters) -> None:
    p = sub.add_parser("build", help="prepare, compile and verify every target of the matrix")
    target_filters(p)
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="targets compiled at once, each in its own process (default: 2, or 1 on a one-core machine)")
    p.add_argument("--out", type=Path, default=Path("dist"))
    p.add_argument("--cache", type=Path, default=None,
                   help="sources, prepared graphs, targets, twins' measurements (default ~/.cache/qnn-release)")
    p.add_argument("--force", action="store_true", help="rebuild targets even when cached")
    p.add_argument("--precompile-only", action="store_true",
                   help="fetch, prepare and convert once per graph and precision; compile for no chip "
                        "(a release's precompile job)")
    p.add_argument("--from-store", action="store_true",
                   help="never compile: every target must already be in --out or the target store "
                        "(a release's publish job); a missing one is an error naming it")
    p.add_argument("--package", action="store_true", help="package the release when every target is ok")
    _package_args(p)
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("package", help="archives per chip, qnn-libs, manifest.json, SHA256SUMS, release notes")
    matrix_arg(p)
    p.add_argument("--out", type=Path, default=Path("dist"), help="the build folder (with build-report.json)")
    _package_args(p)
    p.set_defaults(func=cmd_package)

    p = sub.add_parser("report", help="write index.html, the release page, into a packaged dist/release")
    p.add_argument("dist", type=Path, nargs="?", default=Path("dist"), help="the build folder or its release/ folder")
    p.add_argument("--repo", default=os.environ.get("GITHUB_REPOSITORY") or None,
                   help="OWNER/NAME: link the assets to its GitHub release (default: relative links)")
    p.set_defaults(func=cmd_report)
