"""Numbers from real devices: a real build measured through AI Hub's real client against a stand-in server
(tests/fakes/fake_aihub.py), whose "phone" runs each uploaded context binary on the HTP emulator; faults end in one
recorded line per target; the numbers reach metadata.json, the manifest, the notes and the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from ci_tools.cli import main
from ci_tools.device.numbers import DeviceRun
from ci_tools.release.metadata import SCHEMA_FILE
from ci_tools.sources.store import sha256_file
from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models

pytest.importorskip("onnxruntime_qnn")
qc = pytest.importorskip("qai_hub.client")
qsession = pytest.importorskip("qai_hub.util.session")
from tests.fakes.fake_aihub import DEFAULT_DEVICES, FakeAIHub, JobFailure, _device  # noqa: E402

CHIPS = ["SM8750", "QCS9100", "SM8650"]
# The binaries of the ort route are stamped with onnxruntime-qnn's QNN (2.51): the runtime must be >= it
FRAMEWORKS = [{"name": "QAIRT", "api_version": v, "full_version": f"{v}.0.26", "api_tags": []}
              for v in ("2.42", "2.51", "2.52")]
# QCS9100 has no AI Hub device; its twin QCS9075 (same soc_model 77, v73) has the IQ-9075 EVK
IQ9075 = _device("Dragonwing IQ-9075 EVK", "1.0", ["qualcomm-qcs9075", "qcs9075"], 73, 77, "Dragonwing IQ-9075",
                 format="iot", vendor="qualcomm")
LATENCY = {"Samsung Galaxy S25": 400, "Dragonwing IQ-9075 EVK": 900}

EMULATE = r"""
import sys, numpy as np, onnxruntime as ort
from ci_tools.compile import qnn_ep
ctx, soc_model, arch, src, dst = sys.argv[1:]
so = qnn_ep.session_options(allow_cpu_fallback=False, options=qnn_ep.htp_options(soc_model, int(arch), fp16=True))
sess = ort.InferenceSession(ctx, sess_options=so)
feeds = dict(np.load(src))
n = len(next(iter(feeds.values())))
names = [o.name for o in sess.get_outputs()]
outs = [sess.run(None, {k: v[i] for k, v in feeds.items()}) for i in range(n)]
np.savez(dst, **{nm: np.stack([o[k] for o in outs]) for k, nm in enumerate(names)})
"""


@pytest.fixture(autouse=True)
def _fast_client(monkeypatch):
    """The client's retries without waiting (as the wheel's own test/test_session.py patches them)."""
    monkeypatch.setattr(qc.Job, "_polling_interval", 2**-10)
    monkeypatch.setattr(qsession, "BACKOFF_FACTOR", 0)
    monkeypatch.setattr(qsession, "MAX_WAIT", 0)
    monkeypatch.setattr(qsession, "MAX_RETRIES", 1)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A real build for three chips: one with an AI Hub device, one whose twin has one, one without."""
    repo = tmp_path_factory.mktemp("repo")
    (repo / "models").mkdir()
    (repo / "samples").mkdir()
    rng = np.random.default_rng(5)
    for i in range(3):  # the model's own inputs (calibration.path: counts as real samples)
        np.savez(repo / "samples" / f"s{i}.npz", x=rng.standard_normal((1, 32)).astype(np.float32))
    onnx_file = models.mlp(repo / "models" / "a.onnx", dynamic_batch=False)
    matrix = write_matrix(repo, [path_model(repo, "alpha", onnx_file, chips=CHIPS,
                                            calibration={"path": "samples"})])
    out, cache = repo / "dist", repo / "cache"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(cache)}
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), "-j", "2", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return {"repo": repo, "matrix": matrix, "out": out, "cache": cache, "env": env}


def _bare(ctx: Path, into: Path) -> Path:
    """The binary alone, as a device service runs it: only the EPContext node, whose inputs and outputs (the
    binary's own names and types) are the model's; the .bin beside it."""
    import onnx
    from onnx import helper

    m = onnx.load(str(ctx), load_external_data=False)
    node = next(n for n in m.graph.node if n.op_type == "EPContext")
    types = {v.name: v for v in [*m.graph.input, *m.graph.output, *m.graph.value_info]}
    graph = helper.make_graph([node], "bin", [types[i] for i in node.input if i], [types[o] for o in node.output])
    bare = helper.make_model(graph, opset_imports=list(m.opset_import), ir_version=m.ir_version)
    into.mkdir(parents=True, exist_ok=True)
    for f in ctx.parent.glob("*.bin"):
        if not (into / f.name).exists():
            (into / f.name).symlink_to(f)
    onnx.save(bare, str(into / ctx.name))
    return into / ctx.name


def _check_feed(model_inputs: dict[str, np.dtype], inputs: dict) -> None:
    """A device refuses inputs that are not the binary's (names and dtypes): AI Hub's INVALID_INPUTS."""
    from qai_hub import public_api_pb2 as pb

    if set(inputs) != set(model_inputs):
        raise JobFailure(f"inputs {sorted(inputs)}, the binary takes {sorted(model_inputs)}",
                         pb.JobFailureType.JOB_FAILURE_TYPE_INVALID_INPUTS)
    for name, arrays in inputs.items():
        if any(np.asarray(a).dtype != model_inputs[name] for a in arrays):
            raise JobFailure(f"input {name} is {np.asarray(arrays[0]).dtype}, the binary takes {model_inputs[name]}",
                             pb.JobFailureType.JOB_FAILURE_TYPE_INVALID_INPUTS)


def _phone(built, garbage: bool = False):
    """The stand-in's device: an uploaded context binary runs by itself on the HTP emulator (found by its bytes:
    the binary the build wrote), on the binary's own inputs; an ONNX model on ONNX Runtime's CPU.
    ``garbage``: the NPU returns HTP's -98304."""
    import onnx

    by_sha = {}
    for t in json.loads((built["out"] / "build-report.json").read_text())["targets"]:
        folder = built["out"] / t["id"]
        bare = _bare(folder / t["context_onnx"], built["repo"] / "bare" / t["id"])
        node_in = {i.name: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
                   for i in onnx.load(str(bare)).graph.input}
        by_sha[sha256_file(folder / t["binaries"][0])] = (bare, t["soc"], node_in)
    socs = {"SM8750": (69, 79), "QCS9100": (77, 73), "SM8650": (57, 75)}

    def run(data: bytes, model_type: int, inputs: dict, device: str, options: str) -> dict:
        import hashlib
        import tempfile

        from qai_hub import public_api_pb2 as pb

        if model_type == pb.MODEL_TYPE_ONNX:
            from tests.fakes.fake_aihub import onnx_cpu_runner

            return onnx_cpu_runner(data, model_type, inputs, device, options)
        bare, soc, takes = by_sha[hashlib.sha256(data).hexdigest()]
        _check_feed(takes, inputs)
        with tempfile.TemporaryDirectory() as tmp:  # jobs run side by side: each its own files
            src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
            np.savez(src, **{k: np.stack(v) for k, v in inputs.items()})
            r = subprocess.run([sys.executable, "-c", EMULATE, str(bare), *map(str, socs[soc]), str(src), str(dst)],
                               capture_output=True, text=True, env=built["env"])
            if r.returncode:
                raise JobFailure(f"the binary did not run: {r.stderr.strip().splitlines()[-1:]}")
            got = dict(np.load(dst))
        return {k: [np.full_like(a, -98304.0) if garbage else a for a in v] for k, v in got.items()}

    return run


def _hub(built, **kw) -> FakeAIHub:
    devices = [d for d in DEFAULT_DEVICES if "chipset:sm8650" not in d["attributes"]] + [IQ9075]
    return FakeAIHub(devices=devices, frameworks=FRAMEWORKS, runner=_phone(built, kw.pop("garbage", False)),
                     latency_us=LATENCY, **kw)


def _measure(built, hub, monkeypatch, capsys, *args):
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(built["cache"]))
    monkeypatch.setenv("QAI_HUB_API_TOKEN", hub.token)
    monkeypatch.setenv("QAI_HUB_API_URL", hub.url)
    code = main(["device-numbers", str(built["out"]), "--poll-seconds", "0", *args])
    out = capsys.readouterr()
    return code, out.out + out.err, json.loads((built["out"] / "device-numbers.json").read_text())


def _package(built, *args):
    return run_cli("package", "--matrix", str(built["matrix"]), "--out", str(built["out"]), *args,
                   env={k: v for k, v in built["env"].items() if k != "QNN_SDK_ROOT"})


def _metadata(built, soc: str) -> dict:
    name = next((built["out"] / "release").glob(f"alpha-{soc.lower()}-fp16-*.tar.bz2"))
    with tarfile.open(name) as tf:
        return json.load(tf.extractfile(next(m for m in tf.getmembers() if m.name.endswith("metadata.json"))))


def test_every_chip_with_a_device_gets_its_numbers_and_the_rest_say_why(built, monkeypatch, capsys):
    with _hub(built) as hub:
        code, text, numbers = _measure(built, hub, monkeypatch, capsys)
        jobs = hub.calls("POST", r"jobs/$")
        order = [(q.method, q.path) for q in hub.requests if "/jobs/" in q.path]
    assert code == 0, text
    runs = {k.split(".")[2]: v for k, v in numbers["targets"].items()}
    s25, iq, none = runs["sm8750"], runs["qcs9100"], runs["sm8650"]
    # the device AI Hub picked for the catalog's chipset, checked against the binary's HTP arch and soc_model
    assert s25["status"] == "ok" and s25["device"]["name"] == "Samsung Galaxy S25"
    assert (s25["device"]["hexagon"], s25["device"]["soc_model"]) == ("v79", 69)
    assert iq["status"] == "ok" and iq["device"]["name"] == "Dragonwing IQ-9075 EVK"
    assert iq["device"]["stands_in_for"] == "QCS9075"
    assert none["status"] == "no-device" and "SM8650" in none["reason"] and not none.get("latency")
    # the smallest runtime offered that is at least the binary's QNN (2.51), never an older one
    assert s25["qairt_runtime"].startswith("2.51")
    # the stand-in's numbers, converted from µs: latency median, first/warm load, peak memory, placement
    assert s25["latency"]["median_ms"] == pytest.approx(0.4, abs=0.05) and s25["latency"]["runs"] > 1
    assert iq["latency"]["median_ms"] == pytest.approx(0.9, abs=0.1)
    assert s25["first_load_ms"] and s25["warm_load_ms"] and s25["peak_memory_mb"]
    assert s25["placement"]["npu"] > 0 and s25["placement"]["cpu"] == 0
    # on-device parity on the model's real samples, against ONNX Runtime on CPU
    assert s25["parity"]["passed"] and s25["parity"]["cosine"] > 0.999 and s25["parity"]["samples"] == 3
    assert s25["parity"]["verdict"] == "real-samples" and "calibration.path" in s25["parity"]["inputs"]
    # the same prepared graph on the same phone's CPU: the speedup the seeds' step 0 asks for
    assert s25["cpu"]["latency"]["median_ms"] > s25["latency"]["median_ms"]
    assert s25["speedup_vs_cpu"] == pytest.approx(s25["cpu"]["latency"]["median_ms"] / s25["latency"]["median_ms"],
                                                  rel=0.01)
    assert s25["job_url"] and s25["job_id"]
    assert len(jobs) == 4  # two NPU jobs and one CPU job per device, all submitted before the first poll
    first_poll = next(i for i, (method, path) in enumerate(order) if method == "GET")
    assert all(method == "POST" for method, _ in order[:first_poll]) and first_poll == 4
    assert "2 of 3 targets measured" in text and hub.token not in text
    assert hub.token not in (built["out"] / "device-numbers.json").read_text()
    assert hub.token not in (built["out"] / "logs" / "device-numbers.log").read_text()

    # into the release: metadata.json (validated against the committed schema), manifest, notes, page
    r = _package(built, "--tag", "v1.0.0")
    assert r.returncode == 0, r.stderr
    meta = _metadata(built, "SM8750")
    jsonschema.validate(meta, json.loads(SCHEMA_FILE.read_text()))
    assert meta["metadata_version"] == 3 and meta["numbers"]["main"]["device"]["status"] == "ok"
    assert _metadata(built, "QCS9100")["on_device"]["device"].startswith("Dragonwing IQ-9075 EVK (QCS9075, same")
    assert meta["on_device"]["device"] == "Samsung Galaxy S25" and meta["on_device"]["speedup_vs_cpu"] > 1
    assert _metadata(built, "SM8650")["on_device"]["status"] == "no-device"
    release = built["out"] / "release"
    manifest = json.loads((release / "manifest.json").read_text())
    asset = next(a for a in manifest["assets"] if a.get("soc") == "SM8750")
    assert asset["device"]["latency_ms"] == meta["on_device"]["latency_ms"]
    assert "measured on real devices through Qualcomm AI Hub: 2 of 3" in manifest["device_numbers"]
    notes = (release / "RELEASE_NOTES.md").read_text()
    assert "| alpha | SM8750 | fp16 | Samsung Galaxy S25 | ok |" in notes
    assert "no-device: SM8650: AI Hub has no device that runs QNN for chipset:" in notes
    page = (release / "index.html").read_text()
    assert "Latency on a real device (NPU) per chip, relative to" in page
    assert "HTP emulator latency (x86-64 host" in page
    assert "ms NPU on Samsung Galaxy S25" in page and "ms (emulator)" in page


@pytest.mark.parametrize("fault, status, words", [
    ("bad_token", "unavailable", "refused the token (401)"),
    ("old_client", "unavailable", "too old (426)"),
    ("outage", "unavailable", "AI Hub unavailable"),
    ("rate_limit", "unavailable", "rate-limited"),
    ("job_fails", "failed", "QNN_VERSION_MISMATCH"),
    # a job that never finishes meets the budget, whether it ends while uploading, submitting or waiting
    ("never_finishes", "timeout", "budget"),
])
def test_every_fault_ends_in_a_recorded_one_line_state(built, monkeypatch, capsys, fault, status, words):
    with _hub(built) as hub:
        if fault == "bad_token":
            hub.bad_token = True
        elif fault == "old_client":
            hub.min_client_version = "99"
        elif fault == "outage":
            hub.fail_path(r"frameworks", status=503, count=None)
        elif fault == "rate_limit":
            hub.rate_limit_jobs = 100
        elif fault == "job_fails":
            hub.fail_jobs(reason="runtime 2.51 cannot load this binary", device="Samsung Galaxy S25")
        else:
            hub.hang_jobs(device="Samsung Galaxy S25")
        budget = ("--budget-minutes", "0.02") if fault == "never_finishes" else ()  # (only it waits that long)
        code, text, numbers = _measure(built, hub, monkeypatch, capsys, "--soc", "SM8750", *budget)
    assert code == 0, text  # an outage, a rate limit, a failed or unfinished job never blocks a release
    (run,) = numbers["targets"].values()
    assert run["status"] == status and words in run["reason"] and "\n" not in run["reason"]
    assert "Traceback" not in text and hub.token not in text and hub.token not in json.dumps(numbers)
    assert len([ln for ln in text.splitlines() if ln.strip()]) <= 3


def test_a_device_that_disagrees_with_cpu_fails_the_target_unless_the_matrix_says_record(built, monkeypatch, capsys,
                                                                                         tmp_path):
    with _hub(built, garbage=True) as hub:
        code, text, numbers = _measure(built, hub, monkeypatch, capsys, "--soc", "SM8750")
    assert code == 7 and "disagree with CPU on the device" in text, text
    (run,) = numbers["targets"].values()
    assert run["status"] == "parity-failed" and not run["parity"]["passed"] and run["latency"]
    r = _package(built)
    assert r.returncode == 7 and "alpha.main.sm8750.fp16" in r.stderr and "device_parity: record" in r.stderr
    # the matrix keeps the numbers without failing the target
    text_matrix = built["matrix"].read_text()
    try:
        import yaml

        data = yaml.safe_load(text_matrix)
        data["models"][0]["options"] = {"device_parity": "record"}
        built["matrix"].write_text(yaml.safe_dump(data, sort_keys=False))
        r = _package(built)
        assert r.returncode == 0, r.stderr
        assert _metadata(built, "SM8750")["on_device"]["status"] == "parity-failed"
    finally:
        built["matrix"].write_text(text_matrix)
        (built["out"] / "device-numbers.json").unlink()


def test_no_runtime_at_least_the_build_is_said_so(built, monkeypatch, capsys):
    with _hub(built) as hub:
        hub.frameworks = [f for f in FRAMEWORKS if f["api_version"] == "2.42"]
        code, _, numbers = _measure(built, hub, monkeypatch, capsys, "--soc", "SM8750")
    (run,) = numbers["targets"].values()
    assert code == 0 and run["status"] == "skipped" and "AI Hub offers QAIRT 2.42; none is >= 2.51" in run["reason"]


def test_without_a_token_nothing_is_sent_and_the_release_says_no_device_numbers(built, monkeypatch, capsys,
                                                                                tmp_path):
    monkeypatch.delenv("QAI_HUB_API_TOKEN", raising=False)
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "none.ini"))
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(built["cache"]))
    assert main(["device-numbers", str(built["out"])]) == 0
    numbers = json.loads((built["out"] / "device-numbers.json").read_text())
    assert numbers["note"].startswith("no device numbers: QAI_HUB_API_TOKEN is not set")
    assert {r["status"] for r in numbers["targets"].values()} == {"skipped"}
    (built["out"] / "device-numbers.json").unlink()


# -- a phone on adb -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qairt_built(tmp_path_factory):
    """A qairt-route build (the fake SDK) for SM8750 and SM8650: what a phone on adb runs with qnn-net-run."""
    return _qairt_mlp(tmp_path_factory.mktemp("adbrepo"), chips=["SM8750", "SM8650"])


def _qairt_mlp(repo: Path, **model) -> dict:
    """An MLP with two sample files of its own (calibration.path), built on the qairt route (the fake SDK)."""
    from tests.fakes.fake_qairt import make_fake_sdk

    sdk = make_fake_sdk(repo / "sdk")
    (repo / "models").mkdir()
    (repo / "samples").mkdir()
    rng = np.random.default_rng(9)
    for i in range(2):
        np.savez(repo / "samples" / f"s{i}.npz", x=rng.standard_normal((1, 32)).astype(np.float32))
    f = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(repo, [path_model(repo, "m", f, calibration={"path": "samples"}, **model)])
    env = {**os.environ, "QNN_SDK_ROOT": str(sdk), "QNN_PYTHON": sys.executable,
           "QNN_RELEASE_CACHE": str(repo / "cache")}
    out = repo / "dist"
    r = run_cli("build", "--backend", "qairt", "--matrix", str(matrix), "--out", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return {"repo": repo, "sdk": sdk, "matrix": matrix, "env": env, "out": out}


def _adb_run(qairt_built, monkeypatch, capsys, phones, *args):
    from tests.fakes.fake_adb import make_fake_adb

    adb = make_fake_adb(qairt_built["repo"] / "adb", phones)
    monkeypatch.setenv("ADB", str(adb))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    monkeypatch.setenv("QNN_RELEASE_CACHE", qairt_built["env"]["QNN_RELEASE_CACHE"])
    monkeypatch.setenv("QNN_SDK_ROOT", str(qairt_built["sdk"]))
    code = main(["device-numbers", str(qairt_built["out"]), "--via", "adb", *args])
    out = capsys.readouterr()
    numbers = json.loads((qairt_built["out"] / "device-numbers.json").read_text())
    return code, out.out + out.err, {k.split(".")[2]: v for k, v in numbers["targets"].items()}, numbers


def test_a_phone_on_adb_runs_the_binaries_of_its_chip_and_refuses_the_others(qairt_built, monkeypatch, capsys):
    phone = {"R5CX": {"props": {"ro.soc.model": "SM8750", "ro.product.model": "SM-S931B"}}}
    code, text, runs, numbers = _adb_run(qairt_built, monkeypatch, capsys, phone)
    assert code == 0, text
    mine, other = runs["sm8750"], runs["sm8650"]
    assert numbers["via"] == "adb" and mine["status"] == "ok", mine["reason"]
    assert mine["device"] == {"name": "SM-S931B (adb R5CX)", "os": None, "chipset": "SM8750", "hexagon": "v79",
                              "soc_model": 69, "stands_in_for": None}
    # qnn-profile-viewer's Execute Stats (the fake SDK's FAKE_QNN_EXEC_US default, 1500 µs) and Init Stats
    assert mine["latency"] == {"median_ms": 1.505, "min_ms": 1.5, "max_ms": 1.51, "runs": 2, "statistic": "mean"}
    assert mine["first_load_ms"] == 40.0 and mine["qairt_runtime"] == "2.40.0.251030"
    assert mine["parity"]["passed"] and mine["parity"]["samples"] == 2 and mine["cpu"] is None
    assert other["status"] == "skipped" and "refused" in other["reason"] and "for SM8650" in other["reason"]
    assert not list((qairt_built["repo"] / "adb" / "phones" / "R5CX" / "data" / "local" / "tmp").iterdir())


@pytest.mark.parametrize("phones, args, words", [
    ({}, (), "no phone ready on adb"),
    ({"A": {"state": "unauthorized"}}, (), "A (unauthorized)"),
    ({"A": {"props": {"ro.soc.model": "SM8750"}}, "B": {"props": {"ro.soc.model": "SM8750"}}}, (),
     "2 phones on adb (A, B): pick one with --serial"),
])
def test_adb_faults_are_one_line_and_never_a_traceback(qairt_built, monkeypatch, capsys, phones, args, words):
    code, text, runs, numbers = _adb_run(qairt_built, monkeypatch, capsys, phones, *args)
    assert code == 0 and words in numbers["note"] and "Traceback" not in text
    assert {r["status"] for r in runs.values()} == {"unavailable"}


def test_an_older_runtime_than_the_build_is_refused_and_a_wrong_skel_fails_on_the_phone(qairt_built, monkeypatch,
                                                                                       capsys, tmp_path):
    from tests.fakes.fake_qairt import make_fake_sdk

    phone = {"P": {"props": {"ro.soc.model": "SM8750"}}}
    old = make_fake_sdk(tmp_path / "old", version="2.38.0.250901")
    _, _, runs, _ = _adb_run(qairt_built, monkeypatch, capsys, phone, "--qnn-sdk", str(old), "--soc", "SM8750")
    assert runs["sm8750"]["status"] == "skipped" and "older than QNN 2.40" in runs["sm8750"]["reason"]
    # a Skel of another build beside the right Stub: the phone refuses to load it, said in one line
    sdk = qairt_built["sdk"]
    skel = sdk / "lib" / "hexagon-v79" / "unsigned" / "libQnnHtpV79Skel.so"
    good = skel.read_bytes()
    try:
        skel.write_bytes(good.replace(b"2.40.0.251030", b"2.41.0.251130"))
        _, _, runs, _ = _adb_run(qairt_built, monkeypatch, capsys, phone, "--soc", "SM8750")
        assert runs["sm8750"]["status"] == "failed" and "Stub lib id mismatch" in runs["sm8750"]["reason"]
    finally:
        skel.write_bytes(good)


def test_a_quantized_binary_gets_its_own_inputs_and_its_outputs_are_dequantized_by_the_stub(tmp_path, monkeypatch,
                                                                                           capsys):
    """AI Hub runs the raw .bin: a qairt w8a16 binary takes uint16 in its own names and gives uint16 back; the
    stub's QuantizeLinear and DequantizeLinear convert around it (the phone here refuses anything else)."""
    from ci_tools.compile.backends.qairt import QNN_DTYPES, QairtBackend
    built = _qairt_mlp(tmp_path, chips=["SM8750"], precisions=["w8a16"])
    sdk, env, out = built["sdk"], built["env"], built["out"]
    (target,) = json.loads((out / "build-report.json").read_text())["targets"]
    binary = out / target["id"] / target["binaries"][0]

    def phone(data, model_type, inputs, device, options):  # the .bin itself, by the SDK's qnn-net-run
        from qai_hub import public_api_pb2 as pb

        if model_type == pb.MODEL_TYPE_ONNX:
            from tests.fakes.fake_aihub import onnx_cpu_runner

            return onnx_cpu_runner(data, model_type, inputs, device, options)
        work = tmp_path / f"phone-{len(list(tmp_path.glob('phone-*')))}"
        work.mkdir()
        info = QairtBackend(sdk).binary_info(binary, work)["graphs"][0]["info"]
        takes = {t["info"]["name"]: np.dtype(QNN_DTYPES[t["info"]["dataType"]]) for t in info["graphInputs"]}
        _check_feed(takes, inputs)
        n = len(next(iter(inputs.values())))
        lines = []
        for i in range(n):
            for name, arrays in inputs.items():
                arrays[i].tofile(work / f"{name}{i}.raw")
            lines.append(" ".join(f"{name}:={work / f'{name}{i}.raw'}" for name in inputs))
        (work / "list.txt").write_text("\n".join(lines) + "\n")
        subprocess.run([str(sdk / "bin" / "x86_64-linux-clang" / "qnn-net-run"), "--backend",
                        str(sdk / "lib" / "x86_64-linux-clang" / "libQnnHtp.so"), "--retrieve_context", str(binary),
                        "--input_list", str(work / "list.txt"), "--use_native_input_files",
                        "--use_native_output_files", "--output_dir", str(work / "out")], check=True, env=env)
        return {t["info"]["name"]: [np.fromfile(work / "out" / f"Result_{i}" / f"{t['info']['name']}.raw",
                                                dtype=QNN_DTYPES[t["info"]["dataType"]]).reshape(
                                                    t["info"]["dimensions"]) for i in range(n)]
                for t in info["graphOutputs"]}

    with FakeAIHub(frameworks=FRAMEWORKS[:1] + [{"name": "QAIRT", "api_version": "2.40",
                                                 "full_version": "2.40.0.251030114326_189385", "api_tags": []}],
                   runner=phone) as hub:
        monkeypatch.setenv("QNN_RELEASE_CACHE", env["QNN_RELEASE_CACHE"])
        monkeypatch.setenv("QAI_HUB_API_TOKEN", hub.token)
        monkeypatch.setenv("QAI_HUB_API_URL", hub.url)
        code = main(["device-numbers", str(out), "--poll-seconds", "0"])
        text = capsys.readouterr().out
        uploaded = [hub.dataset_entries(d) for d in hub.datasets]
    run = json.loads((out / "device-numbers.json").read_text())["targets"][target["id"]]
    assert code == 0 and run["status"] == "ok", (text, run["reason"])
    assert run["qairt_runtime"].startswith("2.40") and run["parity"]["passed"]
    assert run["parity"]["cosine"] > 0.99 and run["parity"]["samples"] == 2
    assert any(set(e) == {"x"} and e["x"][0].dtype == np.uint16 for e in uploaded)  # the binary's own input


def test_numbers_of_another_binary_are_left_out_of_the_release(built, monkeypatch, capsys):
    with _hub(built) as hub:
        assert _measure(built, hub, monkeypatch, capsys, "--soc", "SM8750")[0] == 0
    path = built["out"] / "device-numbers.json"
    data = json.loads(path.read_text())
    (tid,) = data["targets"]
    data["targets"][tid]["binary_sha256"] = "0" * 64  # measured before the binary was compiled again
    path.write_text(json.dumps(data))
    try:
        r = _package(built)
        assert r.returncode == 0, r.stderr
        manifest = json.loads((built["out"] / "release" / "manifest.json").read_text())
        assert "1 target(s) measured another binary than this release's: left out" in manifest["device_numbers"]
        assert _metadata(built, "SM8750")["on_device"] is None
    finally:
        path.unlink()


def test_a_stopped_run_still_writes_what_it_measured(built, monkeypatch):
    from ci_tools.device import via_hub
    from ci_tools.device.measure import device_numbers

    def stopped(build, records, settings, env, runs):
        runs[records[0].id] = DeviceRun(via="ai-hub", status="failed", reason="measured before the stop")
        raise KeyboardInterrupt

    monkeypatch.setattr(via_hub, "measure", stopped)
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(built["cache"]))
    with pytest.raises(KeyboardInterrupt):
        device_numbers(built["out"], env={})
    path = built["out"] / "device-numbers.json"
    runs = json.loads(path.read_text())["targets"]
    path.unlink()
    assert sorted(r["reason"] for r in runs.values()) == ["measured before the stop"] + ["not measured: the run "
                                                                                         "was stopped"] * 2
    assert all(len(r["binary_sha256"]) == 64 for r in runs.values())


def test_a_job_without_outputs_keeps_its_timings_and_does_not_block_the_release(built, monkeypatch, capsys):
    phone = _phone(built)

    def mute(data, model_type, inputs, device, options):  # the device ran it, and gave nothing back
        from qai_hub import public_api_pb2 as pb

        return phone(data, model_type, inputs, device, options) if model_type == pb.MODEL_TYPE_ONNX else {}

    with _hub(built) as hub:
        hub.runner = mute
        code, text, numbers = _measure(built, hub, monkeypatch, capsys, "--soc", "SM8750")
    (run,) = numbers["targets"].values()
    (built["out"] / "device-numbers.json").unlink()
    assert code == 0, text
    assert run["status"] == "failed" and run["latency"]["median_ms"] > 0 and run["parity"] is None
    assert "on-device parity not measured" in run["reason"]


def test_the_client_ini_qai_hub_configure_writes_is_taken_too(built, monkeypatch, capsys, tmp_path):
    """Without QAI_HUB_API_TOKEN, the client's own configuration: QAIHUB_CLIENT_INI (api_utils.py:67-82)."""
    with _hub(built) as hub:
        monkeypatch.delenv("QAI_HUB_API_TOKEN", raising=False)
        monkeypatch.delenv("QAI_HUB_API_URL", raising=False)
        monkeypatch.setenv("QAIHUB_CLIENT_INI", str(hub.ini(tmp_path / "client.ini")))
        monkeypatch.setenv("QNN_RELEASE_CACHE", str(built["cache"]))
        code = main(["device-numbers", str(built["out"]), "--soc", "SM8750", "--poll-seconds", "0"])
        text = capsys.readouterr().out
    (run,) = json.loads((built["out"] / "device-numbers.json").read_text())["targets"].values()
    (built["out"] / "device-numbers.json").unlink()
    assert code == 0 and run["status"] == "ok", text
    assert hub.token not in text


@pytest.mark.network
def test_the_demo_vad_on_a_device_is_judged_on_recorded_speech_and_htp_garbage_fails_it(tmp_path, cache_dir,
                                                                                        monkeypatch, capsys):
    """The case that started this: silero-vad's binary giving -98304 for a probability on real speech. The
    device runs the demo's own recordings (CMU ARCTIC, streamed, each step with the state CPU carries); one step
    of HTP garbage fails the target by name, and the release refuses it."""
    out = tmp_path / "dist"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(cache_dir)}
    r = run_cli("build", "--model", "silero-vad", "--soc", "SM8750", "--out", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    built = {"out": out, "repo": tmp_path, "env": env, "cache": cache_dir}
    honest = _phone(built)

    def once_garbage(data, model_type, inputs, device, options):
        got = honest(data, model_type, inputs, device, options)
        if "output" in got:  # the NPU's answer, not the CPU job's
            got["output"][5] = np.full_like(got["output"][5], -98304.0)
        return got

    with _hub(built) as hub:
        code, text, numbers = _measure(built, hub, monkeypatch, capsys)
        hub.runner = once_garbage
        bad_code, bad_text, bad = _measure(built, hub, monkeypatch, capsys)
    (run,) = numbers["targets"].values()
    assert code == 0 and run["status"] == "ok", (text, run["reason"])
    par = run["parity"]
    assert par["verdict"] == "real-samples" and "arctic" in par["inputs"].lower() and par["samples"] > 32
    assert "state CPU carries" in par["inputs"] and par["cosine"] > 0.999
    (run,) = bad["targets"].values()
    assert bad_code == 7 and run["status"] == "parity-failed", bad_text
    assert "arctic_a" in run["reason"] and " step " in run["reason"] and "beyond fp16's" in run["reason"]
    r = run_cli("package", "--out", str(out), env=env)
    assert r.returncode == 7 and "silero-vad.vad.sm8750.fp16" in r.stderr
