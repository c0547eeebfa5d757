"""The release page: ``index.html``, one self-contained file with every model x chip of a release.

Python decides what is on it (``page_data``: the grid per precision, the charts' bars, the assets
with their sha256); ``templates/report/page.html.j2`` decides how it looks. No script, no external
font, style or image (a Content-Security-Policy forbids them), no clock: the same release gives the
same bytes. ``package`` writes it from the manifest, the archives' metadata and the build report;
``qnn-release report`` writes it again for a packaged ``dist/release`` from its manifest and the
metadata.json inside its archives.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from ..compile.records import REPORT, BuildReport
from ..device.numbers import OnDevice
from ..errors import PackageError
from ..paths import TEMPLATES
from ..recipes import RecipeResult, figures_text, get_recipe
from ..sources.store import sha256_file
from ..util.files import write_atomic
from ..util.validation import first_error
from .manifest import PRECISION_ORDER, Manifest, ModelAsset, read_manifest
from .metadata import Metadata

PAGE = "index.html"
# published beside the archives; listed on the page with their sha256 (index.html itself cannot be)
EXTRA_FILES = ("qnn-fetch.sh", "RELEASE_NOTES.md", "SHA256SUMS", "manifest.json")
STATUS = {"passed": ("✓", "verified on real samples"), "generated": ("✓?", "verified on generated inputs only"),
          "unverified": ("○", "built, not verified"), "failed": ("✗", "failed"),
          "incomplete": ("◐", "incomplete"), "refused": ("⊘", "refused by the plan"), "absent": ("–", "not built")}
ATTENTION = ("failed", "incomplete", "refused", "unverified", "generated")  # first on the page, worst first
CAUSE = {"generated": "verified on generated inputs only: add real samples to the model's entry (samples:)",
         "unverified": "built, not run on the emulator (the route has none here)"}
BAR = {"label": 78, "width": 180, "row": 20, "text": 80}  # chart geometry in px


@functools.lru_cache(maxsize=1)
def page_env() -> jinja2.Environment:
    e = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                           undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                           keep_trailing_newline=True)
    e.filters["mb"] = size_text
    e.filters["num"] = lambda x, fmt: "" if x is None else format(x, fmt)
    return e


def size_text(n: int | None) -> str:
    return "" if n is None else f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def download_base(tag: str | None, repo: str | None = None) -> str | None:
    """Where the assets are downloaded from: the GitHub release (when the repository is known), else
    None (links relative to the page, which then sits beside the assets)."""
    repo = repo or os.environ.get("GITHUB_REPOSITORY")
    if not (repo and tag):
        return None
    server = os.environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    return f"{server}/{repo}/releases/download/{quote(tag, safe='')}/"


def _catalog():
    from ..catalog.socs import load_catalog

    try:
        return load_catalog()
    except Exception:  # the page is still made from the manifest alone
        return None


def _chip_info(name: str, metas: list[Metadata], cat) -> dict:
    for m in metas:
        if m.chip.name == name:
            return {"name": name, "marketing": m.chip.marketing, "arch": m.chip.htp_arch}
    try:
        soc = cat.get(name) if cat else None
    except Exception:
        soc = None
    return {"name": name, "marketing": soc.marketing if soc else None, "arch": soc.arch if soc else None}


def _ok_cell(asset: ModelAsset, meta: Metadata | None) -> dict:
    numbers = list(meta.numbers.values()) if meta else []
    parity = [n.parity_vs_cpu for n in numbers if n.parity_vs_cpu]
    latency = [n.emulator_latency_ms for n in numbers]
    measured = [x for x in latency if x is not None]
    sizes = [g.size for g in meta.graphs] if meta else []
    status = "passed" if asset.verified is not False and parity else "unverified"
    if status == "passed" and asset.verified_on != "real-samples":  # older manifests: not said, not real
        status = "generated"
    compile_seconds = asset.compile_seconds if asset.compile_seconds is not None else \
        (sum(n.compile_seconds for n in numbers) or None)
    return {"status": status, "asset": asset.name, "graphs": len(asset.graphs), "qnn_runtime": asset.qnn_runtime,
            "size": sum(sizes) if sizes else None, "compile_seconds": compile_seconds,
            "cosine": min(p.cosine for p in parity) if parity else asset.cosine,
            "snr_db": min(p.snr_db for p in parity) if parity else None,
            "max_abs": max(p.max_abs for p in parity) if parity else None,
            "by_max_abs": any(n.verification is not None and n.verification.passed_by == "max_abs" for n in numbers),
            "rules": [r for n in numbers if n.verification is not None for r in n.verification.rules or []],
            "latency_ms": round(sum(measured), 3) if latency and len(measured) == len(latency) else None,
            "error": None,
            "recipe_rows": _recipe_rows(meta.recipe if meta else None),
            "device": _device(meta.on_device if meta else None)}


def _device(d: OnDevice | None) -> dict | None:
    """A real device's figures (device-numbers.json): NPU latency, speedup vs its CPU, or why there are none."""
    if not d:
        return None
    return {"status": d.status, "reason": d.reason, "device": d.device, "via": d.via,
            "latency_ms": d.latency_ms, "cpu_latency_ms": d.cpu_latency_ms, "speedup": d.speedup_vs_cpu,
            "recipe_text": figures_text(d.recipe) if d.recipe else None}


def _recipe_rows(result: RecipeResult | None) -> list[tuple[str, str]]:
    """A model's recipe's rows (term, text): what its check measured for this archive."""
    return get_recipe(result.kind).page_rows(result.model_dump(mode="json")) if result else []


def _chart(title: str, unit: str, rows: list[tuple[str, float, str]]) -> dict:
    top = max((v for _, v, _ in rows), default=0) or 1
    bars = [{"label": label, "value": v, "text": text, "y": i * BAR["row"],
             "width": max(1, round(v / top * BAR["width"]))} for i, (label, v, text) in enumerate(rows)]
    return {"title": title, "unit": unit, "bars": bars, "geometry": BAR,
            "height": max(1, len(bars)) * BAR["row"], "total": BAR["label"] + BAR["width"] + BAR["text"]}


def _slug(*parts: str) -> str:
    """An anchor id: matrix names keep every character they may have (letters, digits, '.', '_', '-'), so two
    names never share one."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts))


def _verification(metas: list[Metadata]) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for m in metas:
        for n in m.numbers.values():
            v = n.verification
            if not v:
                continue
            what = (f"real inputs from {v.source}" if v.inputs == "real" else
                    f"generated inputs ({v.source})") + (f", {v.samples} sample(s)" if v.samples else "")
            out.setdefault(m.model.name, set()).add(f"{m.quantization.precision}: {what}")
    return {k: sorted(v) for k, v in sorted(out.items())}


def _warnings(metas: list[Metadata]) -> list[str]:
    """What prepare warned of, once per model and graph: a binary that is right about its graph but may not be
    about what an app feeds it (a padded recurrent graph)."""
    seen: dict[str, str] = {}
    for m in metas:
        for g in m.graphs:
            for note in g.prepare_notes:
                if note.startswith("warning:"):
                    seen.setdefault(f"{m.model.name}/{g.name}: {note.removeprefix('warning: ')}", "")
    return sorted(seen)


def _cells(manifest: Manifest, metas: dict[str, Metadata], report: BuildReport | None) -> tuple[dict, list]:
    """(precision, chip, model) -> what its cell shows; and the build's failures."""
    cells: dict[tuple[str, str, str], dict] = {}
    for a in manifest.assets:
        if a.kind == "model":
            cells[(a.precision, a.soc, a.model)] = _ok_cell(a, metas.get(a.name))
    for line in manifest.skipped:
        m = re.match(r"^([^/]+)/([^/]+)/(\S+)\s*(.*)$", line)
        if m:
            cells.setdefault((m[3], m[2], m[1]), {"status": "incomplete", "error": m[4].strip("() ") or None})
    failures = []
    for r in report.failed if report is not None else []:
        failures.append({"id": r.id, "error": r.error or "", "exit_code": r.exit_code})
        key = (r.precision, r.soc, r.model)
        if cells.get(key, {}).get("status") in (None, "incomplete"):
            cells[key] = {"status": "failed", "error": f"{r.graph}: {r.error or ''}".strip(": ")}
        elif cells[key]["status"] == "failed":
            cells[key]["error"] += f"; {r.graph}: {r.error or ''}"
    for refused in report.refused if report is not None else []:
        key = (refused.get("precision", ""), refused.get("soc", ""), refused.get("model", ""))
        cells.setdefault(key, {"status": "refused", "error": refused.get("reason")})
    for c in cells.values():
        c["symbol"], c["text"] = STATUS[c["status"]]
    return cells, failures


def _attention(cells: dict) -> list[dict]:
    """Every target that is not verified on real samples, worst first, with its cause: what the page starts with."""
    rows = [{"model": m, "chip": c, "precision": p, "status": x["status"], "symbol": x["symbol"], "text": x["text"],
             "cause": x.get("error") or CAUSE.get(x["status"], ""), "href": "#" + _slug("model", m)}
            for (p, c, m), x in cells.items() if x["status"] in ATTENTION]
    return sorted(rows, key=lambda r: (ATTENTION.index(r["status"]), r["model"], r["chip"], r["precision"]))


def _overview(cells: dict, models: list[str], chips: list[str], precisions: list[str]) -> list[dict]:
    """One row per model (they grow; chips are few): a compact status per chip and precision, models with a
    problem first."""
    rows = []
    for m in models:
        per_chip: list[dict[str, Any]] = [
            {"chip": c, "badges": [{"precision": p, **{k: cells[(p, c, m)][k] for k in ("status", "symbol", "text")}}
                                   for p in precisions if (p, c, m) in cells]} for c in chips]
        statuses = [b["status"] for pc in per_chip for b in pc["badges"]]
        rank = min((ATTENTION.index(s) for s in statuses if s in ATTENTION), default=len(ATTENTION))
        rows.append({"model": m, "slug": _slug("model", m), "chips": per_chip, "rank": rank,
                     "targets": len(statuses), "verified": statuses.count("passed")})
    return sorted(rows, key=lambda r: (r["rank"], r["model"]))


def _chip_pages(cells: dict, chips: list[dict], models: list[str], precisions: list[str]) -> list[dict]:
    """A page per chip ("everything for SM8750"): each model's archives for it, with status and numbers."""
    pages = []
    for chip in chips:
        rows = [{"model": m, "model_slug": _slug("model", m), "precision": p, **cells[(p, chip["name"], m)]}
                for m in models for p in precisions if (p, chip["name"], m) in cells]
        pages.append({**chip, "rows": rows, "verified": sum(r["status"] == "passed" for r in rows)})
    return pages


def _model_pages(cells: dict, models: list[str], chips: list[dict], precisions: list[str]) -> list[dict]:
    """A page per model: its chips (rows) at each precision with the numbers side by side, and its archives."""
    pages = []
    for m in models:
        rows = [{"chip": chip, "chip_slug": chip["slug"], "precision": p, **cells[(p, chip["name"], m)]}
                for chip in chips for p in precisions if (p, chip["name"], m) in cells]
        pages.append({"model": m, "slug": _slug("model", m), "rows": rows})
    return pages


def _chip_charts(cells: dict, pages: list[dict], models: list[str], precisions: list[str]) -> list[dict]:
    """The release's chips compared, at any catalogue size: the share of each chip's targets verified on real
    samples, and per chip the median over models of its binary size and emulator latency relative to the same model
    on the release's other chips (1.00: as the model's median chip)."""
    import statistics

    charts = []
    rows = [(p["name"], 100 * p["verified"] / len(p["rows"]), f"{p['verified']}/{len(p['rows'])} verified")
            for p in pages if p["rows"]]
    if rows:
        charts.append({"id": "chips-verified", "kind": "verified",
                       "chart": _chart("Targets verified on real samples, per chip", "%", rows)})
    measures = (("size", "Context binary size", lambda x: x.get("size")),
                ("device", "Latency on a real device (NPU)", lambda x: (x.get("device") or {}).get("latency_ms")),
                ("latency", "HTP emulator latency (x86-64 host, not a device)", lambda x: x.get("latency_ms")))
    for kind, title, value in measures:
        ratios: dict[str, list[float]] = {}
        for m in models:
            for prec in precisions:
                got: dict[str, float] = {p["name"]: v for p in pages if (prec, p["name"], m) in cells
                                         and (v := value(cells[(prec, p["name"], m)]))}
                if len(got) < 2:
                    continue
                mid = statistics.median(got.values())
                for c, v in got.items():
                    ratios.setdefault(c, []).append(v / mid)
        rows = [(p["name"], statistics.median(ratios[p["name"]]), f"{statistics.median(ratios[p['name']]):.2f}x")
                for p in pages if ratios.get(p["name"])]
        if rows:
            charts.append({"id": f"chips-{kind}", "kind": kind, "chart": _chart(
                f"{title} per chip, relative to the same model's median chip (median over {len(models)} model(s))",
                "x", rows)})
    return charts


def _asset_rows(manifest: Manifest, files: dict[str, tuple[int, str]], base: str | None) -> tuple[list, dict]:
    """The assets table's rows, and each asset's link by its name."""
    def href(name: str, release: str | None) -> str:  # an asset of a linked release: beside this one's folder
        return ((f"{base}../{quote(release, safe='')}/" if base else "") if release else (base or "")) + quote(name)

    links = {a.name: href(a.pieces[0].name if a.pieces else a.name, a.release) for a in manifest.assets}
    assets = [{"name": a.name + (f" ({len(a.pieces)} pieces)" if a.pieces else ""), "kind": a.kind, "size": a.size,
               "sha256": a.sha256, "href": links[a.name]} for a in manifest.assets]
    assets += [{"name": p.name, "kind": "piece", "size": p.size, "sha256": p.sha256, "href": href(p.name, a.release)}
               for a in manifest.assets for p in (a.pieces or [])]
    assets += [{"name": n, "kind": "file", "size": size, "sha256": sha, "href": (base or "") + quote(n)}
               for n, (size, sha) in files.items()]
    return assets, links


def page_data(manifest: Manifest, metas: dict[str, Metadata], report: BuildReport | None,
              files: dict[str, tuple[int, str]], base: str | None) -> dict:
    """Everything the page shows. ``files``: the release's other files (name -> (size, sha256))."""
    cat = _catalog()
    cells, failures = _cells(manifest, metas, report)
    order = {n: i for i, n in enumerate(cat.names())} if cat else {}
    chip_names = sorted({k[1] for k in cells}, key=lambda n: (order.get(n, len(order)), n))
    models = sorted({k[2] for k in cells})
    precisions = [p for p in PRECISION_ORDER if any(k[0] == p for k in cells)]
    all_metas = list(metas.values())
    chips = [{**_chip_info(c, all_metas, cat), "slug": _slug("chip", c)} for c in chip_names]
    assets, links = _asset_rows(manifest, files, base)
    for x in cells.values():  # each archive's link, for the model and chip pages
        x["href"] = links.get(x.get("asset"))
    chip_pages = _chip_pages(cells, chips, models, precisions)
    count = {s: sum(c["status"] == s for c in cells.values()) for s in STATUS if s != "absent"}
    return {"tag": manifest.tag, "toolkit": manifest.toolkit, "sdk_versions": manifest.sdk_versions,
            "images": manifest.images, "tools": sorted({f"{m.sdk.route}: {m.sdk.tool}" for m in all_metas}),
            "commits": sorted({m.toolkit_commit for m in all_metas if m.toolkit_commit}),
            "created": max((m.created or "" for m in all_metas), default="") or None,
            "models": models, "chips": chips, "precisions": precisions, "attention": _attention(cells),
            "overview": _overview(cells, models, chip_names, precisions), "chip_pages": chip_pages,
            "model_pages": _model_pages(cells, models, chips, precisions),
            "chip_charts": _chip_charts(cells, chip_pages, models, precisions),
            "failures": failures, "count": count, "verification": _verification(all_metas),
            "warnings": _warnings(all_metas), "assets": assets, "statuses": STATUS,
            "has_fetch_sh": "qnn-fetch.sh" in files, "device_numbers": manifest.device_numbers}


def render_page(data: dict) -> str:
    return page_env().get_template("report/page.html.j2").render(**data)


def _files(folder: Path) -> dict[str, tuple[int, str]]:
    return {n: ((folder / n).stat().st_size, sha256_file(folder / n)) for n in EXTRA_FILES if (folder / n).is_file()}


def write_page(folder: Path, manifest: Manifest, metas: dict[str, Metadata], report: BuildReport | None,
               base: str | None = None) -> Path:
    data = page_data(manifest, metas, report, _files(folder), base or download_base(manifest.tag))
    write_atomic(folder / PAGE, render_page(data))
    return folder / PAGE


def read_metadata(archive: Path) -> Metadata:
    """The metadata.json at the top of a model archive (read as a stream: nothing is extracted)."""
    import pydantic

    try:
        with tarfile.open(archive, "r:*") as tar:
            for m in tar:
                if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/metadata.json"):
                    member = tar.extractfile(m)
                    if member is not None:
                        return Metadata.model_validate(json.load(member))
    except (tarfile.TarError, OSError, ValueError) as e:
        if isinstance(e, pydantic.ValidationError):
            where, msg = first_error(e)
            raise PackageError(f"{archive}: its metadata.json is not one this version reads (at {where}: {msg})",
                               hint="package the release again with this qnn-release") from None
        raise PackageError(f"{archive}: cannot read its metadata.json: {e}") from None
    raise PackageError(f"{archive}: no metadata.json in it")


def report(path: Path, repo: str | None = None) -> Path:
    """``qnn-release report``: index.html for a packaged release folder (``dist`` or ``dist/release``)."""
    from .publish import release_dir

    try:
        folder = release_dir(Path(path))
    except Exception as e:
        raise PackageError(str(e).split(" (hint")[0], hint="run `qnn-release package` first") from None
    manifest = read_manifest(folder / "manifest.json")
    metas = {a.name: read_metadata(folder / a.name) for a in manifest.assets
             if a.kind == "model" and (folder / a.name).is_file()}
    build = None
    for candidate in (folder / REPORT, folder.parent / REPORT):
        if candidate.is_file():
            try:
                build = BuildReport.read(candidate)
            except (OSError, ValueError, TypeError):  # a report this page cannot read: the page without failures
                build = None
            break
    return write_page(folder, manifest, metas, build, download_base(manifest.tag, repo))
