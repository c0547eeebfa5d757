"""``qnn-release publish`` and ``qnn-release fetch``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..release.github import Connection, token_from_env
from ..util.precision import PRECISIONS


def cmd_publish(args: argparse.Namespace) -> int:
    from ..release.publish import publish

    plan = publish(args.dist, args.repo, args.tag, via=Connection(token=token_from_env()), dry_run=args.dry_run,
                   replace=args.replace)
    from . import step_summary

    step_summary.append(step_summary.publish(plan, args.repo, args.dry_run))
    head = f"{args.repo}@{args.tag}" + (f" ({plan.release})" if plan.release else "")
    print(("dry run, nothing changed: " if args.dry_run else "done: ") + head)
    for a in plan.actions:
        print(f"  {a}")
    if args.hf_repo:
        from ..release.hf_mirror import mirror

        print(mirror(args.dist, args.hf_repo, args.tag, dry_run=args.dry_run))
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from ..errors import RuntimeTooOld, UsageError
    from ..release.fetch import AdbPhone, AppNeeds, fetch_model, loadable_release

    soc = AdbPhone(serial=args.adb or None) if args.adb is not None else args.soc  # --adb and --soc: one or the other
    if args.look_back and not args.qnn_runtime:
        raise UsageError("--look-back needs --qnn-runtime (the app's QNN runtime, as 2.50.40)")
    via = Connection(token=token_from_env())
    needs = AppNeeds(precision=args.precision, runtime=args.qnn_runtime)
    try:
        result = fetch_model(args.release, args.model, dest=args.dest, soc=soc, via=via, needs=needs)
    except RuntimeTooOld as e:
        if not args.look_back:
            raise
        earlier = loadable_release(args.release, args.model, args.soc or "", args.qnn_runtime, args.precision, via)
        if earlier is None:
            raise RuntimeTooOld(f"{e.message}; no earlier release of {args.release.split('@')[0]} has a binary that "
                                "QNN runtime " + args.qnn_runtime + " loads",
                                hint="ship a newer QNN runtime, or use the CPU model") from None
        print(f"{args.release}: needs a newer QNN runtime than {args.qnn_runtime}: fetching {earlier}, the newest "
              "release this runtime loads", file=sys.stderr)
        result = fetch_model(earlier, args.model, dest=args.dest, soc=soc, via=via, needs=needs)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    elif result.kind != "binary":
        how = ("ONNX Runtime's QNN EP compiles it for this chip's HTP when the session is created (the first load "
               "costs that compile: twin.json says how long it took before release)" if result.kind == "jit" else
               "run it on CPU: qnn-release's catalog knows no HTP for this chip")
        print(f"kind={result.kind}: no binary of {result.model} for {result.soc} in this release; its twin, the "
              f"prepared float graphs ({how}): {result.path}")
    else:
        print(f"{result.model} for {result.soc} ({result.precision}, QNN {result.sdk_version}): {result.path}")
        if result.qnn_libs_path:
            print(f"QNN runtime libraries ({result.qnn_libs}): {result.qnn_libs_path}")
        else:
            print("this release ships no qnn-libs: use QNN runtime libraries of version " + result.sdk_version)
    return 0


def cmd_previous_manifest(args: argparse.Namespace) -> int:
    from ..release.previous import previous_manifest

    tag = previous_manifest(args.repo, args.tag, args.out, token=token_from_env())
    print(f"previous release of {args.repo}: {tag} (manifest in {args.out})" if tag else
          f"{args.repo} has no published release before {args.tag}: the notes say it is the first")
    return 0


def cmd_pages(args: argparse.Namespace) -> int:
    from ..release.pages import build_site

    rows = build_site(args.repo, args.out, token=token_from_env())
    pages = sum(1 for r in rows if r["page"])
    print(f"{args.out}: index of {len(rows)} published release(s) of {args.repo}, {pages} with their own page")
    return 0


def register(sub) -> None:
    p = sub.add_parser("pages", help="the GitHub Pages site: an index of every release and each release's page")
    p.add_argument("--repo", required=True, help="OWNER/NAME")
    p.add_argument("--out", type=Path, required=True, help="the site folder to write (replaced whole)")
    p.set_defaults(func=cmd_pages)

    p = sub.add_parser("previous-manifest", help="the newest published release's manifest.json (for release notes)")
    p.add_argument("--repo", required=True, help="OWNER/NAME")
    p.add_argument("--tag", required=True, help="the tag being released (skipped)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=cmd_previous_manifest)

    p = sub.add_parser("publish", help="upload a packaged release to GitHub (draft until complete)")
    p.add_argument("dist", type=Path, help="the build folder (or its release/ folder)")
    p.add_argument("--repo", required=True, help="OWNER/NAME")
    p.add_argument("--tag", required=True)
    p.add_argument("--dry-run", action="store_true", help="print what would be done, change nothing")
    p.add_argument("--replace", action="store_true", help="replace published assets whose content differs")
    p.add_argument("--hf-repo", help="also mirror the assets to this Hugging Face repo, in one commit")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("fetch", help="download the archive for a device's chip (and its qnn-libs)")
    p.add_argument("--release", required=True, help="OWNER/NAME@TAG")
    p.add_argument("--model", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--soc", help="SM8750, sm8750-ac, qualcomm-snapdragon-8-elite ...")
    g.add_argument("--adb", nargs="?", const="", metavar="SERIAL", help="ask the device: getprop ro.soc.model")
    p.add_argument("--precision", choices=PRECISIONS)
    p.add_argument("--qnn-runtime", metavar="VERSION", help="the QNN runtime the app ships (2.50.40): a binary that "
                   "needs a newer one is refused with exit 12")
    p.add_argument("--look-back", action="store_true", help="with --qnn-runtime: fetch the newest earlier release's "
                   "binary this runtime loads instead of refusing")
    p.add_argument("--dest", type=Path, required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_fetch)
