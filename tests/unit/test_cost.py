"""`plan --github`: the jobs of a release and what they cost, from the matrix (no subprocess, no network)."""

from __future__ import annotations

import json

import pytest

from ci_tools.matrix.plan import plan
from ci_tools.matrix.schema import load_matrix
from ci_tools.workflows.cost import JOB_OVERHEAD_MIN, TARGET_MIN, Job, estimate, measured_minutes, simulate
from tests.conftest import REPO


def test_one_runner_takes_the_sum_and_many_take_the_critical_path():
    jobs = [Job("a", 2), Job("b", 5, ["a"]), Job("c", 5, ["a"]), Job("d", 1, ["b", "c"])]
    assert simulate(jobs, 1) == 13
    assert simulate(jobs, 2) == 8  # a, then b and c side by side, then d
    assert simulate(jobs, 10) == 8


def test_the_demo_release_counts_its_jobs_and_takes_measured_times(tmp_path):
    loaded = load_matrix(REPO / "matrix" / "models.yaml")
    targets = plan(loaded)
    e, jobs = estimate(loaded, targets, concurrency=20)
    models = {t.model.name for t in targets}
    compile_jobs = {(t.model.name, t.soc.name, t.precision) for t in targets
                    if t.model.options.fan_out != "target"}
    assert e.compile_jobs >= len(compile_jobs) and e.jobs == 1 + len(models) + e.compile_jobs + 4
    assert e.runner_minutes == pytest.approx(sum(j.minutes for j in jobs))
    assert e.wall_minutes < e.runner_minutes and e.measured_targets == 0
    # a measured build report replaces the default time of its targets
    t = targets[0]
    (tmp_path / "r.json").write_text(json.dumps({"targets": [{"id": t.id, "status": "ok", "seconds": 3600}]}))
    e2, _ = estimate(loaded, targets, concurrency=20, measured=measured_minutes(tmp_path / "r.json"))
    assert e2.measured_targets == 1 and e2.runner_minutes == pytest.approx(e.runner_minutes + 60 - TARGET_MIN)
    assert JOB_OVERHEAD_MIN > 0
    # fewer runners: more waves, longer wall time, the same runner minutes
    e3, _ = estimate(loaded, targets, concurrency=2)
    assert e3.waves > e.waves and e3.wall_minutes > e.wall_minutes and e3.runner_minutes == e.runner_minutes
