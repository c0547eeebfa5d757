"""``qnn-release package``: per-chip archives, qnn-libs, manifest, SHA256SUMS and release notes.

Reads ``dist/build-report.json``; writes ``dist/release/`` (the assets to publish) atomically.
A consistency gate refuses a release whose binaries were compiled with another SDK version
than the qnn-libs shipped beside them, or for another chip than their name says.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, cast

from .. import __version__
from ..builder.kept import kept_licence, kept_or_cached
from ..builder.twin import twin_stem
from ..builder.twins import Group, complete_groups, quantized_twins, twin_soc
from ..compile import qnn_ep
from ..compile.records import GENERATED, REAL, REPORT, BuildReport, TargetRecord, read_target, verdict, weakest
from ..compile.sample import ran_of, sample_members
from ..device.common import parity_failures
from ..device.numbers import FILE as DEVICE_FILE
from ..device.numbers import DeviceNumbers, on_device
from ..errors import PackageError, VerifyError
from ..matrix.schema import HfSource, LoadedMatrix, Model, PartsSource, PathSource, PipSource, UrlSource, load_matrix
from ..prepare.graph import Prepared
from ..prepare.quantize import BITS
from ..recipes import ArchiveExtras, ArchivePart, figures_text, recipe_for
from ..sources.store import sha256_file
from ..util.files import replace_dir, write_atomic, write_json
from ..util.qnn_version import core as version_core
from ..util.validation import first_error
from .archive import make_tar_bz2
from .clients import write_fetch_sh
from .layout import Limits, place, split_large, uploads
from .manifest import LibsAsset, Manifest, ModelAsset, TwinAsset, manifest_json
from .metadata import METADATA_VERSION, Metadata
from .page import write_page
from .qnn_libs import build_qnn_libs
from .qnn_libs import sdk_version as libs_version
from .runtime import loads_on, runtime_advice, runtime_needed
from .templating import render

RELEASE_DIR = "release"


@dataclass
class PackageResult:
    release: Path
    assets: list[ModelAsset | LibsAsset | TwinAsset]
    notes: Path | None
    manifest: Manifest


def sdk_sha256(root: Path) -> str | None:
    """The sha256 of the zip an SDK tree was unpacked from, as ``sdk fetch`` recorded it beside the tree."""
    from ..qairt_zip import MARKER

    try:
        return json.loads((root / MARKER).read_text()).get("sha256")
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=1)
def _git_commit() -> str | None:
    from ..paths import CHECKOUT, REPO_ROOT
    from ..util.git import git_out

    if not CHECKOUT:  # an installed wheel: no history of its own (never the repository it sits in)
        return None
    out = git_out(REPO_ROOT, "rev-parse", "HEAD")
    return out.strip() if out is not None else None


@functools.lru_cache(maxsize=8)
def _repo_commit(root: Path) -> str | None:
    """The commit of the repository holding the matrix (a path source's revision): asked once per release."""
    from ..util.git import git_out

    out = git_out(root, "rev-parse", "HEAD")
    return out.strip() if out is not None else None


def _repo_revision(src, root: Path) -> tuple[str, str | None]:
    if isinstance(src, HfSource):
        return src.repo, src.revision
    if isinstance(src, PipSource):
        name, version = src.package.split("==")
        return name, version
    if isinstance(src, UrlSource):
        return src.url, None
    if isinstance(src, PartsSource):
        pins = [_repo_revision(s, root) for s in src.sources]
        return " + ".join(r for r, _ in pins), " + ".join(v or "-" for _, v in pins)
    assert isinstance(src, PathSource)
    return src.path, _repo_commit(root)


def _source_info(model: Model, prepared: list[Prepared], root: Path) -> dict:
    src = model.source
    repo, rev = _repo_revision(src, root)
    return {"name": model.name, "description": model.description, "license": model.license,
            "source_kind": src.kind, "repo": repo, "revision": rev,
            "source_sha256": {p.graph: p.source_sha256 for p in prepared}}


@dataclass(frozen=True, kw_only=True)
class PackageSettings:
    """How a release is packaged (``qnn-release package``'s flags, or ``build --package``'s); it travels whole."""

    tag: str | None = None  # also writes release_notes/<tag>.md
    qnn_sdk: Path | None = None  # a QAIRT SDK tree: qnn-libs-<version>.tar.bz2 beside the archives
    previous: Path | None = None  # the previous release's manifest.json (the notes' changes)
    matrix: Path | None = None  # None: the one the build report names
    notes_dir: Path | None = None  # None: release_notes/ beside the matrix's folder
    device_numbers: Path | None = None  # None: device-numbers.json in the build folder, if any
    require_verified: bool = False  # refuse targets never run on the HTP emulator


def package(out: Path, settings: PackageSettings | None = None) -> PackageResult:
    """The release in ``out/release``: every archive and twin copied from what the build kept (``out``), nothing
    built, run or judged again."""
    s = settings or PackageSettings()
    report = BuildReport.load(out / REPORT, PackageError)
    if report.interrupted:  # a half-finished build never looks finished: its twins and inputs are not all there
        raise PackageError(f"{report.path}: the build was interrupted",
                           hint="run `qnn-release build` again (what it finished is reused)")
    loaded: LoadedMatrix = load_matrix(s.matrix or report.matrix)
    complete, skipped = _complete(report, loaded)
    _verified_gate(loaded, complete, s.require_verified)
    targets, compiled, archs = _consistency_gate(out, loaded, complete, s.qnn_sdk)
    release = out / RELEASE_DIR
    tmp = Path(tempfile.mkdtemp(prefix=".release.", dir=out))
    done = False
    try:
        libs, libs_name = _qnn_libs(s.qnn_sdk, archs, tmp)
        assets: list[ModelAsset | LibsAsset | TwinAsset] = list(libs)
        prepared = {(p["model"], p["graph"]): kept_or_cached(out, Prepared.load_dict(p)) for p in report.prepared}
        job = _Archives(out=out, tmp=tmp, loaded=loaded, report=report, targets=targets, compiled=compiled,
                        libs_name=libs_name, prepared=prepared,
                        device=_device_numbers(out, loaded, s.device_numbers, complete))
        metas: dict[str, Metadata] = {}  # archive name -> its metadata.json, for the release page
        for key, records in sorted(complete.items()):
            asset, meta = job.archive(key, records)
            assets.append(asset)
            metas[asset.name] = meta
        assets += _twins(job, complete, metas)
        # GitHub's limits: pieces for a file over the size limit, linked releases past 1,000 assets
        limits = Limits(max_assets=loaded.matrix.release.max_assets,
                        max_asset_bytes=loaded.matrix.release.max_asset_bytes)
        assets, parts = place(split_large(tmp, assets, limits), s.tag, limits)
        manifest = _manifest(loaded, s.tag, (assets, parts), complete, skipped, job.device)
        notes_path = _notes(tmp, loaded, s, manifest, _runtimes(metas, libs_name))
        write_json(tmp / "manifest.json", manifest_json(manifest))  # the values, as they are written
        client = write_fetch_sh(tmp, loaded.catalog)  # qnn-fetch.sh: fetch without Python, beside the archives
        sums = "".join(f"{sha}  {name}\n" for name, sha, _, _ in uploads(manifest.assets))
        write_atomic(tmp / "SHA256SUMS", sums + f"{sha256_file(client)}  {client.name}\n")
        write_page(tmp, manifest, metas, report)  # index.html: the release page, last (it lists the others' sha256)
        replace_dir(tmp, release)
        done = True
        if notes_path is not None:
            write_atomic(notes_path, (release / "RELEASE_NOTES.md").read_text())
            write_json(notes_path.with_name(f"{s.tag}.manifest.json"), manifest_json(manifest))
        return PackageResult(release=release, assets=list(manifest.assets), notes=notes_path, manifest=manifest)
    finally:
        if not done:
            shutil.rmtree(tmp, ignore_errors=True)


def _twins(job: _Archives, complete: dict, metas: dict[str, Metadata]) -> list[TwinAsset]:
    """Each model's twins as the build measured and kept them (``release/twin.py``): the float one, and one per
    quantized precision whose QDQ graphs its binaries were compiled from; found by the build's own rules."""
    from .twin import twin_archive

    out = []
    for name in sorted({k[0] for k in complete}):
        model = job.loaded.matrix.model(name)
        if any((name, g.name) not in job.prepared for g in model.graphs):
            continue
        meta = next(m for a, m in sorted(metas.items()) if m.model.name == name)
        preps = [job.prepared[(name, g.name)] for g in model.graphs]
        soc = twin_soc(job.loaded, complete, name).name
        licence = _licence(job.out, model, meta)
        twins: list[tuple[str, dict[str, str | None]]] = [("float", {p.graph: p.sha256 for p in preps})]
        twins += [(precision, dict.fromkeys(qdq)) for precision, qdq in quantized_twins(complete, name, preps)]
        for precision, graphs in twins:
            expect = {"model": model, "soc": soc, "graphs": graphs, "build": job.report.started}
            made = twin_archive(job.tmp, job.out, twin_stem(name, precision), expect, licence)
            if made is not None:  # None: the model's recipe ships no twin
                out.append(_twin_asset(*made))
    return out


def _twin_asset(archive: Path, values: dict) -> TwinAsset:
    """A twin's manifest entry, from its twin.json values."""
    return _asset(TwinAsset, name=archive.name, kind="twin", model=values["model"], precision=values["kind"],
                  graphs=[g["name"] for g in values["graphs"]],
                  on_device_compile=[{k: g["on_device_compile"][k] for k in (
                      "soc", "qnn_version", "first_load_seconds", "peak_memory_mb", "verified")}
                      for g in values["graphs"] if "not_measured" not in g["on_device_compile"]],
                  size=archive.stat().st_size, sha256=sha256_file(archive))


class _Made(NamedTuple):
    """What an archive's graphs gave: their prepared graphs, their ``graphs[]`` entries and their numbers."""

    preps: list[Prepared]
    graphs: list[dict]
    numbers: dict


def _complete(report: BuildReport, loaded: LoadedMatrix) -> tuple[dict[Group, list[TargetRecord]], list[str]]:
    """The (model, chip, precision) whose every graph is built, and a line for each one that is not."""
    complete, skipped = complete_groups(report.records, loaded)
    if not complete:
        raise PackageError(f"{report.path}: no model has every graph built for any chip",
                           hint="fix the failed targets and build again")
    return complete, skipped


def _verified_gate(loaded: LoadedMatrix, complete: dict[Group, list[TargetRecord]], require_verified: bool) -> None:
    """``--require-verified``: every target ran on an emulator, on real samples unless the matrix says why not."""
    if not require_verified:
        return
    unverified = [r.id for records in complete.values() for r in records if not r.verified]
    if unverified:
        raise PackageError(f"--require-verified: {len(unverified)} target(s) were never run on the HTP emulator: "
                           + ", ".join(unverified[:6]) + (" ..." if len(unverified) > 6 else ""),
                           hint="build them with a route that has an emulator (qnn-net-run in the SDK, or ort)")
    generated = sorted({r.model for records in complete.values() for r in records
                        if verdict(r) == GENERATED and not loaded.matrix.model(r.model).generated_inputs_ok})
    if generated:
        raise PackageError(f"--require-verified: {', '.join(generated)} verified on generated inputs only",
                           hint="give the model real samples (`samples:` in the matrix), or say why generated "
                                "inputs are enough with `generated_inputs_ok: <why>`")


def _consistency_gate(out: Path, loaded: LoadedMatrix, complete: dict[Group, list[TargetRecord]],
                      qnn_sdk: Path | None) -> tuple[dict[str, TargetRecord], dict[str, str], set[int]]:
    """Every target's folder record (target.json, read here once) and the compiled SDK and chip read back from every
    binary's stub: (records, QNN version per target id, HTP archs). Refuses a folder without a finished build, binaries
    for another chip than their name says, or of another SDK than the qnn-libs beside them."""
    offenders: list[str] = []
    targets: dict[str, TargetRecord] = {}
    compiled: dict[str, str] = {}
    archs: set[int] = set()
    for (_, soc_name, _), records in complete.items():
        soc = loaded.catalog.get(soc_name)
        archs.add(soc.htp_arch)
        for r in records:
            folder = out / r.id
            target = read_target(folder)
            if target is None:
                offenders.append(f"{r.id}: no finished build in {folder}")
                continue
            if target.key != r.key or not target.context_onnx or not target.binaries:
                offenders.append(f"{r.id}: {folder} holds another build than the report")
                continue
            targets[r.id] = target
            got = qnn_ep.compiled_for(folder / target.context_onnx)
            compiled[r.id] = got["sdk"]
            if not qnn_ep.proves_chip(got["htp_arch"], got["soc_model"], soc):
                offenders.append(f"{r.id}: compiled for v{got['htp_arch']}/soc_model {got['soc_model']}, "
                                 f"not {soc.name} ({soc.arch}/{soc.soc_model})")
    offenders += _sdk_offenders(complete, compiled, qnn_sdk)
    if offenders:
        raise PackageError(f"release refused, {len(offenders)} inconsistent binaries: " + "; ".join(offenders),
                           hint="rebuild them with one SDK version (and ship that version's qnn-libs)")
    return targets, compiled, archs


def _sdk_offenders(complete: dict[Group, list[TargetRecord]], compiled: dict[str, str],
                   qnn_sdk: Path | None) -> list[str]:
    libs_ver = libs_version(qnn_sdk) if qnn_sdk else None
    if qnn_sdk and not version_core(libs_ver):
        raise PackageError(f"--qnn-sdk {qnn_sdk}: cannot tell its QNN version from the folder name",
                           hint="point it at qairt/<major.minor.patch.build>")
    libs_sha = sdk_sha256(qnn_sdk) if qnn_sdk else None
    offenders = []
    for records in complete.values():
        for r in records:
            sdk = compiled.get(r.id)
            if sdk is None:
                continue
            if libs_ver and version_core(sdk) != version_core(libs_ver):
                offenders.append(f"{r.id}: compiled with QNN {sdk or '(no version)'}, "
                                 f"the release ships qnn-libs-{libs_ver}")
            elif libs_sha and r.sdk_sha256 and r.sdk_sha256 != libs_sha:
                offenders.append(f"{r.id}: compiled with the SDK zip sha256 {r.sdk_sha256[:12]}..., the "
                                 f"qnn-libs come from {libs_sha[:12]}... (same version string, other content)")
    sdks = set(compiled.values())
    if not libs_ver and len(sdks) > 1:
        offenders.append(f"binaries of several SDK versions in one release: {', '.join(sorted(sdks))}")
    return offenders


def _libs_kinds(libs: Path, inc: Path) -> list[tuple[Path, Literal["qnn-libs", "qnn-include"]]]:
    return [(libs, "qnn-libs"), (inc, "qnn-include")]


def _qnn_libs(qnn_sdk: Path | None, archs: set[int], tmp: Path) -> tuple[list[LibsAsset], str | None]:
    """``qnn-libs-<version>.tar.bz2`` and ``qnn-include-<version>.tar.bz2``, when an SDK tree is given."""
    if not qnn_sdk:
        return [], None
    libs_ver = libs_version(qnn_sdk)
    libs, inc = build_qnn_libs(qnn_sdk, sorted(archs), tmp)
    return [LibsAsset(name=path.name, kind=kind, sdk_version=libs_ver, htp_archs=[f"v{a}" for a in sorted(archs)],
                      size=path.stat().st_size, sha256=sha256_file(path))
            for path, kind in _libs_kinds(libs, inc)], libs.name


@dataclass(kw_only=True)
class _Archives:
    """One archive per (model, chip, precision): its members, ``metadata.json`` and manifest entry."""

    out: Path
    tmp: Path
    loaded: LoadedMatrix
    report: BuildReport
    targets: dict[str, TargetRecord]  # target id -> its folder's target.json, as the consistency gate read it
    compiled: dict[str, str]  # target id -> the QNN version its stub says
    libs_name: str | None
    prepared: dict[tuple[str, str], Prepared]
    device: DeviceNumbers | None  # device-numbers.json, when the targets were measured on devices

    def archive(self, key: Group, records: list[TargetRecord]) -> tuple[ModelAsset, Metadata]:
        """(manifest asset, metadata) of one archive, written into ``tmp``."""
        model_name, soc_name, precision = key
        model, soc = self.loaded.matrix.model(model_name), self.loaded.catalog.get(soc_name)
        sdk = self.compiled[records[0].id]
        # asset names carry the pinned version (major.minor.patch.build), not a binary's build stamp
        stem = f"{model_name}-{soc_name.lower()}-{precision}-qnn{version_core(sdk) or sdk}"
        members: list[tuple[str, Path | bytes]] = []
        graphs, numbers, preps = [], {}, []
        by_graph = {r.graph: r for r in records}
        for g in model.graphs:
            graph, number, prep = self._graph(model, stem, by_graph[g.name], members)
            graphs.append(graph)
            numbers[g.name] = number
            preps.append(prep)
        recipe = recipe_for(model)
        extras = recipe.archive_extras(ArchivePart(report=self.report, model=model, soc=soc, records=records,
                                                   stem=stem, root=self.loaded.root,
                                                   binaries=[g["binary"] for g in graphs])) \
            if recipe is not None else ArchiveExtras()
        members += extras.members
        if len({m[0] for m in members}) != len(members):
            raise PackageError(f"{stem}: two graphs of {model_name} write files with the same name")
        result = {"kind": recipe.kind, **extras.result} if recipe is not None and extras.result else None
        meta = _metadata(self._metadata_fields(model, soc, sdk, records, _Made(preps, graphs, numbers), result))
        meta_json = json.dumps(meta.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
        members += [(f"{stem}/metadata.json", meta_json.encode()),
                    (f"{stem}/README.md", render("archive_readme.md.j2", meta=meta, runtime=runtime_advice(
                        meta.sdk.route, meta.sdk.tool, meta.sdk.qnn_version, meta.chip.htp_arch, meta.runtime_libs),
                        **{"recipe_readme": None, "recipe_sample_row": None, **extras.readme}).encode()),
                    (f"{stem}/LICENSE", _licence(self.out, model, meta))]
        archive = make_tar_bz2(self.tmp / f"{stem}.tar.bz2", members)
        numbers_ = list(meta.numbers.values())
        asset = _asset(ModelAsset, name=archive.name, kind="model", model=model_name, soc=soc.name,
                       soc_aliases=[soc.name.lower(), *soc.aliases], soc_model=soc.soc_model, htp_arch=soc.arch,
                       precision=precision, sdk_version=sdk, qnn_runtime=runtime_needed(sdk),
                       graphs=[g.name for g in meta.graphs],
                       qnn_libs=self.libs_name, verified=all(r.verified for r in records),
                       verified_on=weakest(verdict(r) for r in records),
                       cosine=min(n.parity_vs_cpu.cosine if n.parity_vs_cpu else 1.0 for n in numbers_),
                       compile_seconds=round(sum(n.compile_seconds for n in numbers_), 3), device=meta.on_device,
                       size=archive.stat().st_size, sha256=sha256_file(archive))
        return asset, meta

    def _graph(self, model: Model, stem: str, r: TargetRecord,
               members: list[tuple[str, Path | bytes]]) -> tuple[dict, dict, Prepared]:
        """One graph's files (appended to ``members``), its ``graphs[]`` entry and its numbers."""
        folder = self.out / r.id
        target = self.targets[r.id]
        prep = self.prepared.get((model.name, r.graph))
        if prep is None:
            raise PackageError(f"{r.id}: the build report has no prepared graph for it",
                               hint="run `qnn-release build` again (nothing recompiles)")
        ctx = cast(str, target.context_onnx)  # the consistency gate refused a target without one
        binary = folder / cast(list, target.binaries)[0]
        members += [(f"{stem}/{ctx}", folder / ctx), (f"{stem}/{binary.name}", binary)]
        recipe = recipe_for(model)
        if recipe is None or recipe.graph_samples:  # else the recipe ships samples of its own kind
            members += sample_members(stem, prep, ran_of(folder, r.id), model.options.constant_outputs)
        graph = {"name": r.graph, "prepared_sha256": prep.sha256, "prepare_notes": prep.notes,
                 "stub_io": qnn_ep.stub_io_names(folder / ctx, prep),
                 "parameters": prep.parameters or None, "source_parameters": prep.source_parameters or None,
                 "inputs": [t.__dict__ for t in prep.inputs], "outputs": [t.__dict__ for t in prep.outputs],
                 "context_onnx": ctx, "binary": binary.name,
                 "size": binary.stat().st_size, "sha256": sha256_file(binary)}
        emu = target.emulator_seconds
        number = {"compile_seconds": target.compile_seconds, "parity_vs_cpu": target.parity,
                  "emulator_latency_ms": round(emu * 1000, 3) if emu is not None else None,
                  "verified": bool(target.verified), "verification": verification(model, target)}
        run = self.device.targets.get(r.id) if self.device else None
        if run is not None:
            number["device"] = run.model_dump(mode="json")
        return graph, number, prep

    def _on_device(self, model: Model, records: list[TargetRecord], result: dict | None) -> dict | None:
        """The archive's ``on_device`` from device-numbers.json, with its recipe's figures (from ``result``)."""
        runs = {r.graph: self.device.targets[r.id] for r in records if self.device and r.id in self.device.targets}
        recipe = recipe_for(model)

        def figures(rs: dict) -> dict | None:
            found = recipe.device_summary(rs, result) if recipe is not None and result else None
            return {"kind": recipe.kind, **found} if recipe is not None and found else None

        summary = on_device(runs, figures)
        return summary.model_dump(mode="json") if summary else None

    def _metadata_fields(self, model: Model, soc, sdk: str, records: list[TargetRecord], made: _Made,
                         result: dict | None) -> dict:
        """metadata.json's values: ``made``, what the archive's graphs gave (their entries and numbers)."""
        preps, graphs, numbers = made
        first = records[0]
        precision = first.precision
        act, weight = BITS[precision]
        return {
            "metadata_version": METADATA_VERSION, "toolkit": f"qnn-release {__version__}",
            "toolkit_commit": _git_commit(), "created": max(r.created or "" for r in records) or None,
            "chip": {"name": soc.name, "marketing": soc.marketing, "soc_model": soc.soc_model,
                     "htp_arch": soc.arch, "vtcm_mb": soc.vtcm_mb, "aliases": soc.aliases},
            "sdk": {"route": first.backend, "qnn_version": sdk, "tool": self.report.sdk_version,
                    "sdk_sha256": first.sdk_sha256, "image": first.image},
            "model": _source_info(model, preps, self.loaded.root), "graphs": graphs,
            "quantization": {"precision": precision, "activation_bits": act, "weight_bits": weight,
                             "calibration_sha256": first.calibration_sha256, "weight_scales": first.weight_scales},
            "numbers": numbers, "runtime_libs": self.libs_name,
            "on_device": self._on_device(model, records, result), "recipe": result,
        }


def _manifest(loaded: LoadedMatrix, tag: str | None, placed: tuple[list, list[str]],
              complete: dict[Group, list[TargetRecord]], skipped: list[str], device: DeviceNumbers | None) -> Manifest:
    """manifest.json: ``placed``, the assets each in the release that holds it, and the linked parts' tags."""
    assets, parts = placed
    warnings = _sdk_warnings(loaded, {a.sdk_version for a in assets if a.kind == "model"})
    version = 2 if parts or any(a.pieces for a in assets) else 1  # a version-1 client reads the others as before
    return _asset(Manifest, manifest_version=version, tag=tag, toolkit=f"qnn-release {__version__}", parts=parts,
                  warnings=warnings,
                  sdk_versions=sorted({a.sdk_version for a in assets if a.kind != "twin"}),
                  images=sorted({r.image for rs in complete.values() for r in rs if r.image}),
                  skipped=skipped, device_numbers=_device_note(device), assets=sorted(assets, key=lambda a: a.name))


def _device_note(device: DeviceNumbers | None) -> str:
    if device is None:
        return "no device numbers: `qnn-release device-numbers` did not run for this release"
    if device.note and device.note.startswith("no device numbers"):
        return device.note
    ok = sum(r.measured_ok for r in device.targets.values())
    via = "Qualcomm AI Hub" if device.via == "ai-hub" else "a phone on adb"
    return (f"measured on real devices through {via}: {ok} of {len(device.targets)} targets ({device.created})"
            + (f"; {device.note}" if device.note else ""))


def _runtimes(metas: dict[str, Metadata], libs: str | None) -> list[list[str]]:
    """What the release notes say of the runtime, once per route and QNN version of its archives."""
    seen = sorted({(m.sdk.route, m.sdk.tool, m.sdk.qnn_version) for m in metas.values()})
    return [runtime_advice(route, tool, version, "v<arch>", libs) for route, tool, version in seen]


def _notes(tmp: Path, loaded: LoadedMatrix, s: PackageSettings, manifest: Manifest,
           runtimes: list[list[str]]) -> Path | None:
    """``RELEASE_NOTES.md`` for a tag (with the changes since the previous release); where it goes in the repo."""
    tag = s.tag
    if not tag:
        return None
    notes_dir = s.notes_dir or loaded.root / "release_notes"
    prev = s.previous or _previous_manifest(notes_dir, tag)
    changes = _changes(manifest, prev)
    notes = render("release_notes.md.j2", tag=tag, manifest=manifest, changes=changes, previous=prev,
                   runtimes=runtimes, recipe_text=figures_text,
                   comparison=None if changes["first"] or prev is None else _comparison(loaded, manifest, prev, tmp))
    write_atomic(tmp / "RELEASE_NOTES.md", notes)
    return notes_dir / f"{tag}.md"


def _sdk_warnings(loaded: LoadedMatrix, compiled: set[str]) -> list[str]:
    """The matrix pins one QAIRT version; binaries compiled with another QNN say so in the notes."""
    pinned = loaded.matrix.sdk.qairt[0].version
    other = sorted(v for v in compiled if version_core(v) != version_core(pinned))
    if not other:
        return []
    return [f"the binaries were compiled with QNN {', '.join(other)}, the matrix pins QAIRT {pinned}: the device "
            f"needs the runtime libraries of {', '.join(other)}"]


def verification(model: Model, target: TargetRecord) -> dict | None:
    """What a target's parity was measured on: the model's real samples, or generated inputs."""
    if not target.verified:
        return None
    recipe = recipe_for(model)
    own = recipe.verification(model, target) if recipe is not None else None
    if own is not None:  # verified by the recipe's check of the chip's graphs together
        return own
    v = verdict(target)
    real = v == REAL
    block = next((b for b in model.sample_blocks() if b.graphs is None or target.graph in b.graphs), None)
    source = (model.calibration.path if block is None else block.description) if real else \
        f"seed {model.calibration.seed}"
    return {"inputs": "real" if real else "generated", "verdict": v, "source": source,
            "description": target.verify_inputs, "files": (target.samples or {}).get("files"),
            "samples": target.verify_samples, "passed_by": target.passed_by,
            "per_sample": target.per_sample, **({"rules": target.rules} if target.rules else {})}


def _asset(cls: type, /, **values):
    """A manifest value (an asset, the manifest), made once: what breaks its schema is one line."""
    import pydantic

    try:
        return cls(**values)
    except pydantic.ValidationError as e:
        where, msg = first_error(e)
        raise PackageError(f"manifest.json would break its schema at {where}: {msg}") from None


def _licence(out: Path, model: Model, meta: Metadata) -> bytes:
    head = (f"{model.name}: {model.description}\nSPDX-License-Identifier: {model.license}\n"
            f"Source: {meta.model.repo}{'@' + meta.model.revision if meta.model.revision else ''}\n")
    if model.license_file is None:
        return head.encode()
    kept = kept_licence(out, model.name)
    if not kept.is_file():
        raise PackageError(f"{model.name}: license_file {model.license_file}: the build kept no copy of it "
                           f"({kept})", hint="run `qnn-release build` again (nothing recompiles)")
    return (head + "\n" + kept.read_text(errors="replace")).encode()


def _metadata(fields: dict) -> Metadata:
    import pydantic

    try:
        return Metadata.model_validate(fields)
    except pydantic.ValidationError as e:
        where, msg = first_error(e)
        raise PackageError(f"metadata.json would be invalid at {where}: {msg}",
                           hint="on-device numbers must be plain numbers or strings") from None


def _device_numbers(out: Path, loaded: LoadedMatrix, path: Path | None,
                    complete: dict[Group, list[TargetRecord]]) -> DeviceNumbers | None:
    """``device-numbers.json`` (``qnn-release device-numbers``; by default the one in the build folder): a
    target whose outputs disagree with CPU on the device fails like an emulator failure, unless its model
    says ``options.device_parity: record``."""
    import pydantic

    path = path or (out / DEVICE_FILE if (out / DEVICE_FILE).is_file() else None)
    if path is None:
        return None
    try:
        numbers = DeviceNumbers.read(path)
    except (OSError, ValueError, pydantic.ValidationError) as e:
        first = e.errors(include_url=False)[0] if isinstance(e, pydantic.ValidationError) else None
        why = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(e).splitlines()[0]
        raise PackageError(f"{path}: not a device-numbers.json: {why}",
                           hint="write it with `qnn-release device-numbers`") from None
    numbers = _same_binaries(out, numbers, [r for rs in complete.values() for r in rs])
    ids = {r.id for rs in complete.values() for r in rs}
    failed = [f for f in parity_failures(loaded, numbers) if f.split(":", 1)[0] in ids]
    if failed:
        raise VerifyError(f"{path}: {len(failed)} target(s) disagree with CPU on a real device: {failed[0]}",
                          hint="fix the target, or set options.device_parity: record to release it with the "
                          "numbers")
    return numbers


def _same_binaries(out: Path, numbers: DeviceNumbers, records: list[TargetRecord]) -> DeviceNumbers:
    """Only the runs of the binaries being packaged: a device-numbers.json left from an earlier build says
    nothing about a binary compiled since."""
    keep, stale = {}, 0
    for r in records:
        run = numbers.targets.get(r.id)
        if run is None:
            continue
        if r.binaries and run.binary_sha256 == sha256_file(out / r.id / r.binaries[0]):
            keep[r.id] = run
        else:
            stale += 1
    note = numbers.note
    if stale:
        note = (f"{note}; " if note else "") + f"{stale} target(s) measured another binary than this release's: " \
            "left out"
    return numbers.model_copy(update={"targets": keep, "note": note})


def _previous_manifest(notes_dir: Path, tag: str) -> Path | None:
    candidates = sorted((p for p in notes_dir.glob("*.manifest.json") if p.name != f"{tag}.manifest.json"),
                        key=lambda p: p.stat().st_mtime)
    return candidates[-1] if candidates else None


FIRST_RELEASE = {"added": [], "removed": [], "rebuilt": [], "first": True, "previous_tag": None,
                 "runtime_before": None, "runtime_now": None, "runtime_raised": False}


def _changes(manifest: Manifest, previous: Path | None) -> dict:
    """What changed since the previous release (its manifest as published: read as the JSON it is)."""
    if previous is None:
        return {**FIRST_RELEASE}
    try:
        data = json.loads(Path(previous).read_text())
        if data.get("tag", "") is None and not data["assets"]:  # `previous-manifest` found no earlier release
            return {**FIRST_RELEASE}
        old_by = {(a["model"], a["soc"], a["precision"]): a["sha256"] for a in data["assets"] if a["kind"] == "model"}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise PackageError(f"{previous}: cannot read the previous manifest: {type(e).__name__}: {e}") from None

    new_by = {(a.model, a.soc, a.precision): a.sha256 for a in manifest.assets if a.kind == "model"}
    before = _newest_runtime(a.get("qnn_runtime") or runtime_needed(a.get("sdk_version"))
                             for a in data["assets"] if a.get("kind") == "model")
    now = _newest_runtime(a.qnn_runtime for a in manifest.assets if a.kind == "model")
    return {"added": sorted("/".join(k) for k in new_by.keys() - old_by.keys()),
            "removed": sorted("/".join(k) for k in old_by.keys() - new_by.keys()),
            "rebuilt": sorted("/".join(k) for k in new_by.keys() & old_by.keys() if new_by[k] != old_by[k]),
            "first": False, "previous_tag": data.get("tag"), "runtime_before": before, "runtime_now": now,
            "runtime_raised": bool(before and now and not loads_on(now, before))}


def _comparison(loaded: LoadedMatrix, manifest: Manifest, previous: Path, folder: Path) -> str:
    """The table `qnn-release compare` prints, this release against the previous one (its manifest's numbers)."""
    from .compare import compare, markdown, targets
    from .manifest import manifest_json

    bounds = loaded.matrix.release.regressions
    old = json.loads(Path(previous).read_text())
    rows = compare(targets(old, None), targets(manifest_json(manifest), folder), bounds, frozenset(bounds.accept))
    return markdown(rows, str(old.get("tag") or "the previous release"), str(manifest.tag), bounds)


def _newest_runtime(versions) -> str | None:
    """The newest of the QNN runtimes some assets need: what an app ships to load every one of them."""
    from ..util.qnn_version import numbers

    known = [v for v in versions if v]
    return max(known, key=numbers) if known else None
