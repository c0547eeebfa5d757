"""Guards a release toolkit is trusted for, each with a test that fails when the guard is removed
(benchmarks/mutants.py removes them one at a time and runs these)."""

from __future__ import annotations

import json
import os
import sys

import onnx
import pytest

from ci_tools.errors import CompileError, PublishError
from ci_tools.release.github import Connection
from ci_tools.release.publish import publish
from tests.conftest import path_model, run_cli, write_matrix
from tests.fakes.fake_github import FakeGitHub
from tests.fakes.fake_qairt import make_fake_sdk
from tests.support import models
from tests.support.guards import _prepared
from tests.support.release_fixture import make_release

REPO, TAG = "acme/models", "v1.0.0"


def test_ort_refuses_a_binary_compiled_for_another_chip_than_asked(tmp_path, monkeypatch):
    """backends/ort.py reads ep_compatibility_info back: a binary for another arch / soc_model is an error."""
    pytest.importorskip("onnxruntime_qnn")
    from ci_tools.compile import qnn_ep
    from ci_tools.compile.backends import CompileJob
    from ci_tools.compile.backends.ort import OrtBackend

    (tmp_path / "models").mkdir()
    loaded, model, prep = _prepared(tmp_path, models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False))
    soc = loaded.catalog.get("SM8750")
    real = qnn_ep.read_compat
    for field, value in (("htp_arch", 75), ("soc_model", 57)):
        monkeypatch.setattr(qnn_ep, "read_compat",
                            lambda p, f=field, v=value: real(p).__class__(**{**real(p).__dict__, f: v}))
        job = CompileJob(target_id="m.main.sm8750.fp16", prepared=prep, soc=soc, precision="fp16",
                         options=model.options, out_dir=tmp_path / f"out-{field}")
        with pytest.raises(CompileError, match="the binary says"):
            OrtBackend().compile(job)
    monkeypatch.setattr(qnn_ep, "read_compat", real)
    job = CompileJob(target_id="m.main.sm8750.fp16", prepared=prep, soc=soc, precision="fp16",
                     options=model.options, out_dir=tmp_path / "out-ok")
    assert OrtBackend().compile(job).binaries[0].is_file()


def test_publish_keeps_a_release_a_draft_when_an_asset_changed_before_the_final_check(tmp_path):
    release = make_release(tmp_path / "release", TAG)
    with FakeGitHub() as gh:
        gh.fault("GET", r"/releases/\d+/assets", "alter", skip=1, name="SHA256SUMS")
        with pytest.raises(PublishError, match=r"stays a draft: missing \[\], different \['SHA256SUMS'\]"):
            publish(release, REPO, TAG, via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
        (rel,) = gh.releases(REPO, TAG)
        assert rel["draft"] is True


def test_publish_keeps_a_release_a_draft_when_an_asset_is_lost_before_the_final_check(tmp_path):
    release = make_release(tmp_path / "release", TAG)
    with FakeGitHub() as gh:
        # the first listing (what is there already) passes; the final check's listing has lost manifest.json
        gh.fault("GET", r"/releases/\d+/assets", "lose", skip=1, name="manifest.json")
        with pytest.raises(PublishError, match=r"stays a draft: missing \['manifest.json'\]"):
            publish(release, REPO, TAG, via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
        (rel,) = gh.releases(REPO, TAG)
        assert rel["draft"] is True
        # run again: it resumes and completes
        publish(release, REPO, TAG, via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
        (rel,) = gh.releases(REPO, TAG)
        assert rel["draft"] is False and "manifest.json" in gh.asset_names(rel["id"])


@pytest.fixture
def qairt_build(tmp_path):
    sdk = make_fake_sdk(tmp_path / "sdk")
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"])])
    env = {**os.environ, "QNN_SDK_ROOT": str(sdk), "QNN_PYTHON": sys.executable,
           "QNN_RELEASE_CACHE": str(tmp_path / "cache")}
    return sdk, matrix, env, tmp_path / "dist"


def test_the_package_gate_compares_whole_versions_and_refuses_an_empty_one(qairt_build):
    sdk, matrix, env, out = qairt_build
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    (target,) = [p for p in out.iterdir() if p.name.startswith("m.")]
    stub = target / "main_ctx.onnx"
    m = onnx.load(str(stub))
    for version in ("", "v2.40.0.2510", "v2.40.0.25103"):  # empty, and prefixes of the qnn-libs version
        for a in next(n for n in m.graph.node if n.op_type == "EPContext").attribute:
            if a.name == "ep_sdk_version":
                a.s = version.encode()
        onnx.save(m, str(stub))
        r = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--qnn-sdk", str(sdk), env=env)
        assert r.returncode == 9 and "the release ships qnn-libs-2.40.0.251030" in r.stderr, (version, r.stderr)


def test_unverified_targets_are_said_so_and_refused_with_require_verified(qairt_build):
    sdk, matrix, env, out = qairt_build
    (sdk / "bin" / "x86_64-linux-clang" / "qnn-net-run").unlink()  # a route that cannot run the emulator
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr
    assert "ok, unverified" in r.stdout and "never run on the HTP emulator" in r.stdout
    r = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--require-verified", env=env)
    assert r.returncode == 9 and "never run on the HTP emulator: m.main.sm8750.fp16" in r.stderr
    r = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--tag", "v1.0.0", env=env)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    (asset,) = [a for a in manifest["assets"] if a["kind"] == "model"]
    assert asset["verified"] is False
    assert "| unverified |" in (out / "release" / "RELEASE_NOTES.md").read_text()
    import tarfile

    with tarfile.open(out / "release" / asset["name"]) as tar:
        meta = json.load(tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("metadata.json"))))
    assert meta["numbers"]["main"]["verified"] is False


def test_a_node_htp_rejects_is_an_error_not_a_silent_cpu_partition(tmp_path):
    """qnn_ep forbids CPU fallback: a compile that would leave a node on CPU fails."""
    pytest.importorskip("onnxruntime_qnn")
    from pathlib import Path

    from ci_tools.compile import qnn_ep

    f = models.mlp(tmp_path / "erf.onnx", dynamic_batch=False, op="Erf")
    with pytest.raises(CompileError, match="fallback to CPU EP has been explicitly disabled"):
        qnn_ep.compile_context(f, qnn_ep.ContextFiles(out_dir=tmp_path / "out", stem="m"),
                               qnn_ep.htp_options(69, 79, True), log=tmp_path / "c.log")
    assert not list(Path(tmp_path / "out").glob("*.bin"))
