"""``qnn-release plan --github``: what a release of the matrix costs on GitHub Actions, before it runs.

From the matrix: every job a release runs (image, one precompile per model, one compile job per model, chip and
precision in matrices of at most 256, device numbers, package, attest, publish), how long each takes (measured
target times from a build report where there is one, a stated default where not), the runner minutes, and the
wall time at a concurrency (GitHub's free plan runs 20 jobs at once; paid plans more) by simulating the
scheduler: a job starts when what it needs is done and a runner is free, longest first. What it cannot know it
says: queueing, image pulls, cache misses.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..matrix.schema import LoadedMatrix
from .jobs import MAX_JOBS, by_model, job_tag

# defaults where nothing was measured, stated in the output: a job's fixed cost (runner start, container pull,
# checkout, pip install, artifact transfer), a precompile, a target's compile + verification, the release tail
JOB_OVERHEAD_MIN = 3.0
PRECOMPILE_MIN = 8.0
TARGET_MIN = 4.0
TAIL_MIN = {"image": 6.0, "device-numbers": 20.0, "package": 8.0, "attest": 2.0, "publish": 5.0}
# GitHub's secondary rate limits (REST API docs, "About secondary rate limits"): "no more than 80 content-generating
# requests per minute and no more than 500 content-generating requests per hour"; an asset upload creates content
UPLOADS_PER_HOUR = 500
JOB_MAX_MIN = 360  # a GitHub-hosted job is cancelled after 6 hours (Actions limits); publish resumes when re-run
# the SDK image's pull-request smoke test: each shard builds the image itself (a pull request never pushes it), then
# compiles one chip of each of its models; shards are filled to SMOKE_SHARD_MIN, well inside a job's 6 hours
SMOKE_IMAGE_BUILD_MIN = 20.0
SMOKE_SHARD_MIN = 300
SMOKE_PER_SHARD = int((SMOKE_SHARD_MIN - JOB_OVERHEAD_MIN - SMOKE_IMAGE_BUILD_MIN) // (PRECOMPILE_MIN + TARGET_MIN))


def smoke_shards(entries: list[str]) -> list[list[str]]:
    """The pull-request smoke test's shards: ``entries`` (one per model) in order, at most SMOKE_PER_SHARD each."""
    return [entries[i:i + SMOKE_PER_SHARD] for i in range(0, len(entries), SMOKE_PER_SHARD)]


# the SDK bump's check: one job per model, or per part of a model's chips where it has more targets than fit one job
# of BUMP_JOB_MIN with its image build and precompile
BUMP_JOB_MIN = 300
BUMP_TARGETS_PER_JOB = int((BUMP_JOB_MIN - JOB_OVERHEAD_MIN - SMOKE_IMAGE_BUILD_MIN - PRECOMPILE_MIN) // TARGET_MIN)


def bump_jobs(targets) -> list[dict]:
    """sdk-bump-check.yaml's build jobs in matrices of at most 256 (``{"job", "entries"}``): an entry is a model
    (``socs`` empty: every chip) or, for a model with more than BUMP_TARGETS_PER_JOB targets, a part of its chips
    (``socs``: space-separated), each part at most that many targets (a chip's targets stay together)."""
    entries = []
    for model, ts in sorted(by_model(targets).items()):
        per_soc: dict[str, int] = {}
        for t in ts:
            per_soc[t.soc.name] = per_soc.get(t.soc.name, 0) + 1
        parts: list[list[str]] = [[]]
        count = 0
        for soc, n in per_soc.items():
            if parts[-1] and count + n > BUMP_TARGETS_PER_JOB:
                parts.append([])
                count = 0
            parts[-1].append(soc)
            count += n
        for k, socs in enumerate(parts):
            entries.append({"model": model, "part": k + 1, "socs": " ".join(socs) if len(parts) > 1 else ""})
    return [{"job": "build" if i == 0 else f"build-{i // MAX_JOBS + 1}", "entries": entries[i:i + MAX_JOBS]}
            for i in range(0, len(entries), MAX_JOBS)]


def smoke_minutes(models: int) -> tuple[int, float]:
    """(shards, runner minutes) of the pull-request smoke test of ``models`` models."""
    shards = math.ceil(models / SMOKE_PER_SHARD)
    return shards, shards * (JOB_OVERHEAD_MIN + SMOKE_IMAGE_BUILD_MIN) + models * (PRECOMPILE_MIN + TARGET_MIN)


@dataclass
class Job:
    name: str
    minutes: float
    needs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Estimate:
    jobs: int
    compile_jobs: int
    matrices: int
    runner_minutes: float
    wall_minutes: float
    waves: int
    concurrency: int
    measured_targets: int
    targets: int
    assets: int
    releases: int
    publish_minutes: float
    publish_runs: int
    models: int = 0
    edit_minutes: float = 0.0  # a push editing one model (main.yaml: changes, image, its precompile and smoke)
    all_minutes: float = 0.0  # a push changing what every model is made from (SDK, tool pin, qnn-release's source)
    smoke_minutes: float = 0.0  # the SDK image's pull-request smoke test: one chip per model, in shards
    biggest_model_targets: int = 0  # the most targets one model has
    bump_jobs: int = 0  # the bump check's build jobs (a model, or a part of its chips)

    def as_dict(self) -> dict:
        return self.__dict__.copy()


def measured_minutes(report: Path | None) -> dict[str, float]:
    """Target id -> minutes it took (compile + verification), from a build report."""
    if report is None:
        return {}
    try:
        data = json.loads(Path(report).read_text())
    except (OSError, ValueError):
        from ..errors import UsageError

        raise UsageError(f"--measured {report}: not a readable build-report.json",
                         hint="give the build-report.json of a build of this matrix") from None
    targets = data.get("targets") if isinstance(data, dict) else None
    if not isinstance(targets, list):
        from ..errors import UsageError

        raise UsageError(f"--measured {report}: no list of targets in it", hint="give a build-report.json")
    return {t["id"]: float(t["seconds"]) / 60 for t in targets if isinstance(t, dict)
            and isinstance(t.get("seconds"), (int, float)) and t.get("status") in ("ok", "cached")}


def release_jobs(targets, measured: dict[str, float]) -> tuple[list[Job], int, int]:
    """Every job of a release run with its minutes, how many targets had a measured time, and how many compile
    matrices (of at most 256 jobs) the models need."""
    jobs = [Job("image", TAIL_MIN["image"])]
    hits = matrices = 0
    for model, mine in sorted(by_model(targets).items()):
        pre = f"{model}/precompile"
        jobs.append(Job(pre, JOB_OVERHEAD_MIN + PRECOMPILE_MIN, ["image"]))
        by_job: dict[str, float] = {}
        for t in mine:
            hits += t.id in measured
            by_job[job_tag(t)] = by_job.get(job_tag(t), 0.0) + measured.get(t.id, TARGET_MIN)
        matrices += math.ceil(len(by_job) / MAX_JOBS)
        jobs += [Job(f"{model}/{tag}", JOB_OVERHEAD_MIN + minutes, [pre]) for tag, minutes in sorted(by_job.items())]
    builds = [j.name for j in jobs if j.name != "image"]
    jobs += [Job("device-numbers", TAIL_MIN["device-numbers"], builds), Job("package", TAIL_MIN["package"], builds),
             Job("attest", TAIL_MIN["attest"], ["package"]),
             Job("publish", max(TAIL_MIN["publish"], 60.0 * uploads(targets) / UPLOADS_PER_HOUR), ["attest"])]
    return jobs, hits, matrices


def uploads(targets) -> int:
    """Files a release uploads: one archive per model, chip and precision, the runtime libraries and headers, the
    manifest, SHA256SUMS, notes, page and sh client (pieces of a file over 2 GiB not counted)."""
    return len({(t.model.name, t.soc.name, t.precision) for t in targets}) + 2 + 5


def simulate(jobs: list[Job], concurrency: int) -> float:
    """Wall minutes: each job starts when its needs are done and one of ``concurrency`` runners is free (in the
    order jobs become ready, the longer first among equals)."""
    done: dict[str, float] = {}
    waiting = {j.name: j for j in jobs}
    runners = [0.0] * concurrency
    ready: list[tuple[float, float, str]] = []  # (available at, -minutes, name): first come, longest first
    clock = 0.0
    while waiting or ready:
        for name, j in list(waiting.items()):
            if all(n in done for n in j.needs):
                heapq.heappush(ready, (max([done[n] for n in j.needs], default=0.0), -j.minutes, name))
                del waiting[name]
        if not ready:
            break
        at, neg, name = heapq.heappop(ready)
        free = heapq.heappop(runners) if len(runners) == concurrency else 0.0
        start = max(free, at)
        end = start + (-neg)
        heapq.heappush(runners, end)
        done[name] = end
        clock = max(clock, end)
    return clock


def estimate(loaded: LoadedMatrix, targets, concurrency: int = 20, measured: dict[str, float] | None = None
             ) -> tuple[Estimate, list[Job]]:
    from ..release.layout import RESERVED

    measured = measured or {}
    jobs, hits, matrices = release_jobs(targets, measured)
    compile_jobs = [j for j in jobs if "/" in j.name and not j.name.endswith("/precompile")]
    archives = len({(t.model.name, t.soc.name, t.precision) for t in targets})
    limit = loaded.matrix.release.max_assets
    files = archives + 2 + RESERVED  # the archives, qnn-libs and qnn-include, the tag's own files
    releases = 1 if files <= limit else 1 + math.ceil((files - limit) / limit)
    publish = next(j.minutes for j in jobs if j.name == "publish")
    models = len(by_model(targets))
    per_model = 2 * JOB_OVERHEAD_MIN + PRECOMPILE_MIN + TARGET_MIN  # its precompile and its one-chip smoke
    fixed = JOB_OVERHEAD_MIN + TAIL_MIN["image"]  # the changes job and the image job (found in the registry)
    return Estimate(models=models, edit_minutes=round(fixed + per_model, 1),
                    biggest_model_targets=max((len(t) for t in by_model(targets).values()), default=0),
                    bump_jobs=sum(len(j["entries"]) for j in bump_jobs(targets)),
                    all_minutes=round(fixed + models * per_model, 1),
                    smoke_minutes=round(TAIL_MIN["image"] + smoke_minutes(models)[1], 1),
                    publish_minutes=round(publish, 1), publish_runs=math.ceil(publish / JOB_MAX_MIN),
                    jobs=len(jobs), compile_jobs=len(compile_jobs), matrices=matrices,
                    runner_minutes=round(sum(j.minutes for j in jobs), 1),
                    wall_minutes=round(simulate(jobs, concurrency), 1),
                    waves=math.ceil(len(compile_jobs) / concurrency), concurrency=concurrency,
                    measured_targets=hits, targets=len(targets), assets=archives + 2, releases=releases), jobs


def render_text(e: Estimate) -> str:
    hours = e.wall_minutes / 60
    lines = [
        f"{e.jobs} jobs in a release run: 1 image, one precompile per model, {e.compile_jobs} compile jobs in "
        f"{e.matrices} matrices (at most 256 each), device numbers, package, attest, publish",
        f"runner minutes: {e.runner_minutes:,.0f} ({e.runner_minutes / 60:,.1f} runner hours)",
        f"wall time at {e.concurrency} concurrent jobs: about {e.wall_minutes:,.0f} min ({hours:.1f} h); the compile "
        f"jobs run in about {e.waves} waves",
        f"job times: {e.measured_targets} of {e.targets} targets measured (--measured build-report.json), the rest "
        f"{TARGET_MIN:g} min each; every job +{JOB_OVERHEAD_MIN:g} min (runner, image pull, install), a precompile "
        f"{PRECOMPILE_MIN:g} min",
        f"release: {e.assets} archives and libraries in {e.releases} GitHub release(s) (at most 1,000 assets each); "
        f"publishing them takes about {e.publish_minutes:,.0f} min at GitHub's {UPLOADS_PER_HOUR} uploads per hour"
        + (f", more than a job's 6 h: run publish {e.publish_runs} times (each run resumes; nothing is visible "
           "before the last)" if e.publish_runs > 1 else ""),
        *recurring_text(e),
        "not counted: queueing for runners, GitHub outages, cache misses; GitHub cancels a job after 6 h and a run "
        "after 35 days",
    ]
    if e.jobs > 50_000:
        lines.append("over GitHub's 50,000 jobs per run (check runs per check suite): `render` refuses it; release "
                     "the catalogue from several matrices")
    return "\n".join(lines)


# GitHub's included minutes and storage per month for private repositories (docs, Actions limits / "About billing
# for GitHub Actions"): (plan, storage, minutes); standard GitHub-hosted runners are free for public repositories
PLANS = (("Free", "500 MB", 2000), ("Pro", "1 GB", 3000), ("Team", "2 GB", 3000), ("Enterprise Cloud", "50 GB", 50000))


def recurring_text(e: Estimate) -> list[str]:
    """What every edit costs, beside a release: the push, the SDK change, GitHub's per-run matrix limit, billing."""
    shards, _ = smoke_minutes(e.models)
    smoke = (f"the SDK image's pull-request smoke test (only when the image is new: its SDK pins or Dockerfile "
             f"changed): {shards:,} shard job(s), each building the image for itself (about {SMOKE_IMAGE_BUILD_MIN:g} "
             f"min: a pull request never pushes it) and compiling one chip of each of its models (at most "
             f"{SMOKE_PER_SHARD}, each shard under {SMOKE_SHARD_MIN} min of a job's 6 h), about "
             f"{e.smoke_minutes:,.0f} runner minutes in all")
    plans = ", ".join(f"{name} {minutes:,} min and {storage}" for name, storage, minutes in PLANS)
    # each job builds the new SDK's image for itself (a pull request never pushes it), the compare job too
    bump = (e.bump_jobs + 1) * (JOB_OVERHEAD_MIN + SMOKE_IMAGE_BUILD_MIN) + e.bump_jobs * PRECOMPILE_MIN + \
        e.targets * TARGET_MIN + TAIL_MIN["package"]
    longest = SMOKE_IMAGE_BUILD_MIN + PRECOMPILE_MIN + min(e.biggest_model_targets, BUMP_TARGETS_PER_JOB) * TARGET_MIN
    return [
        f"the SDK bump's pull request (sdk-bump-check.yaml): every target built again as a release builds it (the "
        f"qairt route, each job building the new SDK's image for itself), one job per model, or per part of its "
        f"chips past {BUMP_TARGETS_PER_JOB} targets ({e.bump_jobs:,} jobs and a compare), about {bump:,.0f} runner "
        f"minutes; the longest job about {longest:,.0f} min of its {BUMP_JOB_MIN}",
        f"per push to main (main.yaml builds only what changed, `qnn-release changed`): editing one model is 4 jobs, "
        f"about {e.edit_minutes:,.0f} runner minutes; changing the SDK, the tool's pin or qnn-release's source is "
        f"every model's precompile and smoke, {2 + 2 * e.models:,} jobs, about {e.all_minutes:,.0f} runner minutes",
        smoke,
        f"GitHub allows 256 jobs per matrix per workflow run: render splits each model's compile jobs into matrices "
        f"jobs1 ... jobsN and the models into export matrices of at most 256 ({math.ceil(e.models / MAX_JOBS)} here); "
        "a run stays under GitHub's 50,000 jobs or render refuses it",
        f"private repositories: minutes and artifact storage count against the plan per month ({plans}); a release "
        f"here is {e.runner_minutes / 2000:.0%} of the Free plan's minutes; public repositories: standard runners are "
        "free",
    ]
