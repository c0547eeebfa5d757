"""``qnn-release sdk fetch | env | check-updates | open-pr``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_fetch(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..sdk.install import env_lines, fetch_sdk, pick, record_pins

    loaded = load_matrix(args.matrix)
    root, info, fetched = fetch_sdk(loaded, args.version, args.dest, revision=args.revision)
    print(f"QAIRT {info['version']} {'fetched into' if fetched else 'already in'} {root} "
          f"({info['hf_repo']}@{info['revision'][:12]}, sha256 {info['sha256'][:16]}...)", file=sys.stderr)
    entry = pick(loaded, info["version"])
    if args.record:
        if record_pins(loaded, info["version"], info["revision"], info["sha256"]):
            print(f"recorded revision and sha256 of {info['file']} in {loaded.path}", file=sys.stderr)
        else:
            print(f"{loaded.path} already pins this revision and sha256", file=sys.stderr)
    elif entry.revision is None or entry.sha256 is None:
        print(f"pin it: sdk.qairt[{info['version']}] revision: {info['revision']} sha256: {info['sha256']} "
              f"(or run with --record)", file=sys.stderr)
    print("\n".join(env_lines(root)))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..sdk.install import sdk_env

    print("\n".join(sdk_env(load_matrix(args.matrix), args.version, args.dest)))
    return 0


def cmd_check_updates(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..sdk.updates import apply_updates, check_updates

    loaded = load_matrix(args.matrix)
    updates = check_updates(loaded)
    if not updates.qairt and not updates.onnxruntime_qnn:
        print("the matrix has the newest QAIRT zip and onnxruntime-qnn release")
        return 0
    for v in updates.qairt:
        print(f"newer QAIRT zip: v{v}.zip in {loaded.matrix.sdk.qairt[0].hf_repo}")
    for v in updates.onnxruntime_qnn:
        print(f"newer onnxruntime-qnn: {v}")
    if args.apply:
        for line in apply_updates(loaded, updates):
            print(line)
    return 0


def cmd_open_pr(args: argparse.Namespace) -> int:
    from ..release.github import token_from_env
    from ..sdk.updates import SDK_PINS, Proposal, open_pr, tool_bump

    what = tool_bump(args.tool) if args.tool else SDK_PINS if args.pins else Proposal()
    print(open_pr(args.repo, args.base, token=token_from_env(), root=args.root, what=what))
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..sdk.install import pick, record_pins
    from ..sdk.updates import hub_pins

    loaded = load_matrix(args.matrix)
    entry = pick(loaded, args.version)
    if entry.revision and entry.sha256:
        print(f"sdk.qairt[{entry.version}] is pinned: revision {entry.revision[:12]}, sha256 {entry.sha256[:16]}...")
        return 0
    version, revision, sha = hub_pins(loaded, args.version)
    said = (f"sdk.qairt[{version}]: revision {revision}, sha256 {sha} (the sha256 the Hub states for "
            f"{entry.file} in its LFS metadata, not computed here: the image build downloads the zip and refuses "
            "it unless it matches)")
    if args.record and record_pins(loaded, version, revision, sha):
        print(f"recorded {said} in {loaded.path}")
    else:
        print(said + ("" if args.record else "; --record writes it into the matrix"))
    return 0


def register(sub, matrix_arg) -> None:
    p = sub.add_parser("sdk", help="the QAIRT SDK: fetch it (checked), print its env, look for updates")
    ssub = p.add_subparsers(dest="sdk_command", metavar="SDK_COMMAND", required=True)
    f = ssub.add_parser("fetch", help="download the QAIRT zip named in the matrix from Hugging Face, check, unzip")
    matrix_arg(f)
    f.add_argument("--version", help="a version from sdk.qairt (default: the first)")
    f.add_argument("--dest", type=Path, default=Path.cwd(), help="unzip into DEST/qairt/<version>")
    f.add_argument("--revision", help="a commit, branch or tag of hf_repo instead of the matrix's revision "
                   "(its sha256 pin still applies)")
    f.add_argument("--record", action="store_true", help="write the revision and sha256 into the matrix")
    f.set_defaults(func=cmd_fetch)
    e = ssub.add_parser("env", help="print QNN_SDK_ROOT, PYTHONPATH, PATH, LD_LIBRARY_PATH lines for a fetched SDK")
    matrix_arg(e)
    e.add_argument("--version")
    e.add_argument("--dest", type=Path, default=Path.cwd())
    e.set_defaults(func=cmd_env)
    c = ssub.add_parser("check-updates", help="newer QAIRT zips on the Hub and onnxruntime-qnn on PyPI")
    matrix_arg(c)
    c.add_argument("--apply", action="store_true", help="update the matrix's sdk section and re-render")
    c.set_defaults(func=cmd_check_updates)
    o = ssub.add_parser("open-pr", help="commit the changed files to a branch and open a pull request")
    o.add_argument("--repo", required=True)
    o.add_argument("--base", default="main")
    o.add_argument("--root", type=Path, default=Path.cwd())
    o.add_argument("--pins", action="store_true", help="the change records SDK pins (`sdk pin --record`)")
    o.add_argument("--tool", metavar="TAG", help="the change upgrades qnn-release to TAG (`init --upgrade`)")
    o.set_defaults(func=cmd_open_pr)
    n = ssub.add_parser("pin", help="the revision and sha256 of an unpinned QAIRT zip as the Hub states them "
                        "(no download); --record writes them into the matrix")
    matrix_arg(n)
    n.add_argument("--version", help="a version from sdk.qairt (default: the first)")
    n.add_argument("--record", action="store_true")
    n.set_defaults(func=cmd_pin)
