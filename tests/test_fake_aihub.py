"""The AI Hub stand-in (tests/fakes/fake_aihub.py) against the REAL client, qai-hub 0.56.0: every call a release step
makes works end to end, and every fault ends in the client's own typed exception or a FAILED job."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import qai_hub.client as qc
import qai_hub.util.session as qsession
from onnx import TensorProto, helper
from qai_hub import public_api_pb2 as pb
from qai_hub import public_rest_api as api
from qai_hub.client import (
    Client,
    Device,
    InternalError,
    JobStatus,
    ModelMetadataKey,
    RateLimitedError,
    SourceModelType,
    UserError,
)

from tests.fakes.fake_aihub import DEFAULT_DEVICES, FakeAIHub, JobFailure
from tests.support.fake_aihub import ELITE


@pytest.fixture(autouse=True)
def _fast_client(monkeypatch):
    """Polls and retries without waiting (the wheel's own test/test_session.py patches MAX_WAIT the same way).

    A power of two keeps the client's ``time_elapsed % _polling_interval == 0`` exact (client.py:2128-2146).
    """
    monkeypatch.setattr(qc.Job, "_polling_interval", 2**-10)
    monkeypatch.setattr(qsession, "BACKOFF_FACTOR", 0)
    monkeypatch.setattr(qsession, "MAX_WAIT", 0)
    monkeypatch.setattr(qsession, "MAX_RETRIES", 2)  # so 1 + 2 tries of a POST, 2 retries of a GET


@pytest.fixture
def hub():
    with FakeAIHub() as h:
        yield h
        assert not h.errors, h.errors[0]


@pytest.fixture
def client(hub):
    return Client(config=hub.config())


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory) -> Path:
    """y = x * 2 + 1 over a (1, 4) float tensor."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t"], name="mul"), helper.make_node("Add", ["t", "one"], ["y"],
                                                                                    name="add")],
        "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
         helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "affine.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture
def bin_path(tmp_path) -> Path:
    path = tmp_path / "affine.serialized.bin"
    path.write_bytes(b"QNN-CONTEXT-BINARY" + bytes(range(256)) * 3)
    return path


X = [np.arange(4, dtype=np.float32).reshape(1, 4), np.full((1, 4), -1.5, dtype=np.float32)]


def cpu_reference(path: Path, xs: list[np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [sess.run(["y"], {"x": x})[0] for x in xs]


def device(client: Client, name: str) -> Device:
    (dev,) = client.get_devices(name=name)
    return dev


# -- what the service offers ---------------------------------------------------------------------------


def test_frameworks(client, hub):
    fws = client.get_frameworks()
    assert [(f.name, f.api_version, f.api_tags) for f in fws] == [
        ("QAIRT", "2.40", []), ("QAIRT", "2.42", ["default"]), ("QAIRT", "2.43", ["latest"])]
    assert fws[0].full_version == "2.40.0.251030114326_189385"
    hub.frameworks = [{"name": "QAIRT", "api_version": "2.45", "full_version": "2.45.0.1", "api_tags": ["default",
                                                                                                       "latest"]}]
    assert [(f.api_version, f.api_tags) for f in client.get_frameworks()] == [("2.45", ["default", "latest"])]


def test_devices_by_chipset_attribute(client, hub):
    (elite,) = client.get_devices(attributes=["chipset:qualcomm-snapdragon-8-elite"])
    assert elite.name == ELITE and "hexagon:v79" in elite.attributes and "soc-model:69" in elite.attributes
    assert [d.name for d in client.get_devices(attributes=["chipset:sm8750"])] == [ELITE]
    assert [d.name for d in client.get_devices(attributes="chipset:sm8750-ac")] == ["Samsung Galaxy S25"]
    s23 = client.get_devices(attributes=["chipset:sm8550", "framework:qnn"])
    assert [d.name for d in s23] == ["Samsung Galaxy S23"]
    assert client.get_devices(attributes=["chipset:qualcomm-qcs9100"]) == []
    assert len(client.get_devices()) == len(DEFAULT_DEVICES)
    assert [d.name for d in client.get_devices(os="[14,16)", attributes="framework:qnn")] == [
        "Samsung Galaxy S24", ELITE, "Samsung Galaxy S25", "SA8775P ADP"]
    # the wire format: GET devices/?name=&os=&select=False&attributes=...
    last = hub.calls("GET", r"/devices/$")[-1]
    assert last.query["attributes"] == ["framework:qnn"] and last.query["select"] == ["False"]
    # server-side selection answers at most one device, the latest OS of a name
    hub.devices.append({**hub.devices[0], "os": "14"})
    assert client._get_device(Device("Samsung Galaxy S23")) == Device("Samsung Galaxy S23", "14",
                                                                      hub.devices[0]["attributes"])
    assert client._get_device(Device(attributes="framework:qnn")) is not None
    assert client._get_device(Device(attributes="chipset:nope")) is None


# -- uploads ----------------------------------------------------------------------------------------------


def test_upload_onnx_in_parts(client, hub, onnx_path):
    hub.max_part_size = 64  # several presigned PUTs, each answering an ETag
    model = client.upload_model(str(onnx_path))
    assert model.model_id.startswith("m") and model.model_type == SourceModelType.ONNX
    stored = hub.models[model.model_id]
    assert stored["data"] == onnx_path.read_bytes() and stored["model_type"] == pb.ModelType.MODEL_TYPE_ONNX
    puts = hub.calls("PUT", r"^/s3/")
    assert len(puts) == -(-onnx_path.stat().st_size // 64) > 1
    assert all("Authorization" not in r.headers for r in puts)  # presigned: no token
    assert hub.calls("POST", rf"/models/{model.model_id}/multipart_upload/$")[0].status == 200
    assert client.get_model(model.model_id).model_type == SourceModelType.ONNX


def test_upload_context_binary_and_read_its_metadata(client, hub, bin_path):
    seen = []

    def metadata(data: bytes, model_type: int) -> dict[int, str]:
        seen.append((data, model_type))
        return {pb.MODEL_METADATA_KEY_QNN_CONTEXT_BIN_HEXAGON_VERSION: "v79",
                pb.MODEL_METADATA_KEY_QNN_CONTEXT_BIN_SOC_MODEL: "69",
                pb.MODEL_METADATA_KEY_QAIRT_SDK_VERSION: "2.40.0.251030114326_189385",
                pb.MODEL_METADATA_KEY_QNN_MODEL_GRAPH_NAMES: "affine"}

    hub.model_metadata = metadata
    model = client.upload_model(str(bin_path), name=bin_path.name)
    assert model.model_type == SourceModelType.QNN_CONTEXT_BINARY and model.name == bin_path.name
    assert model.metadata == {}  # the client builds the uploaded Model locally: metadata needs get_model
    meta = client.get_model(model.model_id).metadata
    assert meta[ModelMetadataKey.QNN_CONTEXT_BIN_HEXAGON_VERSION] == "v79"
    assert meta[ModelMetadataKey.QNN_CONTEXT_BIN_SOC_MODEL] == "69"
    assert meta[ModelMetadataKey.QAIRT_SDK_VERSION].startswith("2.40")
    assert seen == [(bin_path.read_bytes(), pb.ModelType.MODEL_TYPE_QNN_CONTEXT_BINARY)]


def test_upload_directory_model_as_zip(client, hub, onnx_path, tmp_path):
    d = tmp_path / "epctx"
    d.mkdir()
    (d / "model.onnx").write_bytes(onnx_path.read_bytes())
    (d / "model.bin").write_bytes(b"context")
    model = client.upload_model(str(d))
    stored = hub.models[model.model_id]
    assert stored["is_directory"] and stored["model_type"] == pb.ModelType.MODEL_TYPE_ONNX
    with zipfile.ZipFile(io.BytesIO(stored["data"])) as z:
        assert sorted(n for n in z.namelist() if not n.endswith("/")) == ["epctx/model.bin", "epctx/model.onnx"]
    # the default runner finds the .onnx inside the zip
    job = client.submit_inference_job(model, device(client, ELITE), inputs={"x": X[:1]}, retry=False)
    assert job.wait().success
    np.testing.assert_array_equal(job.download_output_data()["y"][0], cpu_reference(onnx_path, X[:1])[0])


def test_upload_dataset_round_trip(client, hub):
    ds = client.upload_dataset({"x": X, "k": [np.array([3], dtype=np.int64), np.array([4], dtype=np.int64)]},
                               name="inputs")
    assert ds.dataset_id.startswith("d") and not ds.is_expired()
    entries = hub.dataset_entries(ds.dataset_id)  # parsed with the client's own converter
    assert list(entries) == ["x", "k"]
    np.testing.assert_array_equal(entries["x"][1], X[1])
    fetched = client.get_dataset(ds.dataset_id)
    assert fetched.name == "inputs" and not fetched.is_expired()
    np.testing.assert_array_equal(fetched.download()["k"][0], [3])


# -- jobs ---------------------------------------------------------------------------------------------------


def test_inference_with_profile_on_cpu_end_to_end(client, hub, onnx_path, tmp_path):
    model = client.upload_model(str(onnx_path))
    ds = client.upload_dataset({"x": X})
    job = client.submit_inference_job(model, device(client, "Samsung Galaxy S23"), inputs=ds,
                                      options="--compute_unit cpu", profile=True, retry=False)
    assert job.job_id.startswith("j") and job.profiling
    status = job.wait()
    assert status.success and status.code == "SUCCESS"
    assert job.shapes == {"x": ((1, 4), "float32")}

    outputs = job.download_output_data()
    assert list(outputs) == ["y"] and len(outputs["y"]) == 2
    for got, want in zip(outputs["y"], cpu_reference(onnx_path, X)):
        np.testing.assert_array_equal(got, want)

    profile = job.download_profile()
    summary = profile["execution_summary"]
    assert summary["estimated_inference_time"] == 5 * 1000  # µs: the default 1000 µs NPU latency x5 on CPU
    assert summary["all_inference_times"] == [5000] * 50  # 100 profiler iterations / 2 batches
    assert summary["inference_memory_peak_range"] == (3 * 2**20, 10 * 2**20)  # bytes
    assert summary["estimated_inference_peak_memory"] == 10 * 2**20
    assert summary["first_load_time"] > summary["warm_load_time"] > 0
    assert summary["compile_memory_peak_range"] is None  # no on-device compile to measure
    assert [(d["name"], d["type"], d["compute_unit"]) for d in profile["execution_detail"]] == [
        ("mul", "Mul", "CPU"), ("add", "Add", "CPU")]
    assert sum(d["execution_time"] for d in profile["execution_detail"]) == 5000

    raw = api.get_job_results(hub.config(), job.job_id).inference_job_result
    assert raw.detail.major_version == 1 and raw.detail.minor_version == 2
    assert {t.name: t.version for t in raw.detail.tool_versions} == {
        "QAIRT": "2.42.0.251225135753_193295", "ONNX Runtime": "1.24.1"}

    logs = job.download_job_logs(str(tmp_path / "logs"))
    assert sorted(Path(p).name for p in logs) == [f"{job.job_id}_device.log", f"{job.job_id}_hub.log"]
    assert "DONE" in Path(logs[0]).read_text()

    # the protocol as the client spoke it
    api_calls = [r for r in hub.requests if r.path.startswith("/api/")]
    assert all(r.path.startswith("/api/v1/") and r.path.endswith("/") for r in api_calls)
    assert all(r.headers["Authorization"] == "token <redacted>" for r in api_calls)
    assert hub.token not in repr(hub.requests)
    assert all(r.status in (200, 204) for r in hub.requests)


def test_states_step_once_per_poll_through_the_clients_own_lists(client, hub, onnx_path):
    model = client.upload_model(str(onnx_path))
    dev = device(client, ELITE)
    for profile, running in ((True, "MEASURING_PERFORMANCE"), (False, "RUNNING_INFERENCE")):
        job = client.submit_inference_job(model, dev, inputs={"x": X}, profile=profile, retry=False)
        seen = [api.get_job(hub.config(), job.job_id).inference_job.job_state for _ in range(5)]
        assert [pb.JobState.Name(s).removeprefix("JOB_STATE_") for s in seen] == [
            "CREATED", "PROVISIONING_DEVICE", running, "DONE", "DONE"]
        # every in-progress state is one the client's progress bar knows (client.py:2895-2906)
        assert all(JobStatus.State(s) in job._in_progress_states for s in seen[:3])


def test_npu_latency_per_device_and_no_inputs(client, hub, onnx_path):
    hub.latency_us = {ELITE: 1200}
    job = client.submit_inference_job(str(onnx_path), device(client, ELITE), inputs=None, profile=True, retry=False,
                                      options="--max_profiler_iterations 10 --qairt_version 2.40")
    summary = job.download_profile()["execution_summary"]
    assert summary["estimated_inference_time"] == 1200 and summary["all_inference_times"] == [1200] * 10
    assert {d["compute_unit"] for d in job.download_profile()["execution_detail"]} == {"NPU"}
    assert job.download_output_data() is None  # no inputs: random data, no output dataset
    tools = api.get_job_results(hub.config(), job.job_id).inference_job_result.detail.tool_versions
    assert tools[0].version.startswith("2.40.")
    other = client.submit_inference_job(str(onnx_path), device(client, "Samsung Galaxy S24"), inputs=None,
                                        profile=True, retry=False)
    assert other.download_profile()["execution_summary"]["estimated_inference_time"] == 1000


def test_custom_runner_for_a_context_binary(client, hub, bin_path):
    calls = []

    def runner(data, model_type, inputs, device_name, options):
        calls.append((data, model_type, device_name, options))
        return {"y": [x * 2 + 1 for x in inputs["x"]]}

    hub.runner = runner
    job = client.submit_inference_job(str(bin_path), device(client, ELITE), inputs={"x": X},
                                      options="--qnn_options context_enable_graphs=affine", retry=False)
    assert job.wait().success
    np.testing.assert_array_equal(job.download_output_data()["y"][1], X[1] * 2 + 1)
    assert calls == [(bin_path.read_bytes(), pb.ModelType.MODEL_TYPE_QNN_CONTEXT_BINARY, ELITE,
                      "--qnn_options context_enable_graphs=affine")]
    tools = api.get_job_results(hub.config(), job.job_id).inference_job_result.detail.tool_versions
    assert [t.name for t in tools] == ["QAIRT"]


def test_context_binary_without_a_runner_fails(client, hub, bin_path):
    job = client.submit_inference_job(str(bin_path), device(client, ELITE), inputs={"x": X}, retry=False)
    status = job.wait()
    assert status.failure and status.message == "no runner for this model type"
    assert api.get_job(hub.config(), job.job_id).failure_type == pb.JOB_FAILURE_TYPE_UNSUPPORTED


def test_runner_raising_job_failure(client, hub, bin_path):
    def runner(*args):
        raise JobFailure("graph 'affine' needs QAIRT 2.43", pb.JOB_FAILURE_TYPE_QNN_VERSION_MISMATCH)

    hub.runner = runner
    job = client.submit_inference_job(str(bin_path), device(client, ELITE), inputs={"x": X}, retry=False)
    assert job.wait().message == "graph 'affine' needs QAIRT 2.43"
    assert api.get_job(hub.config(), job.job_id).failure_type == pb.JOB_FAILURE_TYPE_QNN_VERSION_MISMATCH


def test_unknown_qairt_version_fails_the_job(client, hub, onnx_path):
    job = client.submit_inference_job(str(onnx_path), device(client, ELITE), inputs={"x": X}, retry=False,
                                      options="--qairt_version 2.30")
    assert job.wait().failure and "2.30" in job.get_status().message
    assert api.get_job(hub.config(), job.job_id).failure_type == pb.JOB_FAILURE_TYPE_INVALID_ARGUMENT


def test_bin_needs_a_qnn_device(client, hub, bin_path):
    hub.devices = [{**hub.devices[0], "attributes": [a for a in hub.devices[0]["attributes"] if a != "framework:qnn"]}]
    with pytest.raises(UserError, match="does not support QNN"):
        client.submit_inference_job(str(bin_path), device(client, "Samsung Galaxy S23"), inputs={"x": X}, retry=False)


def test_compile_job_is_refused_with_a_clear_status(client, hub, onnx_path):
    with pytest.raises(ValueError, match="Failed to create compile job: compile_job is not supported"):
        client.submit_compile_job(str(onnx_path), device(client, ELITE), retry=False)


def test_ini_file_for_QAIHUB_CLIENT_INI(hub, tmp_path, monkeypatch):
    path = hub.ini(tmp_path)
    assert path == tmp_path / "client.ini" and hub.token in path.read_text()
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(path))
    c = Client()
    assert c.config.api_url == hub.url and c.verbose is False
    assert [d.name for d in c.get_devices(attributes="chipset:sm8650")] == ["Samsung Galaxy S24"]


# -- faults ----------------------------------------------------------------------------------------------


def test_401_for_a_wrong_token_or_bad_token(client, hub):
    with pytest.raises(UserError, match="Failed to authenticate"):
        Client(config=hub.config(token="not-the-token")).get_devices()
    hub.bad_token = True
    with pytest.raises(UserError, match="Failed to authenticate"):
        client.get_frameworks()
    assert [r.status for r in hub.calls("GET")] == [401, 401]
    assert all(r.headers["Authorization"] == "token <redacted>" for r in hub.requests)
    hub.bad_token = False
    assert client.get_frameworks()


def test_426_client_too_old_on_every_call(client, hub, onnx_path):
    hub.min_client_version = "99.0"
    with pytest.raises(UserError, match="upgrade"):
        client.get_devices()
    with pytest.raises(UserError, match="upgrade"):
        client.upload_model(str(onnx_path))
    assert {r.status for r in hub.requests} == {426}
    hub.min_client_version = "0.56.0"  # this client is new enough
    assert client.get_devices()


def test_429_on_job_creation(client, hub, onnx_path):
    model = client.upload_model(str(onnx_path))
    dev = device(client, ELITE)
    hub.rate_limit_jobs = 3  # as many as the client's 1 + MAX_RETRIES tries
    with pytest.raises(RateLimitedError, match="throttled"):
        client.submit_inference_job(model, dev, inputs={"x": X}, retry=False)
    assert [r.status for r in hub.calls("POST", r"/jobs/$")] == [429, 429, 429]
    hub.rate_limit_jobs = 2  # fewer: the client's backoff gets through
    job = client.submit_inference_job(model, dev, inputs={"x": X}, retry=False)
    assert job.wait().success
    assert [r.status for r in hub.calls("POST", r"/jobs/$")][3:] == [429, 429, 200]


def test_5xx_on_a_path(client, hub, onnx_path):
    hub.fail_path(r"/api/v1/devices/", 500, count=None)
    with pytest.raises(InternalError, match="reported errors"):
        client.get_devices()
    assert len(hub.calls("GET", r"/devices/")) == 3  # urllib3 retried the GET twice
    hub.clear_faults()
    hub.fail_path(r"/api/v1/models/$", 503, count=None, method="POST")
    with pytest.raises(InternalError, match="unavailable"):
        client.upload_model(str(onnx_path))
    hub.clear_faults()
    hub.fail_path(r"/api/v1/frameworks/", 502, count=1)  # a transient one is retried away
    assert client.get_frameworks()


def test_job_fails_with_a_failure_type_for_a_device(client, hub, onnx_path):
    reason = "The model was built with QAIRT 2.43, newer than this device's 2.42."
    hub.fail_jobs(pb.JOB_FAILURE_TYPE_QNN_VERSION_MISMATCH, reason, device="Samsung Galaxy S24")
    model = client.upload_model(str(onnx_path))
    bad = client.submit_inference_job(model, device(client, "Samsung Galaxy S24"), inputs={"x": X}, retry=False)
    good = client.submit_inference_job(model, device(client, ELITE), inputs={"x": X}, retry=False)
    status = bad.wait()
    assert status.failure and status.message == reason
    assert bad.download_output_data() is None and bad.download_profile() == {}
    raw = api.get_job(hub.config(), bad.job_id)
    assert raw.failure_type == 13050 and raw.inference_job.failure_reason == reason
    assert good.wait().success
    hub.clear_faults()
    hub.fail_jobs(pb.JOB_FAILURE_TYPE_DSP_VERSION_MISMATCH, model=model.model_id)
    status = client.submit_inference_job(model, device(client, ELITE), inputs={"x": X}, retry=False).wait()
    assert status.failure and status.message == "JOB_FAILURE_TYPE_DSP_VERSION_MISMATCH"


def test_job_that_never_finishes(client, hub, onnx_path):
    hub.hang_jobs(device=ELITE)
    job = client.submit_inference_job(str(onnx_path), device(client, ELITE), inputs={"x": X}, profile=False,
                                      retry=False)
    with pytest.raises(TimeoutError):
        job.wait(timeout=2**-6)  # counted in polls by the client, not measured
    raw = api.get_job(hub.config(), job.job_id).inference_job
    assert raw.job_state == pb.JOB_STATE_RUNNING_INFERENCE
    hub.clear_faults()
    assert job.wait().success
