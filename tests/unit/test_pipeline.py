"""The release pipeline, followed through its rendered workflows: image, precompile, chip jobs, package, publish.

The unit tier of tests/test_pipeline.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.support.pipeline import _downloads, _expand_names, _uploads


def test_every_artifact_a_job_downloads_comes_from_exactly_one_job_it_needs():
    wf_dir = REPO / ".github" / "workflows"
    release = yaml.safe_load((wf_dir / "release.yaml").read_text())
    # every model's export jobs run inside the release's `export` caller job (one reusable workflow, its model an
    # input); the chip jobs' matrices are what the precompile job plans for that model
    from ci_tools.matrix.schema import load_matrix
    from ci_tools.workflows.jobs import model_jobs

    loaded = load_matrix()
    produced: dict[str, list[str]] = {}  # artifact name -> producing job ids (as seen from release.yaml)
    for caller_id, caller in release["jobs"].items():
        if not caller.get("uses", "").endswith("/qnn-export.yaml"):
            continue
        export = yaml.safe_load((wf_dir / Path(caller["uses"]).name).read_text())
        for model in caller["strategy"]["matrix"]["model"]:
            includes = [j for shard in model_jobs(loaded, model).shards for j in shard]
            for job_id, job in export["jobs"].items():
                if job_id == "smoke":
                    continue  # the push smoke job is not part of a release (full: true)
                for name in _uploads(job):
                    for n in _expand_names(name, model, includes if "strategy" in job else [{}]):
                        produced.setdefault(n, []).append(caller_id)
        for job_id, job in export["jobs"].items():
            for want in _downloads(job):  # inside an export: from a job it needs
                sources = [j for j, other in export["jobs"].items() if want in _uploads(other)]
                assert len(sources) == 1 and sources[0] in job["needs"], (caller_id, job_id, want)
    for job_id, job in release["jobs"].items():
        produced.update({n: [*produced.get(n, []), job_id] for n in _uploads(job)})
    assert all(len(v) == 1 for v in produced.values()), {k: v for k, v in produced.items() if len(v) != 1}
    for job_id, job in release["jobs"].items():
        for want in _downloads(job):
            makers = {p for n, ps in produced.items() if fnmatch.fnmatchcase(n, want) for p in ps}
            assert makers, f"{job_id} downloads {want}, which no job uploads"
            assert makers <= set(job["needs"]), f"{job_id} downloads {want} from {makers - set(job['needs'])}"
    # the publish job never compiles and the package job compiles nothing it did not download
    package_run = " ".join(s.get("run", "") for s in release["jobs"]["package"]["steps"])
    assert "--from-store" in package_run
    assert all("build" not in s.get("run", "") for s in release["jobs"]["publish"]["steps"])


def test_which_jobs_run_on_a_push_a_release_and_a_manual_run():
    """In a called workflow github.* is the caller's (a release is a tag push): the `full` input decides."""
    from tests.support.workflow_runner import evaluate

    export = yaml.safe_load((REPO / ".github" / "workflows" / "qnn-export.yaml").read_text())
    smoke, compile_ = export["jobs"]["smoke"]["if"], export["jobs"]["compile"]["if"]
    ok = {"needs.precompile.result": "success", "needs.precompile.outputs.jobs1": '{"include": []}'}
    push_main = {"github.event_name": "push", "github.ref": "refs/heads/main", **ok}
    release = {"github.event_name": "push", "github.ref": "refs/tags/v1.0.0", "inputs.full": True, **ok}
    manual = {"github.event_name": "workflow_dispatch", "github.ref": "refs/heads/main", **ok}
    assert (evaluate(smoke, push_main), evaluate(compile_, push_main)) == (True, False)
    assert (evaluate(smoke, release), evaluate(compile_, release)) == (False, True)
    assert (evaluate(smoke, manual), evaluate(compile_, manual)) == (False, True)
    rel = yaml.safe_load((REPO / ".github" / "workflows" / "release.yaml").read_text())
    assert all(j["with"] == {"model": "${{ matrix.model }}", "full": True, "image": "${{ needs.image.outputs.pinned }}"}
               for k, j in rel["jobs"].items() if k.startswith("export"))
    # secrets: HF_TOKEN reaches the precompile job (and the image build's secret mount), no chip job
    for job_id, job in export["jobs"].items():
        env = " ".join(str(s.get("env", {})) for s in job.get("steps", []))
        assert ("HF_TOKEN" in env) == (job_id == "precompile"), job_id
    docker = yaml.safe_load((REPO / ".github" / "workflows" / "qnn-sdk-docker-build.yaml").read_text())
    build = next(s for s in docker["jobs"]["image"]["steps"] if s.get("id") == "build")
    assert "hf_token=${{ secrets.HF_TOKEN }}" in build["with"]["secrets"]
    fork = {"github.event.repository.fork": True, "github.ref": "refs/heads/main"}
    smoke_job = docker["jobs"]["smoke"]
    local = next(s for s in smoke_job["steps"] if str(s.get("uses", "")).startswith("docker/build-push-action"))
    assert "push=true" in build["with"]["outputs"] and "push" not in local["with"] and local["with"]["load"] is True
    refuse = next(s for s in docker["jobs"]["image"]["steps"] if s.get("name", "").startswith("A run that may not"))
    steps = docker["jobs"]["image"]["steps"]
    assert steps.index(refuse) < steps.index(build)  # before any build
    assert not any(s.get("with", {}).get("load") for s in steps)  # the image job never builds for a pull request
    pr = {"github.event_name": "pull_request", "github.ref": "refs/pull/7/merge"}
    dispatch = {"github.event_name": "workflow_dispatch", "github.ref": "refs/heads/feature"}
    for ctx, expect in ((fork, (False, False, True)), (push_main, (True, False, False)),
                        (dispatch, (False, False, True)), ({**fork, **pr}, (False, True, False)),
                        (pr, (False, True, False)),
                        ({"github.event_name": "push", "github.ref": "refs/tags/v1.0.0"}, (True, False, False))):
        ctx = {**ctx, "steps.exists.outputs.digest": "", "needs.image.outputs.new": "true"}  # the image is missing:
        # push it, smoke-test it (each shard building it for itself) or refuse at once
        got = (evaluate(build["if"], ctx), evaluate(smoke_job["if"], ctx), evaluate(refuse["if"], ctx))
        assert got == expect, ctx
    from ci_tools.sdk.image import IMAGE_INPUTS

    # every input of the image's tag starts the pull request's image build and smoke test
    paths = docker[True]["pull_request"]["paths"]
    assert {*IMAGE_INPUTS, "ci_tools/sdk/image.py", "Dockerfile-2.40", "matrix/models.yaml",
            "pyproject.toml"} <= set(paths)
    main = yaml.safe_load((REPO / ".github" / "workflows" / "main.yaml").read_text())
    # #43: no paths filter on main.yaml: its changes job decides what a push builds (and the image runs only then)
    assert "paths" not in main[True]["push"] and main["jobs"]["image"]["needs"] == ["changes"]
    assert docker["jobs"]["image"]["outputs"]["new"] == \
        "${{ steps.ref.outputs.unpinned != 'true' && steps.exists.outputs.digest == '' }}"
    # a pull request that does not change the image (one adding a model: its tag is in the registry) is not smoke-
    # tested: main.yaml builds what a push changed
    assert not evaluate(smoke_job["if"], {"github.event_name": "pull_request", "needs.image.outputs.new": "false"})
    assert smoke_job["needs"] == "image" and smoke_job["strategy"]["fail-fast"] is False
    # #43: sharded, one chip of every model across the shards
    (shard,) = smoke_job["strategy"]["matrix"]["include"]
    assert sorted(shard["models"].split()) == ["rapidocr:QCS9100:fp16", "silero-vad:QCS9100:fp16"]
    assert smoke_job["steps"][-1]["run"].count("qnn-release build --backend qairt") == 1  # in a loop over them
    bump = yaml.safe_load((REPO / ".github" / "workflows" / "sdk-bump.yaml").read_text())
    first = bump["jobs"]["check-updates"]["steps"][0]
    assert "SDK_BUMP_TOKEN" in first["env"] and "exit 1" in first["run"]
    assert bump["jobs"]["check-updates"]["if"] == "${{ !github.event.repository.fork }}"


def test_the_image_job_guards_before_and_after_it_pushes():
    wf = yaml.safe_load((REPO / ".github" / "workflows" / "qnn-sdk-docker-build.yaml").read_text())
    steps = wf["jobs"]["image"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    build = next(i for i, s in enumerate(steps) if s.get("id") == "build")
    guards = [i for i, s in enumerate(steps) if "--guard-private" in s.get("run", "")]
    assert len(guards) == 2 and guards[0] < build < guards[1], names
    tag = next(i for i, s in enumerate(steps) if s.get("id") == "tag")
    assert build < tag < guards[1] and steps[guards[1]]["if"] == "${{ steps.tag.outcome == 'success' }}"
    assert "!github.event.repository.fork" in steps[build]["if"]
    for i in guards:  # each guard sees the repository's visibility
        assert steps[i]["env"]["REPO_VISIBILITY"] == "${{ github.event.repository.visibility }}"
    assert steps[guards[0]]["if"].replace("steps.exists.outputs.digest == '' && ", "") == \
        steps[build]["if"].replace("steps.exists.outputs.digest == '' && ", ""), "the guard runs wherever a push may"
