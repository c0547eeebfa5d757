"""Packaging real builds: archives, metadata schema, qnn-libs, the consistency gate, manifest, notes."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest

from ci_tools.compile import qnn_ep
from ci_tools.release.github import Connection
from ci_tools.release.metadata import SCHEMA_FILE
from ci_tools.sources.store import sha256_file
from tests.conftest import path_model, run_cli, write_matrix
from tests.fakes.fake_qairt import make_fake_sdk
from tests.support import models
from tests.support.counting import counted_cli, tools

pytest.importorskip("onnxruntime_qnn")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One real build (two models, two chips, fp16 + w8a16) shared by the packaging tests."""
    repo = tmp_path_factory.mktemp("repo")
    (repo / "models").mkdir()
    a = models.mlp(repo / "models" / "a.onnx", dynamic_batch=False)
    b = models.mlp(repo / "models" / "b.onnx", dynamic_batch=False, seed=3)
    matrix = write_matrix(repo, [path_model(repo, "alpha", a, chips=["SM8750", "SM8550"], precisions=["fp16", "w8a16"]),
                                 path_model(repo, "beta", b, chips=["SM8750"])])
    out, cache = repo / "dist", repo / "cache"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(cache)}
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), "-j", "2", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return {"repo": repo, "matrix": matrix, "out": out, "env": env}


def _package(built, *args, out=None):
    return run_cli("package", "--matrix", str(built["matrix"]), "--out", str(out or built["out"]), *args,
                   env={k: v for k, v in built["env"].items() if k != "QNN_SDK_ROOT"})


def test_package_archives_extract_validate_and_match_manifest(built, tmp_path):
    ort_qnn = qnn_ep.qnn_version()
    sdk_version = json.loads((built["out"] / "build-report.json").read_text())["targets"][0]["sdk_version"]
    assert sdk_version.startswith(ort_qnn)
    sdk = make_fake_sdk(tmp_path / "sdk", version=sdk_version)
    r = _package(built, "--tag", "v1.0.0", "--qnn-sdk", str(sdk))
    assert r.returncode == 0, r.stdout + r.stderr
    release = built["out"] / "release"
    manifest = json.loads((release / "manifest.json").read_text())
    names = {a["name"] for a in manifest["assets"]}
    # asset names carry major.minor.patch.build, not the binary's build stamp
    core = ".".join(sdk_version.split(".")[:3] + [sdk_version.split(".")[3][:6]])
    assert core != sdk_version and f"alpha-sm8750-fp16-qnn{core}.tar.bz2" in names
    assert f"qnn-libs-{sdk_version}.tar.bz2" in names and f"qnn-include-{sdk_version}.tar.bz2" in names
    assert len([a for a in manifest["assets"] if a["kind"] == "model"]) == 5
    sums = dict(reversed(line.split("  ")) for line in (release / "SHA256SUMS").read_text().splitlines())
    schema = json.loads(SCHEMA_FILE.read_text())
    for a in manifest["assets"]:
        path = release / a["name"]
        assert sha256_file(path) == a["sha256"] == sums[a["name"]] and path.stat().st_size == a["size"]
        dest = tmp_path / "x" / a["name"]
        dest.mkdir(parents=True)
        subprocess.run(["tar", "xjf", str(path), "-C", str(dest)], check=True)
        with tarfile.open(path) as tf:
            assert sorted(m.name for m in tf.getmembers() if m.isfile()) == \
                sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
        if a["kind"] != "model":
            continue
        (top,) = list(dest.iterdir())
        meta = json.loads((top / "metadata.json").read_text())
        jsonschema.validate(meta, schema)
        assert meta["chip"]["name"] == a["soc"] and meta["sdk"]["qnn_version"] == sdk_version
        assert meta["quantization"]["precision"] == a["precision"]
        assert meta["quantization"]["weight_bits"] == (8 if a["precision"] == "w8a16" else 16)
        assert meta["runtime_libs"] == f"qnn-libs-{sdk_version}.tar.bz2"
        for g in meta["graphs"]:
            assert sha256_file(top / g["binary"]) == g["sha256"]
            info = qnn_ep.read_compat(top / g["context_onnx"])
            assert f"v{info.htp_arch}" == meta["chip"]["htp_arch"]
        assert (top / "sample" / "main" / "inputs" / "x.npy").is_file()
        assert "ADSP_LIBRARY_PATH" in (top / "README.md").read_text() and (top / "LICENSE").read_text()
    libs = tarfile.open(release / f"qnn-libs-{sdk_version}.tar.bz2").getnames()
    assert f"qnn-libs-{sdk_version}/libQnnHtpV79Skel.so" in libs
    assert f"qnn-libs-{sdk_version}/libQnnHtpV73Stub.so" in libs
    assert not any("V81" in n for n in libs)  # only the arches the release targets
    _consume_like_sherpa_onnx(release, sdk_version, built["repo"].parent / "consumer")
    notes = (built["repo"] / "release_notes" / "v1.0.0.md").read_text()
    assert "| alpha | SM8750 (v79) | w8a16 |" in notes and "First release" in notes


def test_packaging_twice_is_byte_identical_even_from_a_fresh_dist(built, tmp_path):
    assert _package(built).returncode == 0
    first = {p.name: sha256_file(p) for p in (built["out"] / "release").glob("*.tar.bz2")}
    fresh = tmp_path / "dist2"
    r = run_cli("build", "--matrix", str(built["matrix"]), "--out", str(fresh), env=built["env"])
    assert r.returncode == 0 and "0 failed" in r.stdout
    assert {t["status"] for t in json.loads((fresh / "build-report.json").read_text())["targets"]} == {"cached"}
    assert _package(built, out=fresh).returncode == 0
    assert {p.name: sha256_file(p) for p in (fresh / "release").glob("*.tar.bz2")} == first


def test_gate_refuses_other_sdk_version(built, tmp_path):
    sdk = make_fake_sdk(tmp_path / "sdk", version="2.40.0.251030")
    r = _package(built, "--qnn-sdk", str(sdk))
    assert r.returncode == 9 and "release refused" in r.stderr
    assert "the release ships qnn-libs-2.40.0.251030" in r.stderr and "alpha.main.sm8750.fp16" in r.stderr


def test_gate_refuses_binary_for_another_chip(built, tmp_path):
    out = tmp_path / "dist"
    shutil.copytree(built["out"], out)
    shutil.rmtree(out / "release", ignore_errors=True)
    good, wrong = out / "alpha.main.sm8750.fp16", out / "alpha.main.sm8550.fp16"
    for f in ("main_ctx.onnx", "main_ctx_qnn.bin"):
        shutil.copyfile(wrong / f, good / f)
    r = _package(built, out=out)
    assert r.returncode == 9
    assert "alpha.main.sm8750.fp16: compiled for v73/soc_model 43, not SM8750" in r.stderr
    assert not (out / "release").exists()


def test_missing_runtime_library_is_named(built, tmp_path):
    version = json.loads((built["out"] / "build-report.json").read_text())["targets"][0]["sdk_version"]
    sdk = make_fake_sdk(tmp_path / "sdk", version=version, omit=("lib/hexagon-v79/unsigned/libQnnHtpV79Skel.so",))
    r = _package(built, "--qnn-sdk", str(sdk))
    assert r.returncode == 9 and "missing lib/hexagon-v79/unsigned/libQnnHtpV79Skel.so" in r.stderr


def test_release_notes_list_changes_since_previous_manifest(built, tmp_path):
    assert _package(built).returncode == 0
    prev = json.loads((built["out"] / "release" / "manifest.json").read_text())
    prev["assets"] = [a for a in prev["assets"] if a.get("model") != "beta" and a["kind"] != "twin"]
    prev["assets"].append({**prev["assets"][0], "soc": "SM8650", "name": "alpha-sm8650-fp16-old.tar.bz2"})
    prev["assets"][0] = {**prev["assets"][0], "sha256": "0" * 64}
    p = tmp_path / "v0.9.0.manifest.json"
    p.write_text(json.dumps(prev))
    r = _package(built, "--tag", "v1.1.0", "--previous", str(p))
    assert r.returncode == 0, r.stderr
    notes = (built["repo"] / "release_notes" / "v1.1.0.md").read_text()
    assert "- added: beta/SM8750/fp16" in notes
    assert "- removed: alpha/SM8650/fp16" in notes
    assert "- rebuilt: alpha/SM8550/fp16" in notes
    assert "raises the QNN runtime" not in notes  # the same QNN on both sides
    # #44 item 2: the notes carry compare's table against the previous release, a removed target first
    assert "Target by target (`qnn-release compare`" in notes and "| alpha/SM8650/fp16 | **removed** |" in notes
    # #41 item 2: a previous release built with an older QNN: the notes say first that this one needs a newer runtime
    for a in prev["assets"]:
        a["sdk_version"] = "2.50.40.260815120000"
        a.pop("qnn_runtime", None)
    p.write_text(json.dumps(prev))
    assert _package(built, "--tag", "v1.1.0", "--previous", str(p)).returncode == 0
    notes = (built["repo"] / "release_notes" / "v1.1.0.md").read_text()
    now = json.loads((built["out"] / "release" / "manifest.json").read_text())["assets"]
    need = next(a["qnn_runtime"] for a in now if a["kind"] == "model")
    assert f"raises the QNN runtime an app needs: {need} or newer (was 2.50.40" in notes
    assert notes.index("raises the QNN runtime") < notes.index("## Models x chips")
    assert f"| {need} or newer |" in notes
    assert f"needs QNN runtime >= {need} (was 2.50.40)" in notes


def test_build_package_publish_fetch_round_trip(built, tmp_path):
    from ci_tools.release.fetch import AppNeeds, fetch_model
    from ci_tools.release.publish import publish
    from tests.fakes.fake_github import FakeGitHub

    assert _package(built, "--tag", "v2.0.0").returncode == 0
    with FakeGitHub() as gh:
        publish(built["out"], "acme/models", "v2.0.0",
                via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
        res = fetch_model("acme/models@v2.0.0", "alpha", soc="SM8750-AC", needs=AppNeeds(precision="w8a16"),
                          dest=tmp_path / "app", via=Connection(api_url=gh.url))
    meta = json.loads((tmp_path / "app" / res.archive.removesuffix(".tar.bz2") / "metadata.json").read_text())
    assert meta["chip"]["name"] == "SM8750" and meta["quantization"]["precision"] == "w8a16"
    ctx = tmp_path / "app" / res.archive.removesuffix(".tar.bz2") / meta["graphs"][0]["context_onnx"]
    assert qnn_ep.read_compat(ctx).htp_arch == 79
    # #41 item 1: a chip with an HTP but no binary gets the twin to compile on the device, a chip without one
    # the twin as its CPU model
    with FakeGitHub() as gh:
        publish(built["out"], "acme/models", "v2.0.0",
                via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
        jit = fetch_model("acme/models@v2.0.0", "beta", soc="SM8650", dest=tmp_path / "jit",
                          via=Connection(api_url=gh.url))
        cpu = fetch_model("acme/models@v2.0.0", "beta", soc="MT6989", dest=tmp_path / "cpu",
                          via=Connection(api_url=gh.url))
    assert (jit.kind, cpu.kind) == ("jit", "cpu") and jit.archive == cpu.archive == "beta-float-onnx.tar.bz2"
    assert jit.qnn_libs is None and (Path(jit.path) / "main" / "graph.onnx").is_file()


def test_every_model_ships_its_twin_verified_through_on_device_compile_and_its_code_runs(built, tmp_path):
    """#41 item 1: the prepared float graphs as a release asset with its sha256, run through the QNN EP compiling
    it at session creation (timed, peak memory) and on CPU; the twin README's code runs as written."""
    import re

    out = tmp_path / "dist"
    shutil.copytree(built["out"], out, symlinks=True)
    assert _package(built, out=out).returncode == 0
    release = out / "release"
    manifest = json.loads((release / "manifest.json").read_text())
    twins = {a["name"]: a for a in manifest["assets"] if a["kind"] == "twin"}
    # a float twin per model, and the QDQ graphs alpha's w8a16 binaries were compiled from (copied from the build)
    assert sorted(twins) == ["alpha-float-onnx.tar.bz2", "alpha-w8a16-onnx.tar.bz2", "beta-float-onnx.tar.bz2"]
    for a in twins.values():
        assert a["sha256"] == sha256_file(release / a["name"])
        assert a["precision"] == ("w8a16" if "w8a16" in a["name"] else "float")
        (j,) = a["on_device_compile"]
        assert j["verified"] and j["soc"] == "SM8750" and j["first_load_seconds"] > 0 and j["peak_memory_mb"] > 0
    with tarfile.open(release / "alpha-float-onnx.tar.bz2") as tf:
        tf.extractall(tmp_path / "x", filter="data")
    folder = tmp_path / "x" / "alpha-float-onnx"
    twin = json.loads((folder / "twin.json").read_text())
    assert twin["graphs"][0]["on_device_compile"]["cosine"] > 0.999
    readme = (folder / "README.md").read_text()
    assert "this machine's x86-64 HTP emulator, not a device" in readme
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    r = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    errors = [float(x) for x in re.findall(r"max abs error vs CPU (\S+)", r.stdout)]
    assert errors and max(errors) < 0.01, r.stdout
    # the same code under the other SDK line an app may ship (onnxruntime-qnn 2.6.0: QNN 2.50.40): the twin is
    # compiled by the runtime that loads it, so it has no runtime floor of its own
    from tests.conftest import sdk_line_python
    from tests.test_runtime_rule import OLDER

    r = subprocess.run([str(sdk_line_python(OLDER)), "-c", code], cwd=folder, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    older = [float(x) for x in re.findall(r"max abs error vs CPU (\S+)", r.stdout)]
    assert len(older) == len(errors) and max(older) < 0.01, r.stdout
    _the_qdq_twin_is_the_builds_graph_and_runs(built, release, tmp_path)


def _the_qdq_twin_is_the_builds_graph_and_runs(built, release, tmp_path) -> None:
    """#41 item 1, quantized: the w8a16 twin holds the very QDQ graph the build compiled alpha's w8a16 binaries
    from, judged by the w8a16 bars against CPU on the float graph, and its README code runs as written."""
    import re

    report = json.loads((built["out"] / "build-report.json").read_text())
    (rec,) = {t["quantized_graph"] for t in report["targets"] if t["model"] == "alpha" and t["precision"] == "w8a16"}
    with tarfile.open(release / "alpha-w8a16-onnx.tar.bz2") as tf:
        tf.extractall(tmp_path / "q", filter="data")
    folder = tmp_path / "q" / "alpha-w8a16-onnx"
    twin = json.loads((folder / "twin.json").read_text())
    assert twin["kind"] == "w8a16" and rec.endswith(".qdq.onnx")
    graph = folder / twin["graphs"][0]["file"]
    import onnx

    ops = {n.op_type for n in onnx.load(str(graph)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops, ops  # the QDQ graph, not the float one
    assert twin["graphs"][0]["sha256"] == sha256_file(graph)
    readme = (folder / "README.md").read_text()
    assert "QDQ graphs" in readme and "the quantization's" in readme
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    r = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    errors = [float(x) for x in re.findall(r"max abs error vs CPU (\S+)", r.stdout)]
    assert errors and max(errors) < 0.2, r.stdout  # the quantization's error, against CPU on the float graph


def _consume_like_sherpa_onnx(release, version: str, work) -> None:
    """What sherpa-onnx's Android build does with the two tarballs (scripts/apk/build-apk-qnn-asr.sh.in:28-48,
    CMakeLists.txt:433-468): headers as QNN_SDK_ROOT, every .so copied flat into jniLibs/arm64-v8a."""
    import shutil
    import subprocess

    work.mkdir(parents=True, exist_ok=True)
    for name in (f"qnn-include-{version}.tar.bz2", f"qnn-libs-{version}.tar.bz2"):
        shutil.copy(release / name, work / name)
    script = f"""set -e
tar xf qnn-include-{version}.tar.bz2
export QNN_SDK_ROOT=$PWD/qnn-include-{version}
test -f "$QNN_SDK_ROOT/include/QNN/QnnInterface.h"
tar xf qnn-libs-{version}.tar.bz2
mkdir -p app/src/main/jniLibs/arm64-v8a
cp -v qnn-libs-{version}/*.so app/src/main/jniLibs/arm64-v8a/
"""
    r = subprocess.run(["bash", "-c", script], cwd=work, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    jni = {p.name for p in (work / "app/src/main/jniLibs/arm64-v8a").iterdir()}
    assert {"libQnnHtp.so", "libQnnSystem.so", "libQnnHtpPrepare.so", "libQnnHtpV79Stub.so",
            "libQnnHtpV79Skel.so"} <= jni
    if shutil.which("cmake"):  # sherpa-onnx's own check, run by CMake
        (work / "check.cmake").write_text(
            f'set(QNN_SDK_ROOT "{work}/qnn-include-{version}")\n'
            'if(NOT EXISTS ${QNN_SDK_ROOT}/include/QNN/QnnInterface.h)\n'
            '  message(FATAL_ERROR "QnnInterface.h not found in ${QNN_SDK_ROOT}")\nendif()\n')
        r = subprocess.run(["cmake", "-P", str(work / "check.cmake")], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_a_release_over_the_hosts_limits_is_packaged_in_parts_and_pieces_and_fetched_back(built, tmp_path):
    """Limits of 10 assets per release and 16 KiB per asset (GitHub's are 1,000 and 2 GiB): package puts what
    does not fit in linked releases and uploads the larger archives in pieces; publish and fetch follow."""
    import shutil

    import yaml

    from ci_tools.release.fetch import AppNeeds, fetch_model
    from ci_tools.release.publish import publish
    from tests.fakes.fake_github import FakeGitHub

    data = yaml.safe_load(built["matrix"].read_text())
    data["release"] = {"max_assets": 10, "max_asset_bytes": 16 * 1024}
    matrix = built["matrix"].with_name("limits.yaml")
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "dist"
    shutil.copytree(built["out"], out, ignore=shutil.ignore_patterns("release"))
    r = run_cli("package", "--matrix", str(matrix), "--out", str(out), "--tag", "v3.0.0",
                env={k: v for k, v in built["env"].items() if k != "QNN_SDK_ROOT"})
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    assert manifest["manifest_version"] == 2
    pieced = [a for a in manifest["assets"] if a.get("pieces")]
    assert pieced and all(p["size"] <= 16 * 1024 for a in pieced for p in a["pieces"])
    assert all(not (out / "release" / a["name"]).exists() for a in pieced)
    sums = (out / "release" / "SHA256SUMS").read_text()
    assert all(f"{p['sha256']}  {p['name']}" in sums for a in pieced for p in a["pieces"])
    with FakeGitHub(page_size=100) as gh:
        publish(out, "acme/models", "v3.0.0", via=Connection(token=gh.state.token, api_url=gh.url,
                                                             sleep=lambda s: None))
        releases = [r for r in gh.state.releases.values() if r["repo"] == "acme/models"]
        assert len(releases) == 1 + len(manifest["parts"]) >= 2 and not any(r["draft"] for r in releases)
        for rid in gh.state.releases:
            assert len(gh.asset_names(rid)) <= 10
        a = next(x for x in manifest["assets"] if x.get("pieces") and x["kind"] == "model")
        res = fetch_model("acme/models@v3.0.0", a["model"], soc=a["soc"], needs=AppNeeds(precision=a["precision"]),
                          dest=tmp_path / "app", via=Connection(api_url=gh.url, sleep=lambda s: None))
    meta = json.loads((tmp_path / "app" / res.archive.removesuffix(".tar.bz2") / "metadata.json").read_text())
    assert res.archive == a["name"] and meta["chip"]["name"] == a["soc"]


def test_the_archive_readmes_python_runs_as_written_on_its_own_sample(built, tmp_path):
    """#41 item 3: the load code of every kind of archive (fp16, w8a16), pasted as a new app developer would:
    the README's python block run in the extracted folder, on the HTP emulator, against the sample's expected
    outputs."""
    import re

    out = tmp_path / "dist"
    shutil.copytree(built["out"], out, symlinks=True)
    assert _package(built, out=out).returncode == 0
    release = out / "release"
    for name in ("alpha-sm8750-fp16", "alpha-sm8550-w8a16"):
        archive = next(release.glob(f"{name}-qnn*.tar.bz2"))
        with tarfile.open(archive) as tf:
            tf.extractall(tmp_path / "x", filter="data")
        folder = tmp_path / "x" / archive.name.removesuffix(".tar.bz2")
        readme = (folder / "README.md").read_text()
        (code,) = re.findall(r"```python\n(.*?)```", readme.split("## Load it with ONNX Runtime", 1)[1], re.S)[:1]
        r = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        errors = [float(x) for x in re.findall(r"max abs error vs CPU (\S+)", r.stdout)]
        assert errors and max(errors) < (0.01 if "fp16" in name else 0.1), r.stdout


def test_package_copies_what_the_build_kept_and_computes_nothing(built, tmp_path):
    """Data flows forward (#45): with an empty cache (no sources, no prepared graphs, no measurements), package runs
    no model on CPU or through the QNN EP, starts no process per archive or twin, and every archive's sample/ is
    an input the HTP emulator ran with CPU's answer for it, as the build kept them; the twins are as the build
    measured them."""
    import numpy as np

    from ci_tools.compile.ran import read_ran

    fresh = tmp_path / "cache"  # empty
    fresh.mkdir()
    out = tmp_path / "dist"
    shutil.copytree(built["out"], out, ignore=shutil.ignore_patterns("release"))
    env = {k: v for k, v in {**built["env"], "QNN_RELEASE_CACHE": str(fresh)}.items() if k != "QNN_SDK_ROOT"}
    r, seen = counted_cli(tmp_path / "seen.json", "package", "--out", str(out), "--matrix", str(built["matrix"]),
                          env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert seen["sessions"] == [], seen  # no ONNX Runtime session: nothing run on CPU or through the QNN EP
    started = tools(seen)  # git rev-parse once per release; a parallel bzip2 writing an archive
    assert set(started) <= {"git", "lbzip2", "pbzip2"} and started.count("git") <= 2, seen
    manifest = json.loads((out / "release" / "manifest.json").read_text())
    archives = [a["name"] for a in manifest["assets"] if a["kind"] == "model"]
    assert len(archives) == 5
    with tarfile.open(out / "release" / next(a for a in archives if a.startswith("alpha-sm8750-fp16"))) as tar:
        sample = {Path(m.name).relative_to(Path(m.name).parts[0]).as_posix():
                  np.load(io.BytesIO(tar.extractfile(m).read()))  # type: ignore[union-attr]
                  for m in tar.getmembers() if "/sample/" in m.name and m.isfile()}
    ran = read_ran(out / "alpha.main.sm8750.fp16")
    assert ran is not None and ran.emulator is True, "the verification's inputs, run on the HTP emulator"
    (name,) = ran.feeds[0]
    assert np.array_equal(sample[f"sample/main/inputs/{name}.npy"], ran.feeds[0][name])
    (out_name,) = ran.output_names
    assert np.array_equal(sample[f"sample/main/outputs/{out_name}.npy"], ran.outputs[0][0])
    twins = {a["name"]: a for a in manifest["assets"] if a["kind"] == "twin"}
    assert len(twins) == 3 and all(a["on_device_compile"] for a in twins.values()), twins  # measured by the build
    with tarfile.open(out / "release" / "alpha-float-onnx.tar.bz2") as tar:
        shipped = json.loads(tar.extractfile("alpha-float-onnx/twin.json").read())  # type: ignore[union-attr]
    assert shipped == json.loads((out / "twins" / "alpha-float-onnx.json").read_text())["values"]
    # a build that kept no twin (an earlier version's, or one whose twin failed) is refused, never measured here
    shutil.rmtree(out / "twins")
    r = _package(built, out=out)
    assert r.returncode == 9 and "alpha-float-onnx: the build kept no twin" in r.stderr, r.stderr
    assert "run `qnn-release build` again" in r.stderr and "Traceback" not in r.stderr
