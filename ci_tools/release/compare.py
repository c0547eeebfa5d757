"""``qnn-release compare OLD NEW``: what a new release (an SDK bump) changes, target by target.

Each side is a packaged release folder (``dist/release``, read whole: the manifest and every archive's
``metadata.json``) or a published ``OWNER/NAME@TAG`` (its manifest, read under the manifest contract: archive-level
numbers only). One row per model, chip and precision: status and verdict with the data it was verified on, parity
(the lowest cosine and SNR over its graphs, and a recipe's own measures where it has them: WER, a voice's SNR),
binary size, compile and emulator seconds, device latency where both sides were measured on the same device, and
the QNN runtime each needs. Targets added, removed, newly failing and regressions come first.

What counts as a regression is the matrix's ``release.regressions`` (defaults documented there): a verdict lost, a
target gone or failing, SNR down, cosine down, size or device latency up past a bound. Compile and emulator seconds
come from different runs on different machines: they are shown, never counted (a CI job's timings are not
comparable with another job's).
"""

from __future__ import annotations

import json
import re
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..recipes import RECIPES, get_recipe
from .metadata import recipe_result
from .runtime import runtime_needed

VERDICTS = ("real-samples", "generated-inputs", "not-verified")  # strongest first
SKIPPED = re.compile(r"^(?P<model>[^/]+)/(?P<soc>[^/]+)/(?P<precision>\S+)(?: \((?P<why>.*)\))?$")


@dataclass
class Numbers:
    """One target on one side (None: not there, or not known on this side)."""

    status: str  # released | failed (in the manifest's skipped list)
    verdict: str | None = None
    cosine: float | None = None
    snr_db: float | None = None
    size: int | None = None
    compile_s: float | None = None
    emulator_ms: float | None = None
    device: str | None = None
    device_ms: float | None = None
    runtime: str | None = None
    recipe: dict[str, float] = field(default_factory=dict)  # the recipe's own measures: wer, <what>_snr_db
    why: str | None = None  # a failed target's reason


@dataclass
class Row:
    target: str  # model/SOC/precision
    old: Numbers | None
    new: Numbers | None
    changes: list[str]
    regressions: list[str]

    def as_dict(self) -> dict:
        return asdict(self)


def _metadata(folder: Path, name: str) -> dict | None:
    path = folder / name
    if not path.is_file():
        return None
    try:
        with tarfile.open(path) as tar:
            member = next((m for m in tar.getmembers() if m.isfile() and m.name.endswith("/metadata.json")
                           and m.name.count("/") == 1), None)
            return json.load(tar.extractfile(member)) if member else None  # type: ignore[arg-type]
    except (OSError, tarfile.TarError, ValueError):
        return None


def _from_metadata(n: Numbers, meta: dict) -> None:
    graphs = (meta.get("numbers") or {}).values()
    snrs = [g["parity_vs_cpu"]["snr_db"] for g in graphs if (g.get("parity_vs_cpu") or {}).get("snr_db") is not None]
    n.snr_db = min(snrs) if snrs else None
    ems = [g.get("emulator_latency_ms") for g in graphs]
    n.emulator_ms = round(sum(ems), 1) if ems and all(isinstance(x, (int, float)) for x in ems) else None
    # the recipe's own measures, where recorded (a word error rate, a waveform's SNR)
    result = recipe_result(meta)
    if result is not None and result.get("kind") in RECIPES:
        n.recipe.update(get_recipe(result["kind"]).measures(result))


def targets(manifest: dict, folder: Path | None) -> dict[str, Numbers]:
    """model/SOC/precision -> its numbers, from a manifest (and the archives beside it when ``folder``)."""
    out: dict[str, Numbers] = {}
    for a in manifest.get("assets", []):
        if a.get("kind") != "model":
            continue
        dev = a.get("device") or {}
        n = Numbers(status="released", verdict=a.get("verified_on"), cosine=a.get("cosine"), size=a.get("size"),
                    compile_s=a.get("compile_seconds"), device=dev.get("device"),
                    runtime=a.get("qnn_runtime") or runtime_needed(a.get("sdk_version")),  # older manifests: its QNN
                    device_ms=dev.get("latency_ms"))
        meta = _metadata(folder, a["name"]) if folder is not None else None
        if meta:
            _from_metadata(n, meta)
        out[f"{a['model']}/{a['soc']}/{a['precision']}"] = n
    for line in manifest.get("skipped", []):
        m = SKIPPED.match(line)
        if m:
            out.setdefault(f"{m['model']}/{m['soc'].upper()}/{m['precision']}",
                           Numbers(status="failed", why=m["why"]))
    return out


def _grew(old: float | None, new: float | None, bound: float) -> bool:
    return old is not None and new is not None and old > 0 and (new - old) / old > bound


def _only_new(old: Numbers, new: Numbers, measure: str) -> bool:
    """Whether the new side has a measure the old one lacks (what a manifest-only side cannot give)."""
    if measure == "SNR":
        return new.snr_db is not None and old.snr_db is None
    return "wer" in new.recipe and "wer" not in old.recipe


def judge(key: str, old: Numbers | None, new: Numbers | None, bounds) -> Row:
    """The row of one target: what changed, and which changes are regressions under ``bounds``."""
    changes: list[str] = []
    bad: list[str] = []
    if old is None or new is None:
        (changes if old is None else bad).append("added" if old is None else "removed")
        return Row(key, old, new, changes, bad)
    if old.status != new.status:
        (bad if new.status == "failed" else changes).append(f"{old.status} -> {new.status}"
                                                           + (f" ({new.why})" if new.why else ""))
    if old.verdict != new.verdict and new.status == "released":
        lost = old.verdict in VERDICTS and (new.verdict not in VERDICTS
                                            or VERDICTS.index(new.verdict) > VERDICTS.index(old.verdict))
        (bad if lost else changes).append(f"verdict {old.verdict} -> {new.verdict}")
    if old.snr_db is not None and new.snr_db is not None and old.snr_db - new.snr_db > bounds.snr_drop_db:
        bad.append(f"SNR {old.snr_db:.1f} -> {new.snr_db:.1f} dB")
    if old.cosine is not None and new.cosine is not None and old.cosine - new.cosine > bounds.cosine_drop:
        bad.append(f"cosine {old.cosine:.4f} -> {new.cosine:.4f}")
    if _grew(old.size, new.size, bounds.size_growth):
        bad.append(f"size +{(new.size - old.size) / old.size:.0%}")  # type: ignore[operator]
    if old.device and old.device == new.device and _grew(old.device_ms, new.device_ms, bounds.latency_growth):
        bad.append(f"device latency +{(new.device_ms - old.device_ms) / old.device_ms:.0%} on {new.device}")  # type: ignore[operator]
    wer_old, wer_new = old.recipe.get("wer"), new.recipe.get("wer")
    if wer_old is not None and wer_new is not None and wer_new - wer_old > bounds.wer_rise:
        bad.append(f"WER {wer_old:.1%} -> {wer_new:.1%}")
    for name in sorted(k for k in old.recipe.keys() & new.recipe.keys() if k.endswith("_snr_db")):
        v_old, v_new = old.recipe[name], new.recipe[name]
        if v_old - v_new > bounds.snr_drop_db:
            bad.append(f"{name.removesuffix('_snr_db').replace('_', ' ')} SNR {v_old:.1f} -> {v_new:.1f} dB")
    unjudged = [m for m in ("SNR", "WER") if _only_new(old, new, m)]
    if unjudged:
        changes.append(f"{' and '.join(unjudged)} not judged: the old side has no archive numbers (a published "
                       "manifest); compare two release folders to judge them")
    if old.runtime != new.runtime and new.runtime:
        changes.append(f"needs QNN runtime >= {new.runtime} (was {old.runtime or 'not recorded'})")
    if old.size and new.size and abs(new.size - old.size) / old.size >= 0.01 and not any(
            b.startswith("size") for b in bad):  # a change under 1 % is noise in a table
        changes.append(f"size {(new.size - old.size) / old.size:+.0%}")
    return Row(key, old, new, changes, bad)


def compare(old: dict[str, Numbers], new: dict[str, Numbers], bounds, accepted: frozenset[str] = frozenset()
            ) -> list[Row]:
    """Every target of either side, regressions (not accepted) first, then the other changes, then the rest."""
    rows = [judge(k, old.get(k), new.get(k), bounds) for k in sorted(set(old) | set(new))]
    for r in rows:
        if r.target in accepted and r.regressions:
            r.changes += [f"{x} (accepted in the matrix)" for x in r.regressions]
            r.regressions = []
    return sorted(rows, key=lambda r: (not r.regressions, not r.changes, r.target))


def _pair(old, new, fmt: str) -> str:
    def one(x):
        return "–" if x is None else format(x, fmt)

    if old == new:
        return one(new)
    return f"{one(old)} → {one(new)}"


def _mb(size: int | None) -> float | None:
    return None if size is None else size / 1e6


def markdown(rows: list[Row], old_label: str, new_label: str, bounds) -> str:
    bad = [r for r in rows if r.regressions]
    changed = [r for r in rows if r.changes and not r.regressions]
    lines = [f"### {old_label} → {new_label}", "",
             f"{len(rows)} target(s): {len(bad)} regression(s), {len(changed)} other change(s), "
             f"{len(rows) - len(bad) - len(changed)} unchanged. A regression: a target removed or failing, a verdict "
             f"lost, SNR down more than {bounds.snr_drop_db:g} dB, cosine down more than {bounds.cosine_drop:g}, size "
             f"up more than {bounds.size_growth:.0%}, device latency up more than {bounds.latency_growth:.0%} on the "
             f"same device, WER up more than {bounds.wer_rise:.0%} (matrix: release.regressions).", "",
             "| target | what changed | verdict | cosine | SNR dB | size MB | compile s | emulator ms | device ms | "
             "QNN runtime |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in [*bad, *changed]:
        o, n = r.old or Numbers(status="-"), r.new or Numbers(status="-")
        what = "; ".join([*(f"**{x}**" for x in r.regressions), *r.changes])
        lines.append(f"| {r.target} | {what} | {_pair(o.verdict, n.verdict, '')} | {_pair(o.cosine, n.cosine, '.4f')} "
                     f"| {_pair(o.snr_db, n.snr_db, '.1f')} | {_pair(_mb(o.size), _mb(n.size), '.2f')} "
                     f"| {_pair(o.compile_s, n.compile_s, '.1f')} | {_pair(o.emulator_ms, n.emulator_ms, '.0f')} "
                     f"| {_pair(o.device_ms, n.device_ms, '.2f') if o.device == n.device else 'other devices'} "
                     f"| {_pair(o.runtime, n.runtime, '')} |")
    if not bad and not changed:
        lines.append("| (every target) | nothing changed | | | | | | | | |")
    lines += ["", "Verdicts are the data each binary was verified on (real-samples, generated-inputs). Compile and "
              "emulator seconds come from different runs on different machines: shown, never counted as a "
              "regression. Device latency is compared only when both sides ran on the same device."]
    return "\n".join(lines) + "\n"


def load_side(spec: str, via=None) -> tuple[str, dict, Path | None]:
    """(label, manifest, the folder of its archives or None) of a release folder or a published OWNER/NAME@TAG."""
    path = Path(spec)
    if path.exists():
        from .publish import release_dir

        folder = release_dir(path)
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except ValueError:
            raise UsageError(f"{folder}/manifest.json: not JSON", hint="package the release again") from None
        return f"{manifest.get('tag') or folder}", manifest, folder
    if re.fullmatch(r"[\w.-]+/[\w.-]+@\S+", spec):
        from ..errors import PublishError
        from ..sources.download import downloads_dir
        from .fetch import _Downloader
        from .github import Connection

        via = via or Connection()
        repo, tag = spec.split("@", 1)
        gh = via.client(repo)
        rel = gh.release_by_tag(tag) if tag != "latest" else gh.latest_release()
        if rel is None and tag == "latest":  # nothing published yet: every target is new
            return f"{repo} (no release yet)", {"assets": []}, None
        if rel is None:
            raise PublishError(f"{repo}: no published release {tag}", hint="check the tag (drafts are not visible)")
        return spec, _Downloader(gh, rel, via.token, downloads_dir(None), gh.sleep).manifest(), None
    raise UsageError(f"{spec}: neither a release folder nor OWNER/NAME@TAG",
                     hint="give dist/ (packaged) or a published release, e.g. acme/models@v1.2.0")
