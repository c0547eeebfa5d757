"""The release pipeline, followed through its rendered workflows: image, precompile, chip jobs, package, publish."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from ci_tools.release.github import Connection
from tests.conftest import REPO, run_cli
from tests.fakes.fake_github import FakeGitHub
from tests.fakes.fake_qairt import make_fake_sdk
from tests.support import models
from tests.support.workflow_runner import Runner

PINS = {"revision": "a" * 40, "sha256": "b" * 64}
OWNER_REPO = "Acme-Labs/speech-models"
PINNED = f"ghcr.io/acme-labs/qnn-sdk:2.40.0.251030-0123456789ab@sha256:{'c' * 64}"


def _repo(tmp_path: Path, chips=("SM8750", "SM8550"), name="m", pins=PINS) -> Path:
    """A repository as the jobs check it out: the toolkit, a matrix with one small model, its graph."""
    repo = tmp_path / "repo"
    for n in ("ci_tools", "templates"):
        # symlinks: ci_tools/_data links into this copy, as in a git checkout
        shutil.copytree(REPO / n, repo / n, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    for n in ("pyproject.toml", "README.md", "Dockerfile-2.40"):
        shutil.copy2(REPO / n, repo / n)
    (repo / "matrix").mkdir()
    shutil.copy2(REPO / "matrix" / "socs.yaml", repo / "matrix" / "socs.yaml")
    (repo / "models").mkdir()
    f = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    from ci_tools.sources.store import sha256_file

    matrix = {"version": 1,
              "sdk": {"qairt": [{"version": "2.40.0.251030", "hf_repo": "csukuangfj/qnn-toolkit",
                                 "file": "v2.40.0.251030.zip", **pins}], "onnxruntime_qnn": "2.7.0"},
              "models": [{"name": name, "description": "test", "license": "MIT",
                          "source": {"kind": "path", "path": "models/m.onnx", "sha256": sha256_file(f)},
                          "graphs": [{"name": "enc", "file": "m.onnx"}], "chips": list(chips),
                          "generated_inputs_ok": "a random-weight test MLP: it has no data of its own"}]}
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    return repo


@pytest.fixture
def release_run(tmp_path):
    repo = _repo(tmp_path)
    r = run_cli("render", "--matrix", str(repo / "matrix" / "models.yaml"))
    assert r.returncode == 0, r.stderr
    sdk = make_fake_sdk(tmp_path / "sdk")
    with FakeGitHub() as gh:
        runner = Runner.tag_push(repo, tmp_path / "runner", gh, sdk, image=PINNED, repository=OWNER_REPO)
        yield runner, repo / ".github" / "workflows", gh


def test_a_release_runs_through_its_jobs_and_a_rerun_failed_chip_job_completes_it(release_run):
    runner, wf, gh = release_run
    # release.yaml runs the one reusable export workflow for every model (model: m here)
    export, release = wf / "qnn-export.yaml", wf / "release.yaml"
    assert "uses: $/.github/workflows/qnn-export.yaml" in release.read_text()
    assert runner.job(export, "precompile"), "\n".join(runner.log)
    assert runner.job(export, "smoke") is None  # a release compiles every chip, not the push smoke test
    # the chip jobs' matrix is what the precompile job wrote (qnn-release plan --github-output)
    chips = json.loads(runner.context["needs.precompile.outputs.jobs1"])["include"]
    assert {c["soc"] for c in chips} == {"SM8750", "SM8550"}
    first, second = chips
    assert runner.job(export, "compile", first), "\n".join(runner.log)
    # the second chip job fails: its work folder (logs) is kept and uploaded as evidence, no targets
    assert not runner.job(export, "compile", second, extra_env={"FAKE_QAIRT_FAIL": "qnn-context-binary-generator"})
    evidence = runner.artifacts[f"qnn-failed-m-{second['soc']}-fp16"]
    logs = list(evidence.rglob("context-binary-generator.log"))
    assert logs and "injected failure" in logs[0].read_text()
    report = json.loads(next(evidence.rglob("build-report.json")).read_text())
    (failed,) = report["targets"]
    assert failed["status"] == "failed" and failed["work_dir"] in failed["error"]
    # the export's failed chip job fails its caller job, and package does not run
    runner.context["needs.export.result"] = "failure"
    assert runner.job(release, "package") is None
    # run anyway, packaging refuses: it never compiles, it names the missing target
    runner.context["needs.export.result"] = "success"
    assert not runner.job(release, "package")
    assert f"m.enc.{second['soc'].lower()}.fp16" in runner.log[-2] and "not in the downloaded store" in runner.log[-2]
    # "re-run failed jobs": the chip job runs again and replaces its artifacts; the release completes
    assert runner.job(export, "compile", second), "\n".join(runner.log[-3:])
    # without the AI Hub secret the device job records "no device numbers", and the release says so
    assert runner.job(release, "device-numbers"), "\n".join(runner.log[-3:])
    assert runner.job(release, "package"), "\n".join(runner.log[-3:])
    # every asset gets a build-provenance attestation before it is published (a job of its own)
    assert runner.job(release, "attest"), "\n".join(runner.log[-3:])
    assert runner.job(release, "publish"), "\n".join(runner.log[-3:])
    (rel,) = gh.releases(OWNER_REPO, "v1.0.0")
    assert rel["draft"] is False and not rel.get("prerelease")
    manifest = json.loads(runner.artifacts["qnn-release-assets"].joinpath("manifest.json").read_text())
    names = set(gh.asset_names(rel["id"]))
    assert {a["name"] for a in manifest["assets"]} | {"manifest.json", "SHA256SUMS"} <= names
    assert {a["soc"] for a in manifest["assets"] if a["kind"] == "model"} == {"SM8750", "SM8550"}
    assert set(runner.attested) == names  # every published asset was attested
    for f in runner.artifacts["qnn-release-assets"].iterdir():
        assert runner.attested[f.name] == hashlib.sha256(f.read_bytes()).hexdigest()
    pinned = runner.context["needs.image.outputs.pinned"]
    assert manifest["images"] == [pinned]
    model_asset = next(a for a in manifest["assets"] if a["kind"] == "model")
    with tarfile.open(runner.artifacts["qnn-release-assets"] / model_asset["name"]) as tar:
        meta = json.load(tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("metadata.json"))))
    assert meta["sdk"]["image"] == pinned
    assert meta["on_device"]["status"] == "skipped" and "QAI_HUB_API_TOKEN is not set" in manifest["device_numbers"]
    # the converter ran once for the graph, in the precompile job: not once per chip job
    package_report = next(p for p in runner.work.glob("job*-package/repo/dist/build-report.json"))
    work = json.loads(package_report.read_text())["work"]
    assert work == {"converter_runs": 1, "graph_precisions": 1, "converter_runs_per_graph": 1.0}


def test_a_chip_job_without_the_precompile_artifact_fails_instead_of_converting(release_run):
    runner, wf, _ = release_run
    export = wf / "qnn-export.yaml"
    from ci_tools.matrix.schema import load_matrix
    from ci_tools.workflows.jobs import model_jobs

    chips = model_jobs(load_matrix(runner.repo / "matrix" / "models.yaml"), "m").shards[0]
    # no precompile artifact (its job passed, its artifact expired: a re-run weeks later): the chip job does not
    # quietly convert on its own, it fails
    runner.context["needs.precompile.result"] = "success"
    assert not runner.job(export, "compile", chips[0])
    assert "download qnn-precompiled-m: artifact not found" in runner.log


def test_pre_release_tags_are_published_as_pre_releases_with_changes_since_the_last_release(release_run, tmp_path):
    runner, wf, gh = release_run
    from ci_tools.release.publish import publish
    from tests.support.release_fixture import make_release

    publish(make_release(tmp_path / "old"), OWNER_REPO, "v1.0.0",
            via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
    runner.context["github.ref_name"] = "v1.1.0-rc1"
    export, release = wf / "qnn-export.yaml", wf / "release.yaml"
    assert runner.job(export, "precompile")
    for chip in json.loads(runner.context["needs.precompile.outputs.jobs1"])["include"]:
        assert runner.job(export, "compile", chip)
    assert runner.job(release, "package") and runner.job(release, "publish"), "\n".join(runner.log[-3:])
    (rel,) = gh.releases(OWNER_REPO, "v1.1.0-rc1")
    assert rel["prerelease"] is True and rel["make_latest"] == "false" and rel["draft"] is False
    notes = runner.artifacts["qnn-release-assets"].joinpath("RELEASE_NOTES.md").read_text()
    assert "## Changes since v1.0.0" in notes and "added: m/SM8550/fp16, m/SM8750/fp16" in notes
    assert "removed: vad/SM8550/fp16, vad/SM8750/fp16" in notes


def test_image_reference_is_immutable_lower_case_and_needs_pins(tmp_path):
    repo = _repo(tmp_path)
    matrix = repo / "matrix" / "models.yaml"
    # run from the repository's own copy of the tool (cwd: `python -m ci_tools` imports it), as a job does: the
    # recipe is the tool's checkout's
    r = run_cli("image", "--matrix", str(matrix), "--owner", "Acme-Labs", cwd=repo)
    assert r.returncode == 0, r.stderr
    out = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert re.fullmatch(r"ghcr\.io/acme-labs/qnn-sdk:2\.40\.0\.251030-[0-9a-f]{12}", out["ref"])
    assert out["revision"] == PINS["revision"] and out["sha256"] == PINS["sha256"]
    # what goes into the image changes the tag: the Dockerfile, the pins
    (repo / "Dockerfile-2.40").write_text((repo / "Dockerfile-2.40").read_text() + "\n# changed\n")
    r2 = run_cli("image", "--matrix", str(matrix), "--owner", "Acme-Labs", cwd=repo)
    assert r2.returncode == 0 and r2.stdout.splitlines()[0] != r.stdout.splitlines()[0]
    fetcher = repo / "ci_tools" / "qairt_zip.py"  # copied into the image by the Dockerfile
    fetcher.write_text(fetcher.read_text() + "\n# changed\n")
    r3 = run_cli("image", "--matrix", str(matrix), "--owner", "Acme-Labs", cwd=repo)
    assert r3.returncode == 0 and r3.stdout.splitlines()[0] not in (r.stdout.splitlines()[0],
                                                                   r2.stdout.splitlines()[0])
    unpinned = _repo(tmp_path / "u", pins={"revision": None, "sha256": PINS["sha256"]})
    r3 = run_cli("image", "--matrix", str(unpinned / "matrix" / "models.yaml"), "--owner", "acme")
    assert r3.returncode == 2 and "no revision pin" in r3.stderr and "sdk fetch" in r3.stderr
    assert "Traceback" not in r3.stderr and len(r3.stderr.strip().splitlines()) == 1


def test_dockerfile_refuses_an_unpinned_sdk_and_sets_the_sdk_environment():
    text = (REPO / "Dockerfile-2.40").read_text()
    guard = re.search(r"RUN (if \[ -z \"\$\{QAIRT_REVISION\}\".*?fi)\n", text, re.S)[1].replace("\\\n", "\n")
    import subprocess

    for rev, sha, code in (("", "", 1), ("a" * 40, "", 1), ("a" * 40, "b" * 64, 0)):
        r = subprocess.run(["bash", "-c", guard], capture_output=True, text=True,
                           env={"QAIRT_REVISION": rev, "QAIRT_SHA256": sha, "QAIRT_VERSION": "2.40.0.251030"})
        assert r.returncode == code and (code == 0 or "sdk fetch --record" in r.stderr)
    first, final = text.split("FROM ubuntu:22.04", 1)
    # the SDK layer sees the pins and the stdlib-only fetcher, nothing else of the project
    assert [ln.split()[1] for ln in first.splitlines() if ln.startswith("COPY ")] == ["ci_tools/qairt_zip.py"]
    assert "COPY ci_tools" not in final and "COPY --from=sdk /opt/qairt /opt/qairt" in final
    assert "PYTHONPATH=${QNN_SDK_ROOT}/lib/python" in final and "lib/x86_64-linux-clang" in final
    assert "check-python-dependency" in final and "check-linux-dependency.sh" in final
    # qnn-release (and ONNX Runtime >= 1.24) runs with Python 3.11, first on PATH; the converters with the 3.10 venv
    assert "python3.11 -m venv /opt/release-venv" in final and "PATH=/opt/release-venv/bin:" in final
    assert "QNN_PYTHON=/opt/qnn-venv/bin/python" in final and "python3.10 -m venv /opt/qnn-venv" in final
    assert '"${QNN_PYTHON}" "${QNN_SDK_ROOT}/bin/x86_64-linux-clang/qnn-onnx-converter" --help' in final
    for tool in ("qnn-onnx-converter", "qnn-model-lib-generator", "qnn-context-binary-generator", "qnn-net-run"):
        assert re.search(rf"{tool}\S* --help", final), tool


def test_render_refuses_model_names_github_refuses(tmp_path):
    repo = _repo(tmp_path, name="silero.vad")
    r = run_cli("render", "--matrix", str(repo / "matrix" / "models.yaml"))
    assert r.returncode == 2 and "silero.vad" in r.stderr and "job id" in r.stderr and "silero-vad" in r.stderr


def test_a_catalogue_renders_within_githubs_limits_on_github_com_and_ghes(tmp_path):
    """300 models (two 256-model matrices of one reusable export workflow) render for GitHub Enterprise Server,
    whose limits are the lowest (20 unique reusable workflows per caller, 4 levels): the tree uses 2 and 3."""
    from ci_tools.matrix.schema import load_matrix
    from ci_tools.workflows.render import check_limits, render_all

    repo = _repo(tmp_path / "many")
    data = yaml.safe_load((repo / "matrix" / "models.yaml").read_text())
    data["models"] = [{**data["models"][0], "name": f"m{i:03d}"} for i in range(300)]
    data["release"] = {"github": "ghes"}
    (repo / "matrix" / "models.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    files = render_all(load_matrix(repo / "matrix" / "models.yaml"))
    measured = check_limits(files, "ghes", "test")
    assert measured["release.yaml"] == {"unique_reusable": 2, "levels": 3}
    assert measured["main.yaml"] == {"unique_reusable": 2, "levels": 3}
    release = yaml.safe_load(files[Path(".github/workflows/release.yaml")])
    shards = [j for j in release["jobs"].values() if j.get("uses", "").endswith("qnn-export.yaml")]
    assert [len(j["strategy"]["matrix"]["model"]) for j in shards] == [256, 44]
    assert release["jobs"]["package"]["needs"][-3:] == ["export", "export-2", "device-numbers"]
    assert sum(1 for p in files if p.name.startswith("export-m")) == 300  # one file per model, for manual runs
    # #43: the SDK image's pull-request smoke test in shards, one chip of every model, each shard inside 6 h
    from ci_tools.workflows.cost import JOB_MAX_MIN, PRECOMPILE_MIN, SMOKE_IMAGE_BUILD_MIN, SMOKE_PER_SHARD, TARGET_MIN

    docker = yaml.safe_load(files[Path(".github/workflows/qnn-sdk-docker-build.yaml")])
    smoke = [e["models"].split() for e in docker["jobs"]["smoke"]["strategy"]["matrix"]["include"]]
    assert sorted(m.split(":")[0] for shard in smoke for m in shard) == [f"m{i:03d}" for i in range(300)]
    assert len(smoke) == -(-300 // SMOKE_PER_SHARD) and max(len(s) for s in smoke) == SMOKE_PER_SHARD
    assert SMOKE_IMAGE_BUILD_MIN + SMOKE_PER_SHARD * (PRECOMPILE_MIN + TARGET_MIN) < JOB_MAX_MIN - 30


def test_the_sdk_image_is_never_pushed_where_it_would_be_public(tmp_path):
    """GitHub gives a package a workflow creates the repository's visibility: the guard refuses a first push
    from a public repository, a package anyone can pull, one this repository may not use, and a registry
    that cannot say; a private package with access, or a private repository, goes ahead. The token never
    appears in what it prints."""
    import os

    from tests.fakes.fake_registry import FakeRegistry, Package

    matrix = _repo(tmp_path) / "matrix" / "models.yaml"
    with FakeRegistry() as reg:
        st = reg.state

        def guard(visibility: str):
            env = {**os.environ, "QNN_RELEASE_REGISTRY": reg.url, "GITHUB_TOKEN": st.password,
                   "GITHUB_ACTOR": st.user, "GITHUB_REPOSITORY": OWNER_REPO, "REPO_VISIBILITY": visibility}
            r = run_cli("image", "--matrix", str(matrix), "--owner", "Acme-Labs", "--guard-private", env=env)
            assert st.password not in r.stdout + r.stderr and "Traceback" not in r.stderr
            return r

        r = guard("public")  # a new public repository: its first push would create a public package
        assert r.returncode == 10 and "acme-labs/qnn-sdk does not exist yet" in r.stderr
        assert "would create it public, with Qualcomm's SDK inside" in r.stderr and "Manage Actions access" in r.stderr
        assert guard("private").returncode == 0  # a private repository's package is private
        st.packages["acme-labs/qnn-sdk"] = Package("private", readers={st.user})  # created private, access given
        r = guard("public")
        assert r.returncode == 0 and "private: anonymous pulls are refused" in r.stderr
        st.packages["acme-labs/qnn-sdk"] = Package("private")  # another repository's package of that name
        r = guard("public")
        assert r.returncode == 10 and f"{OWNER_REPO}'s workflows may not use it (403 DENIED)" in r.stderr
        st.packages["acme-labs/qnn-sdk"] = Package("public", readers={st.user})
        r = guard("private")
        assert r.returncode == 10 and "is public: anyone can pull Qualcomm's SDK" in r.stderr
        st.fail = True
        r = guard("private")
        assert r.returncode == 10 and "503" in r.stderr and "nothing is pushed" in r.stderr
        assert "" in st.seen_authorization  # the public check asked without credentials
    with FakeRegistry() as reg:  # the workflow token goes to GHCR only: another registry is refused unasked
        env = {**os.environ, "GITHUB_TOKEN": "ghs_secret", "GITHUB_ACTOR": "a", "REPO_VISIBILITY": "private"}
        env.pop("QNN_RELEASE_REGISTRY", None)
        elsewhere = _repo(tmp_path / "other")
        data = yaml.safe_load((elsewhere / "matrix" / "models.yaml").read_text())
        data.setdefault("release", {})["image"] = "registry.example.org/acme/qnn-sdk"
        (elsewhere / "matrix" / "models.yaml").write_text(yaml.safe_dump(data))
        r = run_cli("image", "--matrix", str(elsewhere / "matrix" / "models.yaml"), "--owner", "acme",
                    "--guard-private", env=env)
        assert r.returncode in (2, 10) and "ghs_secret" not in r.stdout + r.stderr, r.stderr
