"""A recipe is a folder (issue #45): a third model family that lives only in this test is built, packaged and
shown on the release page, and nothing outside the test names it.

The family: a classifier checked by its top-1 answer. Its check runs each chip's compiled binary on the HTP
emulator and the source graph on CPU (ONNX Runtime) on the same generated inputs and counts the inputs whose
top-1 class agree. It is registered the way a team's own recipe would be without a fork: a line added to
``RECIPES`` in every Python process of the run (a ``sitecustomize`` on PYTHONPATH: build workers are spawned,
so a patch made in the test's process would not reach them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from typing import Any, ClassVar, Literal

import numpy as np
import pytest
from pydantic import Field

from ci_tools.compile.records import FAILED, GENERATED, TargetRecord
from ci_tools.recipes import ArchiveExtras, ArchivePart, ChipCheck, Recipe, RecipeResult, RecipeVerify
from tests.conftest import REPO, path_model, run_cli, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")
KIND = "top1"


class Top1Verify(RecipeVerify):
    """``verify: {kind: top1}``: the chip's binary and CPU pick the same class on generated inputs."""

    GRAPHS: ClassVar[tuple[str, ...]] = ("main",)
    kind: Literal["top1"]
    samples: int = Field(default=4, ge=1, le=64, description="generated inputs each chip classifies")
    min_agree: float = Field(default=1.0, ge=0, le=1, description="share of inputs whose top-1 class must agree")


class Top1Result(RecipeResult):
    """metadata.json's ``recipe`` of a classifier: top-1 agreement with CPU."""

    kind: Literal["top1"]
    agree: int
    samples: int
    min_agree: float


class Top1Recipe(Recipe):
    kind = KIND
    verify_model = Top1Verify
    result_model = Top1Result
    pending_note = "verified by its top-1 answers once its graph for this chip is built"

    def check_chips(self, check: ChipCheck) -> list[TargetRecord]:
        return [r for rs in check.groups.values() for r in _judge(check, rs)]

    def archive_extras(self, part: ArchivePart) -> ArchiveExtras:
        result = {k: v for k, v in (part.records[0].recipe or {}).items() if k != "kind"}
        note = f"top-1 agreement with CPU: {result.get('agree')}/{result.get('samples')}\n".encode()
        return ArchiveExtras(members=[(f"{part.stem}/top1.txt", note)], result=result or None)

    def page_rows(self, result: dict[str, Any]) -> list[tuple[str, str]]:
        return [("top-1", f"{result['agree']}/{result['samples']} inputs: the same class as CPU")]

    def measures(self, result: dict[str, Any]) -> dict[str, float]:
        return {"top1_share": result["agree"] / result["samples"]}


def _judge(check: ChipCheck, rs: list[TargetRecord]) -> list[TargetRecord]:
    """One chip's record judged: its context binary on the HTP emulator against the source graph on CPU."""
    import onnxruntime as cpu_ort

    from ci_tools.compile import qnn_ep

    settings: Top1Verify = check.model.verify
    r = rs[0]
    soc = check.loaded.catalog.get(r.soc)
    folder = check.folders[r.id]
    target = json.loads((folder / "target.json").read_text())
    cpu = cpu_ort.InferenceSession(str(check.export / check.model.graphs[0].file),
                                   providers=["CPUExecutionProvider"])
    feed = cpu.get_inputs()[0]
    xs = np.random.default_rng(0).standard_normal((settings.samples, *feed.shape)).astype(np.float32)
    ort, _ = qnn_ep._ort()
    htp = ort.InferenceSession(str(folder / target["context_onnx"]), sess_options=qnn_ep.session_options(
        allow_cpu_fallback=False, options=qnn_ep.htp_options(soc.soc_model, int(soc.arch[1:]), fp16=True)))
    agree = sum(int(np.argmax(cpu.run(None, {feed.name: x})[0]) == np.argmax(htp.run(None, {feed.name: x})[0]))
                for x in xs)
    result = {"kind": KIND, "agree": agree, "samples": settings.samples, "min_agree": settings.min_agree}
    r = r.with_(verify_kind=KIND, recipe=result, verify_inputs=f"{settings.samples} generated inputs")
    if agree < settings.min_agree * settings.samples:
        return [r.with_(status=FAILED, verified=False, exit_code=7,
                        error=f"{r.id}: top-1 differs from CPU on {settings.samples - agree} inputs")]
    return [r.with_(verified=True, verified_on=GENERATED)]


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A classifier with the test's recipe on one chip: built, packaged and its page written."""
    repo = tmp_path_factory.mktemp("repo")
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(
        "from ci_tools import recipes\n"
        f"recipes.RECIPES[{KIND!r}] = 'tests.test_recipe_folder:Top1Recipe'\n")
    (repo / "models").mkdir()
    onnx = models.mlp(repo / "models" / "clf.onnx", dynamic_batch=False)
    matrix = write_matrix(repo, [path_model(repo, "clf", onnx, chips=["SM8750"],
                                            verify={"kind": KIND, "samples": 4})])
    out = repo / "dist"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(repo / "cache"),
           "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    env.pop("GITHUB_REPOSITORY", None)
    build = run_cli("build", "--matrix", str(matrix), "--out", str(out), "-j", "1", env=env)
    assert build.returncode == 0, build.stdout + build.stderr
    pkg = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--tag", "v1.0.0", env=env)
    assert pkg.returncode == 0, pkg.stdout + pkg.stderr
    return {"repo": repo, "out": out, "release": out / "release", "env": env, "matrix": matrix}


def test_a_third_recipe_living_only_in_a_test_builds_packages_and_shows(released):
    target = json.loads((released["out"] / "clf.main.sm8750.fp16" / "target.json").read_text())
    assert target["verify_kind"] == KIND and target["verified"] is True, target
    assert target["recipe"] == {"kind": KIND, "agree": 4, "samples": 4, "min_agree": 1.0}
    (archive,) = sorted(released["release"].glob("clf-sm8750-fp16-*.tar.bz2"))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        meta = json.load(tar.extractfile(next(n for n in names if n.endswith("/metadata.json"))))
    assert any(n.endswith("/top1.txt") for n in names), names  # the recipe's own member
    # the recipe's result, validated by its own model through the registry, in the one tagged field
    assert meta["recipe"] == {"kind": KIND, "agree": 4, "samples": 4, "min_agree": 1.0}
    assert meta["numbers"]["main"]["verified"] is True and meta["on_device"] is None
    page = (released["release"] / "index.html").read_text()
    assert re.search(r"<dt>top-1</dt><dd>4/4 inputs: the same class as CPU</dd>", page), page[:2000]


def test_the_recipe_is_registered_by_the_test_alone(released):
    """Nothing of the package names the test's recipe: without its registration the matrix is refused in one
    line naming the recipes there are."""
    env = {k: v for k, v in released["env"].items() if k != "PYTHONPATH"}
    names = subprocess.run(["git", "grep", "-l", "-i", "top1", "--", "ci_tools", "templates", "docs"], cwd=REPO,
                           capture_output=True, text=True)
    assert names.stdout == "", names.stdout
    plan = run_cli("plan", "--matrix", str(released["matrix"]), env=env)
    assert plan.returncode == 2 and "verify.kind: expected one of" in plan.stderr and "top1" in plan.stderr, \
        plan.stderr
    assert "Traceback" not in plan.stderr


def test_a_wrong_setting_of_the_recipe_is_one_line_naming_its_key(released, tmp_path):
    import yaml

    data = yaml.safe_load(released["matrix"].read_text())
    data["models"][0]["verify"]["samples"] = 0
    bad = released["matrix"].parent / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    plan = run_cli("plan", "--matrix", str(bad), env=released["env"])
    assert plan.returncode == 2, plan.stderr
    assert re.search(r"bad\.yaml:\d+: models\[0\]\.verify\.samples: ", plan.stderr), plan.stderr
    assert "generated inputs each chip classifies" in plan.stderr  # the hint: the recipe's own description
