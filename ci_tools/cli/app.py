"""The ``qnn-release`` command. Errors are caught once, here: one line, a hint, an exit code."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .. import __version__
from ..errors import QnnReleaseError
from ..util.precision import PRECISIONS


def _matrix_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", type=Path, default=None,
                   help="the matrix file (default: matrix/models.yaml of this repository)")


def _target_filters(p: argparse.ArgumentParser) -> None:
    """The matrix and the filters that pick targets from it (plan, build)."""
    _matrix_arg(p)
    # repeated filters add up: --soc SM8550 --soc SM8750 builds both
    p.add_argument("--model", action="append", help="a model (repeat for several)")
    p.add_argument("--soc", action="append", help="a chip or a group (repeat for several)")
    p.add_argument("--precision", action="append", choices=PRECISIONS, help="repeatable")
    p.add_argument("--graph", action="append", help="only this graph of the model(s) (repeatable)")
    p.add_argument("--backend", default="ort",
                   help="compile route: ort (default) or qairt; chips it cannot target are refused")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of 1 or more")
    return value


def cmd_socs(args: argparse.Namespace) -> int:
    from ..catalog.socs import load_catalog, select
    from ..util.table import table

    cat = load_catalog()
    if args.resolve:
        chip = cat.lookup(args.resolve)
        target = cat.target(chip)
        if args.json:
            print(json.dumps({**chip.as_dict(), "build_target": target.name}, indent=2))
        else:
            print(f"{args.resolve.strip()} -> {chip.name} ({chip.marketing or 'no marketing name'}, soc_model "
                  f"{chip.soc_model}, {chip.arch})" + (f"; builds as {target.name}" if target is not chip else ""))
        return 0
    if args.readme:
        from ..catalog.readme import README, update

        changed = update(README, cat)
        print(f"{'updated' if changed else 'unchanged'}: the chip table in {README}")
        return 0
    socs = select(cat, kind=args.kind, arch=args.arch)
    if args.check:
        from ..compile.socs_check import check

        report = check(cat, socs)
        if args.json:
            print(json.dumps(report.as_dict(), indent=2))
        else:
            print(report.text())
        return 1 if report.unexplained else 0
    if args.json:
        names = {s.name for s in socs}
        print(json.dumps({"socs": [s.as_dict() for s in socs], "groups": {
            g: [m for m in members if m in names] for g, members in cat.groups.items()}}, indent=2))
        return 0
    print(table(["soc", "marketing", "kind", "soc_model", "htp", "vtcm", "fp16", "builds as", "AI Hub"],
                [(s.name, s.marketing or "", s.kind, s.soc_model, s.arch, s.vtcm_mb or "?",
                  {True: "yes", False: "no", None: "?"}[s.fp16], s.build_as or "",
                  s.aihub[0] if s.aihub else "") for s in socs]))
    print(f"\n{len(socs)} chips, {len({cat.target(s).name for s in socs})} build targets")
    print("groups: " + "; ".join(f"{g}: {' '.join(m)}" for g, m in cat.groups.items()))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from ..catalog import routes
    from ..matrix.plan import make_plan
    from ..matrix.schema import load_matrix
    from ..util.table import table

    loaded = load_matrix(args.matrix)
    route = routes.detect(args.backend, loaded.matrix.sdk.qairt[0].version)
    result = make_plan(loaded, model=args.model, soc=args.soc, precision=args.precision, graph=args.graph,
                       route=route)
    targets = result.targets
    if args.github:
        from ..workflows.cost import estimate, measured_minutes, render_text

        e, _ = estimate(loaded, targets, concurrency=args.concurrency, measured=measured_minutes(args.measured))
        print(json.dumps(e.as_dict(), indent=2) if args.json else render_text(e))
        return 0
    if args.github_output:
        from ..errors import UsageError
        from ..workflows.jobs import model_jobs, write_github_output

        names = args.model if isinstance(args.model, list) else [args.model] if args.model else []
        if len(names) != 1:
            raise UsageError("--github-output needs exactly one --model", hint="the export workflow runs it for "
                             "its model")
        jobs = model_jobs(loaded, names[0], targets)
        write_github_output(args.github_output, jobs)
        print(f"{names[0]}: {sum(len(s) for s in jobs.shards)} compile job(s) in {len(jobs.shards)} matrix "
              f"shard(s), written to {args.github_output}")
        return 0
    if args.json:
        print(json.dumps({"matrix": str(loaded.path), "route": route.label, "count": len(targets),
                          "targets": [t.as_dict() for t in targets],
                          "refused": [r.as_dict() for r in result.refused]}, indent=2))
    else:
        print(table(["target", "model", "graph", "soc", "htp", "precision"],
                    [(t.id, t.model.name, t.graph, t.soc.name, t.soc.arch, t.precision) for t in targets]))
        print(f"\n{len(targets)} targets, {len({t.soc.name for t in targets})} chips ({route.label})")
        for r in result.refused:
            print(f"refused: {r.model} {r.precision} for {r.reason}" if r.reason.startswith(r.soc)
                  else f"refused: {r.model} {r.precision} for {r.soc}: {r.reason}")
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from . import reference

    return reference.docs(args, build_parser)


def cmd_schema(args: argparse.Namespace) -> int:
    from ..matrix import schema as matrix
    from ..release import manifest, metadata
    from ..util.files import write_atomic

    schemas = [(matrix.SCHEMA_FILE, matrix.json_schema()), (metadata.SCHEMA_FILE, metadata.json_schema()),
               (manifest.SCHEMA_FILE, manifest.json_schema())]
    if args.check:
        stale = [str(f) for f, text in schemas if not f.exists() or f.read_text() != text]
        if stale:
            print(f"stale: {', '.join(stale)}: run `qnn-release schema --write`", file=sys.stderr)
            return 1
        print("schemas are up to date")
        return 0
    if args.write:
        for f, text in schemas:
            write_atomic(f, text)
            print(f"wrote {f}")
        return 0
    sys.stdout.write(schemas[0][1])
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..release.clients import FETCH_SH, render_clients
    from ..workflows.render import render_all, stale, write

    loaded = load_matrix(args.matrix)
    root = args.root or loaded.root
    files = {**render_all(loaded), **render_clients(loaded.catalog)}  # workflows, then qnn-fetch.sh and Java
    if args.check:
        diffs, orphans = stale(root, files)
        if diffs or orphans:
            for d in diffs:
                sys.stdout.write(d)
            for o in orphans:
                print(f"generated file no longer produced by the matrix: {o}")
            print(f"qnn-release: error: {len(diffs) + len(orphans)} generated file(s) are stale "
                  f"(hint: run `qnn-release render` and commit the result)", file=sys.stderr)
            return 1
        print(f"{len(files)} generated files (workflows, clients) are current")
        return 0
    written = write(root, files)
    (root / FETCH_SH).chmod(0o755)  # run directly or as `sh qnn-fetch.sh`
    names = [str(w.name) for w in written]  # at catalogue size a thousand: the first few, and how many more
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8:,} more" if len(names) > 8 else "")
    print(f"rendered {len(files):,} files into {root / '.github' / 'workflows'} and {root / 'clients'}"
          + (f"; changed {len(names):,}: {shown}" if written else "; nothing changed"))
    return 0


def cmd_pin(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..sources.pin import find_pins, write_pins
    from ..sources.store import default_cache

    loaded = load_matrix(args.matrix)
    pins = find_pins(loaded, args.cache or default_cache(), args.model)
    stale = [p for p in pins if p.old != p.new]
    for p in stale:
        print(f"{loaded.path.name}: {p.where}: {(p.old or 'none')[:12]}... -> {p.new}")  # a name: 12 hex digits
    if args.check:
        print(f"{len(stale)} of {len(pins)} pin(s) missing or stale" if stale else f"all {len(pins)} pins current")
        return 1 if stale else 0
    written = write_pins(loaded.path, stale)
    print(f"pinned {len(written)} of {len(pins)} file(s) in {loaded.path}" + ("" if stale else ": all current"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ..errors import RegressionFound
    from ..matrix.schema import load_matrix
    from ..release.compare import compare, load_side, markdown, targets
    from ..release.github import Connection, token_from_env

    bounds = load_matrix(args.matrix).matrix.release.regressions
    via = Connection(token=token_from_env())
    (old_label, old, old_dir), (new_label, new, new_dir) = load_side(args.old, via), load_side(args.new, via)
    rows = compare(targets(old, old_dir), targets(new, new_dir), bounds, frozenset(bounds.accept))
    text = markdown(rows, old_label, new_label, bounds)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(text)
    print(json.dumps([r.as_dict() for r in rows], indent=2) if args.json else text, end="" if not args.json else "\n")
    bad = [r for r in rows if r.regressions]
    if bad:
        raise RegressionFound(f"{len(bad)} target(s) regressed from {old_label} to {new_label}, first "
                              f"{bad[0].target}: {bad[0].regressions[0]}",
                              hint="accept a target in the matrix (release.regressions.accept) or fix it")
    return 0


def cmd_changed(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..workflows.changes import changed_models, github_output
    from ..workflows.jobs import MAX_JOBS

    loaded = load_matrix(args.matrix)
    base = args.base
    if args.since_success:
        from ..release.github import Connection, token_from_env
        from ..workflows.changes import last_success

        base = last_success(args.since_success, "main.yaml", "main", Connection(token=token_from_env())) or base
    changes = changed_models(loaded.root, loaded.path, base)
    print(f"{changes.why}", file=sys.stderr)
    for name in changes.models:
        print(name)
    if args.github_output:
        shards = max(1, -(-len(loaded.matrix.models) // MAX_JOBS))  # as render shards main.yaml's matrices
        with open(args.github_output, "a") as f:
            f.write(github_output(changes, shards, MAX_JOBS))
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..matrix.schema import load_matrix
    from ..release.clients import FETCH_SH, render_clients
    from ..workflows.adopt import init, upgrade
    from ..workflows.render import render_all, write

    root = args.root.resolve()
    matrix = root / "matrix" / "models.yaml"
    if args.upgrade:
        if not matrix.is_file():
            raise UsageError(f"{matrix}: no matrix to upgrade", hint="adopt first: qnn-release init")
        upgrade(matrix, args.tool, args.version)
    else:
        init(root, args.tool, args.version)
    loaded = load_matrix(matrix)
    written = write(root, {**render_all(loaded), **render_clients(loaded.catalog)})
    (root / FETCH_SH).chmod(0o755)
    tool = loaded.matrix.tool
    if tool is None:  # init and upgrade both write it
        raise UsageError(f"{matrix}: no tool pin after {'upgrade' if args.upgrade else 'init'}")
    print(f"{'upgraded' if args.upgrade else 'adopted'}: {matrix.relative_to(root)} pins {tool.repository}@"
          f"{tool.ref[:12]}{f' ({tool.version})' if tool.version else ''}; wrote {len(written)} file(s) under "
          ".github/workflows and clients/\nnext: add your models to matrix/models.yaml, `qnn-release render`, commit, "
          "push; the first push proposes the SDK pins (sdk-pin.yaml)")
    return 0


def cmd_tool_latest(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..matrix.schema import load_matrix
    from ..release.github import Connection, token_from_env
    from ..workflows.adopt import newer_tool

    loaded = load_matrix(args.matrix)
    tool = loaded.matrix.tool
    if tool is None:
        raise UsageError(f"{loaded.path}: no tool: block: this is qnn-release itself, or a copy of it",
                         hint="a repository adopts qnn-release with `qnn-release init`, which pins it")
    newer = newer_tool(tool, Connection(token=token_from_env()))
    if newer is None:
        print(f"{tool.repository}@{tool.ref[:12]}{f' ({tool.version})' if tool.version else ''} is the newest "
              "qnn-release release")
        return 0
    print(f"newer qnn-release: {newer.tag} ({tool.repository}@{newer.commit}); the pin is {tool.ref[:12]}"
          f"{f' ({tool.version})' if tool.version else ''}")
    if args.github_output:
        with open(args.github_output, "a") as f:
            f.write(f"pin={newer.pin(tool.repository)}\nref={newer.commit}\nversion={newer.tag}\n")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..catalog.socs import UnknownSocError, load_catalog
    from ..compile.inspection import inspect, render_text
    from ..errors import UsageError

    catalog = load_catalog()
    if not args.model.is_file():
        raise UsageError(f"{args.model}: no such file", hint="give the path of an .onnx file")
    try:
        socs = [s for name in (args.soc or ["flagship"]) for s in catalog.expand(name)]
    except UnknownSocError as e:
        raise UsageError(f"--soc: {e.message}", hint=e.hint) from None
    if not args.soc:  # one chip per HTP arch of the flagship phones
        socs = list({s.htp_arch: s for s in socs}.values())
    report = inspect(args.model, socs, samples=args.samples, given=args.input, ranges=args.range)
    print(json.dumps(report, indent=2) if args.json else render_text(report))
    from ..errors import CompileError, PrepareError

    if report["prepare"] is not None and not report["prepare"]["ok"]:
        return PrepareError.exit_code  # it could not show what HTP takes: the prepare error is printed
    if report["htp"] and not any("causes" in row or row["ok"] for row in report["htp"]):
        return CompileError.exit_code  # no trial compile could say
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    """The first node of a graph whose output HTP computes unlike CPU, on one sample (exit 7 when one does)."""
    from ..catalog.socs import UnknownSocError, load_catalog
    from ..compile.bisect import Bounds, Sample, bisect, sample_feed
    from ..compile.verify import DEFAULT_THRESHOLDS
    from ..errors import UsageError, VerifyError
    from ..util.table import table

    if not args.model.is_file():
        raise UsageError(f"{args.model}: no such file", hint="give the prepared graph (a failed target's error names "
                         "it) or any .onnx file with static shapes")
    try:
        soc = load_catalog().lookup(args.soc)
    except UnknownSocError as e:
        raise UsageError(f"--soc: {e.message}", hint=e.hint) from None
    precision = "w8a16" if args.quantized else "fp16"
    feed, sample = sample_feed(args.model, args.sample)
    th = DEFAULT_THRESHOLDS[precision]
    if args.min_cosine is not None:
        th = th.model_copy(update={"min_cosine": args.min_cosine})
    b = bisect(args.model, Sample(name=sample, feed=feed), soc, th, quantized=args.quantized,
               bounds=Bounds(budget=args.budget))
    if args.json:
        print(json.dumps({**b.as_dict(), "numbers": b.numbers}, indent=2))
    else:
        rows = [(t, f"{n['cosine']:.6f}", f"{n['snr_db']:.1f}", f"{n['max_abs']:.4g}",
                 "ok" if n["passed"] else "DIFFERS") for t, n in b.numbers.items()]
        print(table(["intermediate", "cosine", "SNR dB", "max abs", ""], rows))
        print(f"{soc.name}, {precision}, {b.compiles} probe compile(s), {b.probed} of {b.candidates} intermediates "
              f"probed on {b.sample}")
        print(b.line())
    if b.first is not None:
        raise VerifyError(f"{args.model.name}: HTP leaves CPU at {b.first['node']} ({b.first['op']}) on {soc.name}",
                          hint=b.fix or "split the graph before that node to run it elsewhere, or rewrite it")
    return 0


def cmd_image(args: argparse.Namespace) -> int:
    from ..matrix.schema import load_matrix
    from ..sdk.image import image

    loaded = load_matrix(args.matrix)
    if args.allow_unpinned and any(getattr(loaded.matrix.sdk.qairt[0], k) is None for k in ("revision", "sha256")):
        print(f"::notice::{loaded.path.name}: the SDK is not pinned yet, so no image is built: sdk-pin.yaml "
              "proposes the pins (revision and the Hub's sha256) as a pull request; merge it", file=sys.stderr)
        print("unpinned=true")
        return 0
    img = image(loaded, args.owner)
    if args.guard_private:
        from ..sdk.registry import guard_private

        registry = os.environ.get("QNN_RELEASE_REGISTRY") or "https://" + img.name.split("/", 1)[0]
        repo = os.environ.get("GITHUB_REPOSITORY", "")
        verdict = guard_private(registry, img.name.split("/", 1)[1], repo, os.environ.get("REPO_VISIBILITY", ""),
                                os.environ.get("GITHUB_ACTOR", ""), os.environ.get("GITHUB_TOKEN", ""))
        print(f"{img.name}: {verdict}: anonymous pulls are refused", file=sys.stderr)
        return 0
    print("\n".join(img.outputs()))
    return 0


def cmd_probes(args: argparse.Namespace) -> int:
    """HTP's special values: the table (what rests on it), or each probe run on the emulator against it."""
    from ..catalog.socs import load_catalog
    from ..compile.htp_quirks import LAYER_PROBES, PROBES, run_layer_probe, run_probe, same
    from ..errors import VerifyError

    if not args.run:
        for p in PROBES:
            print(f"{p.name:20} {p.describe()} [seen on QNN {p.seen_on}]")
        for lp in LAYER_PROBES:
            print(f"{lp.name:20} {lp.describe()} [seen on QNN {lp.seen_on}]")
        return 0
    from ..compile import qnn_ep

    chip = load_catalog().lookup(args.soc)
    changed = []
    for p in PROBES:
        got = run_probe(p, soc_model=chip.soc_model, htp_arch=chip.htp_arch)
        ok = same(got, p.htp)
        print(f"{p.name:20} {'as in the table' if ok else 'CHANGED'}: HTP gives {got!r} (table: {p.htp!r}, "
              f"seen on QNN {p.seen_on})")
        changed += [] if ok else [p.name]
    for lp in LAYER_PROBES:
        wrong, fixed = (run_layer_probe(lp, chip.soc_model, chip.htp_arch, fixed=f) for f in (False, True))
        ok = wrong < 0.5 and fixed > 0.9999
        print(f"{lp.name:20} {'as in the table' if ok else 'CHANGED'}: cosine {wrong:.4f} against CPU, "
              f"{fixed:.7f} with {lp.fix} (table: {lp.wrong}, seen on QNN {lp.seen_on})")
        changed += [] if ok else [lp.name]
    if changed:
        raise VerifyError(f"QNN {qnn_ep.qnn_version()} on {chip.name}: {len(changed)} probe(s) differ from the table: "
                          f"{', '.join(changed)}", hint="update ci_tools/compile/htp_quirks.py and the rewrites "
                          "and hints that rest on it (prepare's Pow rewrite, the range check, the declared fixes)")
    print(f"QNN {qnn_ep.qnn_version()} on {chip.name}: every probe as in the table")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qnn-release", description="Compile ONNX models into Qualcomm QNN HTP context binaries for every "
        "Snapdragon chip in a matrix, verify them, package them and release them.")
    parser.add_argument("--version", action="version", version=f"qnn-release {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and debug output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _catalog_and_matrix_commands(sub)
    _adoption_and_comparison_commands(sub)
    _new_model_and_image_commands(sub)
    from . import build as cli_build

    cli_build.register(sub, _matrix_arg, _target_filters)
    from . import release as cli_release
    from . import sdk as cli_sdk

    cli_release.register(sub)
    cli_sdk.register(sub, _matrix_arg)
    from . import device as cli_device

    cli_device.register(sub)
    from . import reference

    reference.register(sub, cmd_docs)
    from ..recipes import all_recipes

    for recipe in all_recipes():  # a model family's own verbs (transcribe)
        recipe.register_cli(sub)
    return parser


def _catalog_and_matrix_commands(sub) -> None:
    p = sub.add_parser("socs", help="list the chip catalog, resolve a chip name, or check it against QNN")
    p.add_argument("--json", action="store_true")
    p.add_argument("--check", action="store_true",
                   help="compare with what the installed toolchain reports (onnxruntime-qnn; the QAIRT SDK "
                   "at $QNN_SDK_ROOT when set); exit 1 on a disagreement the catalog does not explain")
    p.add_argument("--resolve", metavar="NAME", help="SM8750, sm8750-ac, qualcomm-snapdragon-8-elite, getprop "
                   "ro.soc.model output, soc_id:639 (/sys/devices/soc0/soc_id), a codename")
    p.add_argument("--kind", choices=["phone", "iot", "auto", "compute", "xr", "wear"], help="only chips of this kind")
    p.add_argument("--arch", help="only chips of this HTP arch (v79 or 79)")
    p.add_argument("--readme", action="store_true", help="regenerate the chip table in docs/chips.md")
    p.set_defaults(func=cmd_socs)

    p = sub.add_parser("plan", help="expand the matrix into targets (model, graph, chip, precision)")
    _target_filters(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--github", action="store_true", help="what a release of these targets costs on GitHub "
                   "Actions: jobs, matrices, runner minutes, wall time at --concurrency, GitHub releases")
    p.add_argument("--concurrency", type=_positive, default=20, help="jobs GitHub runs at once (free plan: 20; "
                   "default 20)")
    p.add_argument("--measured", type=Path, metavar="BUILD_REPORT", help="a build-report.json whose target times "
                   "replace the defaults")
    p.add_argument("--github-output", metavar="FILE", help="with --model: append the model's compile matrices "
                   "(jobs1 ... jobsN, at most 256 jobs each) and its smoke chip to FILE ($GITHUB_OUTPUT), for the "
                   "export workflow")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("schema", help="print, write or check the JSON Schemas (matrix, archive metadata, "
                       "release manifest)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("render", help="write .github/workflows and clients/ (qnn-fetch.sh, Java) from the "
                       "matrix, the chip catalog and templates/")
    _matrix_arg(p)
    p.add_argument("--check", action="store_true", help="fail with a diff when committed generated files are stale")
    p.add_argument("--root", type=Path, help="the repository to write into (default: the matrix's)")
    p.set_defaults(func=cmd_render)



def _adoption_and_comparison_commands(sub) -> None:
    """compare, changed, init, pin: what a repository of one's own, a new model and an SDK bump need."""
    p = sub.add_parser("pin", help="fill in or update every sha256 of the matrix's sources and samples in one go "
                       "(each file fetched as a build would), keeping comments and layout; says what changed")
    _matrix_arg(p)
    p.add_argument("--model", action="append", help="only this model (repeatable)")
    p.add_argument("--cache", type=Path, default=None, help="the cache sources are fetched into (default: "
                   "QNN_RELEASE_CACHE or ~/.cache/qnn-release)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when a pin is missing or stale")
    p.set_defaults(func=cmd_pin)

    p = sub.add_parser("compare", help="what a new release changes against an old one, target by target "
                       "(regressions first); exit 13 on a regression the matrix does not accept")
    p.add_argument("old", help="the old release: a packaged folder (dist/) or a published OWNER/NAME@TAG")
    p.add_argument("new", help="the new release, likewise")
    _matrix_arg(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of Markdown")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the Markdown table to FILE (a pull "
                   "request's body, $GITHUB_STEP_SUMMARY)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("changed", help="the models a push from BASE to HEAD builds again (their entry, their "
                       "files, or what every model is made from changed); main.yaml's export matrices read it")
    _matrix_arg(p)
    p.add_argument("--base", required=True, help="the commit before the push (github.event.before)")
    p.add_argument("--since-success", metavar="OWNER/NAME", help="compare with the commit of main.yaml's last "
                   "successful run on main instead, when GitHub says one (a cancelled pending run's push is then "
                   "still built)")
    p.add_argument("--github-output", metavar="FILE", help="append models1 ... modelsN (JSON lists of at most 256, "
                   "one per export matrix of main.yaml) and count to FILE ($GITHUB_OUTPUT)")
    p.set_defaults(func=cmd_changed)

    p = sub.add_parser("init", help="adopt qnn-release in a repository of your own: a starter matrix pinned to one "
                       "commit of qnn-release, the workflows and clients rendered from it, no source of qnn-release; "
                       "--upgrade moves the pin")
    p.add_argument("--root", type=Path, default=Path("."), help="the repository (default: the current folder)")
    p.add_argument("--tool", metavar="OWNER/NAME@COMMIT", help="the qnn-release commit the workflows check out "
                   "(default: this qnn-release checkout's GitHub remote and HEAD)")
    p.add_argument("--version", help="the release tag that commit is (shown in the workflows and the upgrade)")
    p.add_argument("--upgrade", action="store_true", help="move the pin of an adopted repository, render again")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("tool-latest", help="an adopted repository: the newest release of the qnn-release it pins "
                       "(qnn-release-vX.Y.Z), when it is another commit than the pin (tool-bump.yaml upgrades to it)")
    _matrix_arg(p)
    p.add_argument("--github-output", metavar="FILE", help="append pin=OWNER/NAME@COMMIT, ref=COMMIT and "
                   "version=TAG to FILE ($GITHUB_OUTPUT) when there is a newer one")
    p.set_defaults(func=cmd_tool_latest)


def _new_model_and_image_commands(sub) -> None:
    p = sub.add_parser("inspect", help="a new ONNX model: I/O, a graphs[] entry, ops, what HTP rejects and why")
    p.add_argument("model", type=Path, help="the .onnx file")
    p.add_argument("--soc", action="append", help="chips to try (default: one per HTP arch of the flagship group)")
    p.add_argument("--input", action="append", metavar="NAME=1,3,640,640", help="the shape an input gets (repeatable; "
                   "default: 1 for a batch, 16 for other lengths, then 32, 64, 320, 640 when 16 does not line up)")
    p.add_argument("--samples", type=Path, help="a folder of real samples (.npz, one array per input): they give "
                   "the inputs' shapes, prepare's check against the original runs on them, and the nodes whose "
                   "values leave fp16's range on them are named")
    p.add_argument("--range", action="append", metavar="NAME=LOW,HIGH", help="the [low, high) values generated for "
                   "an input take where there are no samples (valid indices: ids=0,4); goes into the suggested entry")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("image", help="the SDK image's immutable reference (refuses an unpinned SDK)")
    _matrix_arg(p)
    p.add_argument("--owner", required=True, help="the repository owner (GITHUB_REPOSITORY_OWNER)")
    p.add_argument("--allow-unpinned", action="store_true", help="an unpinned SDK prints unpinned=true and exits 0 "
                   "(a push to the default branch before the pins are merged; a tag never passes this)")
    p.add_argument("--guard-private", action="store_true", help="refuse (exit 10) unless pushing the image keeps "
                   "the SDK private: not anonymously pullable, and not created by a public repository's workflow "
                   "(env: GITHUB_TOKEN, GITHUB_ACTOR, GITHUB_REPOSITORY, REPO_VISIBILITY)")
    p.set_defaults(func=cmd_image)

    p = sub.add_parser("bisect", help="where HTP goes wrong: the first node whose output leaves CPU's on a sample "
                       "(every fp16 parity failure, and every one of the ort route, runs it too)")
    p.add_argument("model", type=Path, help="the graph, with static shapes (a failed target's error names its "
                   "prepared graph and sample)")
    p.add_argument("--soc", default="SM8750", help="the chip (default SM8750)")
    p.add_argument("--sample", type=Path, help="an .npz with one array per input (default: generated inputs, "
                   "said as such)")
    p.add_argument("--quantized", action="store_true", help="the graph is a QDQ graph (w8a16/int8): probe its "
                   "activations")
    p.add_argument("--budget", type=int, default=48, help="intermediates per probe compile (default 48; 3 compiles "
                   "at most)")
    p.add_argument("--min-cosine", type=float, help="where an intermediate counts as leaving CPU's (default: the "
                   "precision's threshold)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bisect)

    p = sub.add_parser("probes", help="HTP's special values (Pow of -0, Sqrt of negatives, output ulps): the table, "
                       "or --run each on the HTP emulator and compare")
    p.add_argument("--run", action="store_true", help="compile and run every probe (onnxruntime-qnn); exit 7 when "
                   "one differs from the table")
    p.add_argument("--soc", default="SM8750", help="the chip to probe (default SM8750)")
    p.set_defaults(func=cmd_probes)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.verbose:
        os.environ["QNN_RELEASE_VERBOSE"] = "1"  # read by worker processes too
    _stop_on_sigterm()
    try:
        return int(args.func(args) or 0)
    except QnnReleaseError as e:
        if args.verbose:
            import traceback

            traceback.print_exc()
        _error(str(e))
        from .step_summary import append, failure

        append(failure(args.command, e.exit_code, str(e)))  # in GitHub Actions: why the step failed
        return e.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: still one line unless --verbose
        if args.verbose:
            raise
        _error(f"internal error: {type(e).__name__}: {e}".splitlines()[0] + " (run with --verbose for the traceback)")
        return 70


def _stop_on_sigterm() -> None:
    """CI cancels a job with SIGTERM: stop like Ctrl-C, so nothing half-finished looks finished."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    import threading

    if threading.current_thread() is threading.main_thread():  # signal handlers only go there
        signal.signal(signal.SIGTERM, stop)


def _error(text: str) -> None:
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())  # one line, whatever raised it
    red = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
    print(f"\033[31mqnn-release: error:\033[0m {text}" if red else f"qnn-release: error: {text}", file=sys.stderr)

