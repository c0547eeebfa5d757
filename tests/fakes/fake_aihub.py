"""A local HTTP server standing in for Qualcomm AI Hub Workbench's REST API, as the real client ``qai-hub==0.56.0``
(``qai_hub.client.Client``) uses it: devices, QAIRT versions, model and dataset uploads, inference/profile jobs,
their results, outputs and logs.

Every body is one of the client's own protobuf messages (``qai_hub.public_api_pb2``), so the wire format is the
pinned client's by construction. Rule by rule, with the client code each one follows (``qai_hub/<file>:<lines>``):

- URLs are ``<api_url>/api/v1/<path>/``, always with a trailing slash (``api_utils.py:228-229``); a path under
  ``projects/<p>/`` is the same resource (``public_rest_api.py:213-216, 834-837, 1222-1225``).
- A success carries ``Content-Type: application/x-protobuf`` exactly, or the client refuses it
  (``api_utils.py:85-95``). Errors are JSON ``{"detail": ...}``: the client reads ``detail`` for its message
  (``client.py:368-374``).
- Every API call must carry ``Authorization: token <T>`` (``api_utils.py:218-225``); otherwise, or with
  ``bad_token`` set, 401, which the client turns into ``UserError`` (``client.py:386-390``).
- ``min_client_version``: a ``Client-Version`` header (``util/session.py:278-283``) older than it gets 426, which
  becomes ``UserError`` (``public_rest_api.py:106-107``, ``client.py:398-399``).
- ``rate_limit_jobs = N``: the next N ``POST jobs/`` answer 429. The POST is retried 1+``MAX_RETRIES`` times by
  ``retry_call_with_backoff`` (``public_rest_api.py:414-420``, ``util/session.py:81-130``), then it is
  ``RateLimitedError`` (``client.py:400-401``).
- ``fail_path(pattern, status)``: answers ``status`` on matching paths. A GET is retried inside urllib3 for
  429/500/502/503/504 (``util/session.py:51-57, 133-172, 284-290``) and then raises ``RetryError``; a POST/PATCH
  is retried by ``backoff`` and then raises ``APIException``; both become ``InternalError``
  (``client.py:3187-3260``).
- ``GET devices/?name=&os=&select=&attributes=a&attributes=b`` (``public_rest_api.py:138-184``): ``name`` exact,
  ``os`` a version or a right-open interval ``[a,b)`` (``client.py:697-705, 3438-3462``), every attribute required;
  ``select=True`` answers at most one device, the latest OS when ``os`` is empty (``client.py:697-705,
  3525-3528``). ``DeviceList{Device{name, os, attributes, soc_description}}``.
- ``GET frameworks/`` answers ``FrameworkList{Framework{name, api_version, api_tags, full_version}}``
  (``public_rest_api.py:2076-2100``, ``client.py:3558-3585``).
- Models: ``POST models/`` with ``Model{name, model_type, is_directory}`` answers ``CreateUpdateResponse{id}``
  with an empty ``status`` (``public_rest_api.py:804-849, 1111-1112``). ``GET models/<id>/multipart_upload/
  ?file_size=`` answers ``FileUploadResponse.multipart_url{urls, upload_id, max_part_size}``, never
  ``credentials`` (so boto3 is never used: ``public_rest_api.py:1007-1045, 1783-1803``); each part is a ``PUT`` to
  its presigned URL, without the token, whose answer must carry an ``ETag`` (``api_utils.py:558-633, 686-690``,
  ``public_rest_api.py:1811-1845``); ``POST models/<id>/multipart_upload/`` with
  ``FileMultipartUploadComplete{upload_id, etags}`` finishes it (``public_rest_api.py:953-1004``). A directory is
  zipped by the client and uploaded with ``is_directory`` (``client.py:3658-3667``). ``GET models/<id>/`` answers
  the ``Model`` with ``metadata`` (``public_rest_api.py:1530-1554``, ``client.py:3124-3132``), made by the
  ``model_metadata`` callable, keyed by ``ModelMetadataKey`` values (``client.py:836-869``).
- Datasets: ``POST datasets/`` (``public_rest_api.py:1185-1236``); ``GET datasets/<id>/upload_url/`` answers
  ``FileUploadResponse.url{url, file_field_name, fields}``; the file goes in a multipart-form ``POST`` to that URL
  (an S3 presigned POST: ``api_utils.py:594-614``); ``PATCH datasets/<id>/`` with ``Dataset{file_upload_complete}``
  ends it (``public_rest_api.py:1288-1327, 1366-1465``). Datasets expire 30 days on (``client.py:3858``): an expired
  one cannot be downloaded (``client.py:551-552, 610-611``). ``GET datasets/<id>/`` (``:1468-1492``),
  ``GET datasets/<id>/download_data/`` answers ``FileDownloadResponse.url{url, filename}`` and the file is a plain
  ``GET`` (``public_rest_api.py:2012-2073``, ``api_utils.py:476-539``). The h5 layout is read and written with the
  client's own converters (``util/dataset_entries_converters.py:21-118``).
- Jobs: ``POST jobs/`` with ``Job{inference_job{model, name, device, options, is_profiling_on, dataset?}}``
  (``client.py:5063-5078``) answers ``CreateUpdateResponse{id, creation_time}`` (``public_rest_api.py:380-426``);
  the old ``profile_job`` is taken as a profiling one; any other kind (compile, quantize, link) is refused with an
  empty ``id`` and a ``status`` saying why, which the client raises as ``ValueError``
  (``public_rest_api.py:232-233``). ``GET jobs/<id>/`` (``:429-455``) moves
  the job one state per poll through the client's own in-progress lists (``client.py:2895-2906``): with profiling
  CREATED -> PROVISIONING_DEVICE -> MEASURING_PERFORMANCE, without it CREATED -> PROVISIONING_DEVICE ->
  RUNNING_INFERENCE, then DONE or FAILED (``failure_reason`` in the job, ``failure_type`` at the top: only the raw
  ``public_rest_api.get_job`` shows it, ``client.py:2158-2177``). A state outside those lists would crash the
  client's verbose progress bar (``client.py:2103``).
- ``GET jobs/<id>/result/`` (``public_rest_api.py:633-659``) answers ``JobResult.inference_job_result
  {output_dataset_id, detail}``; with no input dataset there is no output dataset (``client.py:2939-2945``).
  ``detail`` is a ``ProfileDetail`` with ``major_version=1, minor_version=2`` so that every ``execution_summary``
  field the client maps is filled (``client.py:98-189``): times in µs, memory in bytes (``client.py:1660-1669``),
  ``layer_details`` with compute units, and ``tool_versions`` (QAIRT; ONNX Runtime for an ONNX model).
- ``GET jobs/<id>/device_runs/latest/artifact_list/<type>/`` answers ``NamedArtifactDownloadURLList`` for the
  types in the job's ``available_artifacts`` (DEVICE_LOG, HUB_LOG: ``public_rest_api.py:2154-2172``,
  ``client.py:2248-2323``).
- Presigned URLs are served by this same server under ``/s3/`` and checked by an HMAC signature instead of the
  token, as S3's are; they answer within the client's 4 s read timeout for them (``util/session.py:45,
  295-307``).

What a job computes: ``runner(model_bytes, model_type, inputs, device_name, options) -> outputs``, with
``dict[str, list[np.ndarray]]`` inputs and outputs (an empty dict when the job has no dataset; for a directory model
the bytes are the zip). The default runs an ONNX model on onnxruntime's CPUExecutionProvider and fails any other
type with "no runner for this model type". A runner may raise ``JobFailure(reason, failure_type)``.

Profile numbers are deterministic: ``latency_us[device]`` (else ``default_latency_us``), ``--compute_unit cpu``
gives CPU layers and ``cpu_latency_us[device]`` (else ``cpu_factor`` times the latency); ``--max_profiler_iterations
N`` (default 100) divided by the number of batches gives the inference times' count (``client.py:4977-4979``).
``--qairt_version`` picks a listed framework by api_version, full version or tag; an unlisted one fails the job
with INVALID_ARGUMENT (the fake's choice: the client does not say what the service does).

Default devices follow ai-hub.md section 4 (chipset aliases: ai-hub-models v0.47.0) with ``hexagon:``/
``soc-model:`` from matrix/socs.yaml (the same values as chips.md); "Samsung Galaxy S25" is added because
socs.yaml gives SM8750 the AI Hub chipset ``qualcomm-snapdragon-8-elite-for-galaxy`` (``sm8750-ac``). OS versions
and ``soc_description`` strings are illustrative.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import math
import re
import secrets
import shlex
import tempfile
import threading
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import h5py
import numpy as np
from google.protobuf.timestamp_pb2 import Timestamp
from packaging.version import InvalidVersion, Version
from qai_hub import api_utils
from qai_hub import public_api_pb2 as pb
from qai_hub.public_rest_api import ClientConfig
from qai_hub.util.dataset_entries_converters import dataset_entries_to_h5, h5_to_dataset_entries

from tests.fakes.local_server import LocalServer

Entries = dict[str, list[np.ndarray]]
Runner = Callable[[bytes, int, Entries, str, str], Entries]

S = pb.JobState
F = pb.JobFailureType
CU = pb.ComputeUnit
DATASET_LIFETIME_S = 30 * 24 * 3600


def _device(name: str, os: str, chipsets: list[str], hexagon: int, soc_model: int, soc: str, **attrs: str) -> dict:
    attributes = [f"chipset:{c}" for c in chipsets] + [
        f"hexagon:v{hexagon}", f"soc-model:{soc_model}", "htp-supports-fp16:true",
        "framework:qnn", "framework:onnx", "framework:tflite", "os:android", "abi:arm64-v8a"]
    attributes += [f"{k}:{v}" for k, v in attrs.items()]
    return {"name": name, "os": os, "attributes": attributes, "soc_description": soc}


DEFAULT_DEVICES: list[dict] = [
    _device("Samsung Galaxy S23", "13", ["qualcomm-snapdragon-8gen2", "sm8550"], 73, 43,
            "Qualcomm® Snapdragon™ 8 Gen 2 | SM8550", format="phone", vendor="samsung"),
    _device("Samsung Galaxy S24", "14", ["qualcomm-snapdragon-8gen3", "sm8650"], 75, 57,
            "Qualcomm® Snapdragon™ 8 Gen 3 | SM8650", format="phone", vendor="samsung"),
    _device("Snapdragon 8 Elite QRD", "15", ["qualcomm-snapdragon-8-elite", "sm8750"], 79, 69,
            "Qualcomm® Snapdragon™ 8 Elite | SM8750", format="phone", vendor="qualcomm"),
    _device("Samsung Galaxy S25", "15", ["qualcomm-snapdragon-8-elite-for-galaxy", "sm8750-ac"], 79, 69,
            "Qualcomm® Snapdragon™ 8 Elite for Galaxy | SM8750-AC", format="phone", vendor="samsung"),
    _device("Snapdragon 8 Elite Gen 5 QRD", "16", ["qualcomm-snapdragon-8-elite-gen5", "sm8850"], 81, 87,
            "Qualcomm® Snapdragon™ 8 Elite Gen 5 | SM8850", format="phone", vendor="qualcomm"),
    _device("SA8775P ADP", "14", ["qualcomm-sa8775p"], 73, 52,
            "Qualcomm® SA8775P", format="auto", vendor="qualcomm"),
]

# QAIRT builds as ai-hub-models recorded them in perf.yaml (ai-hub.md section 5)
DEFAULT_FRAMEWORKS: list[dict] = [
    {"name": "QAIRT", "api_version": "2.40", "full_version": "2.40.0.251030114326_189385", "api_tags": []},
    {"name": "QAIRT", "api_version": "2.42", "full_version": "2.42.0.251225135753_193295", "api_tags": ["default"]},
    {"name": "QAIRT", "api_version": "2.43", "full_version": "2.43.0.260127150333_193827", "api_tags": ["latest"]},
]

RUNNING_STATES: dict[bool, list[int]] = {  # keyed by is_profiling_on: client.py:2895-2906
    True: [S.JOB_STATE_CREATED, S.JOB_STATE_PROVISIONING_DEVICE, S.JOB_STATE_MEASURING_PERFORMANCE],
    False: [S.JOB_STATE_CREATED, S.JOB_STATE_PROVISIONING_DEVICE, S.JOB_STATE_RUNNING_INFERENCE],
}


class JobFailure(Exception):
    """Raised by a runner: the job FAILS with this reason and ``failure_type`` (a ``JobFailureType`` value)."""

    def __init__(self, reason: str, failure_type: int = F.JOB_FAILURE_TYPE_RUNTIME_UNKNOWN):
        super().__init__(reason)
        self.reason, self.failure_type = reason, failure_type


_ORT_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
               "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
               "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
               "tensor(bool)": np.bool_}


def _onnx_file(data: bytes, tmp: str) -> str:
    """The path of the ONNX model in ``data``: a plain .onnx, or the .onnx inside a directory model's zip."""
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            z.extractall(tmp)
        found = sorted(Path(tmp).rglob("*.onnx"))
        if len(found) != 1:
            raise JobFailure("a directory model must hold exactly one .onnx", F.JOB_FAILURE_TYPE_MODEL_INVALID)
        return str(found[0])
    path = Path(tmp) / "model.onnx"
    path.write_bytes(data)
    return str(path)


def onnx_cpu_runner(model: bytes, model_type: int, inputs: Entries, device: str, options: str) -> Entries:
    """The default runner: an ONNX model on onnxruntime's CPUExecutionProvider, every entry of the dataset."""
    if model_type != pb.ModelType.MODEL_TYPE_ONNX:
        raise JobFailure("no runner for this model type", F.JOB_FAILURE_TYPE_UNSUPPORTED)
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        try:
            sess = ort.InferenceSession(_onnx_file(model, tmp), providers=["CPUExecutionProvider"])
        except JobFailure:
            raise
        except Exception as e:
            raise JobFailure(f"the model could not be loaded: {e}", F.JOB_FAILURE_TYPE_MODEL_INVALID) from None
        if not inputs:  # a job without a dataset runs on random data (client.py:5060-5061)
            inputs = {i.name: [np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in i.shape],
                                        dtype=_ORT_DTYPES.get(i.type, np.float32))] for i in sess.get_inputs()}
        names = [o.name for o in sess.get_outputs()]
        n = len(next(iter(inputs.values())))
        outputs: Entries = {name: [] for name in names}
        for k in range(n):
            try:
                result = sess.run(names, {name: arrays[k] for name, arrays in inputs.items()})
            except Exception as e:
                raise JobFailure(f"inference failed: {e}", F.JOB_FAILURE_TYPE_INVALID_INPUTS) from None
            for name, value in zip(names, result):
                outputs[name].append(np.asarray(value))
        return outputs


def _layers(data: bytes, model_type: int) -> list[tuple[str, str]]:
    """(name, type) of the layers a profile lists: an ONNX model's nodes, else one graph."""
    if model_type == pb.ModelType.MODEL_TYPE_ONNX:
        try:
            import onnx

            with tempfile.TemporaryDirectory() as tmp:
                proto = onnx.load(_onnx_file(data, tmp), load_external_data=False)
            nodes = [(n.name or f"{n.op_type}_{i}", n.op_type) for i, n in enumerate(proto.graph.node)]
            if nodes:
                return nodes
        except Exception:  # a model the profile cannot read keeps the one-graph listing
            pass
    return [("graph", "Graph")]


@dataclass
class Recorded:
    """One request as the fake saw it; ``headers`` has the token's value replaced by ``<redacted>``."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body_size: int
    status: int = 0


@dataclass
class _Job:
    id: str
    model_id: str
    device: dict
    dataset_id: str | None
    name: str
    options: str
    profiling: bool
    created: Timestamp
    polls: int = 0
    state: int = S.JOB_STATE_CREATED
    failure_reason: str | None = None
    failure_type: int = F.JOB_FAILURE_TYPE_UNSPECIFIED
    result: pb.InferenceJobResult | None = None
    tensor_types: list[pb.NamedTensorType] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    outcome: dict = field(default_factory=dict)  # filled by the runner thread
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _now(offset_s: int = 0) -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    ts.seconds += offset_s
    return ts


def _os_matches(want: str, have: str) -> bool:
    if not want:
        return True
    m = re.fullmatch(r"\[([^,]*),([^)]*)\)", want)
    try:
        if m:
            v = Version(have)
            return (not m[1] or v >= Version(m[1])) and (not m[2] or v < Version(m[2]))
        return Version(want) == Version(have)
    except InvalidVersion:
        return want == have


def _os_key(os: str):
    try:
        return (1, Version(os))
    except InvalidVersion:
        return (0, Version("0"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeAIHub/1"

    def log_message(self, *args):  # keep test output clean
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _handle(self):
        hub: FakeAIHub = self.server.state  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        body = self._body()
        rec = hub._record(self.command, url.path, parse_qs(url.query, keep_blank_values=True), self.headers,
                          len(body))
        try:
            status, headers, data = hub._dispatch(self.command, url.path, rec.query, self.headers, body)
        except Exception:  # a bug in the fake: say so loudly rather than hang the client
            hub.errors.append(traceback.format_exc())
            status, headers, data = 500, {"Content-Type": "application/json"}, b'{"detail": "fake crashed"}'
        rec.status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if status != 204:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if status != 204 and self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


class FakeAIHub(LocalServer):
    """AI Hub Workbench on 127.0.0.1 (see the module docstring). Use ``with FakeAIHub() as hub:``."""

    def __init__(self, token: str | None = None, devices: list[dict] | None = None,
                 frameworks: list[dict] | None = None, runner: Runner | None = None,
                 model_metadata: Callable[[bytes, int], dict[int, str]] | None = None,
                 latency_us: dict[str, int] | None = None, default_latency_us: int = 1000,
                 cpu_latency_us: dict[str, int] | None = None, cpu_factor: float = 5.0,
                 max_part_size: int = 5 * 2**20, onnx_runtime_version: str = "1.24.1"):
        self.token = token or "aihub_" + secrets.token_hex(20)
        self.devices = [dict(d) for d in (DEFAULT_DEVICES if devices is None else devices)]
        self.frameworks = [dict(f) for f in (DEFAULT_FRAMEWORKS if frameworks is None else frameworks)]
        self.runner: Runner = runner or onnx_cpu_runner
        self.model_metadata = model_metadata or (lambda data, model_type: {})
        self.latency_us = dict(latency_us or {})
        self.default_latency_us = default_latency_us
        self.cpu_latency_us = dict(cpu_latency_us or {})
        self.cpu_factor = cpu_factor
        self.latency_spread_us = 0  # > 0: all_inference_times spread deterministically by +-spread around it
        self.load_times_us = {"first_load": 150_000, "warm_load": 40_000, "compile": 0}
        self.memory_bytes = {  # (lower, upper) peak ranges per stage
            "inference": (3 * 2**20, 10 * 2**20), "first_load": (12 * 2**20, 24 * 2**20),
            "warm_load": (4 * 2**20, 14 * 2**20), "compile": (0, 0)}
        self.max_part_size = max_part_size
        self.onnx_runtime_version = onnx_runtime_version
        self.running_states = {k: list(v) for k, v in RUNNING_STATES.items()}
        self.runner_wait_s = 20.0  # a poll waits this long for a slow runner before reporting "still running"
        # -- faults, changeable at any time
        self.bad_token = False
        self.min_client_version: str | None = None
        self.rate_limit_jobs = 0
        self.path_faults: list[dict] = []
        self.job_rules: list[dict] = []
        # -- what happened
        self.requests: list[Recorded] = []
        self.errors: list[str] = []  # tracebacks of the fake's own bugs
        self.models: dict[str, dict] = {}
        self.datasets: dict[str, dict] = {}
        self.jobs: dict[str, _Job] = {}
        self.objects: dict[str, bytes] = {}  # the "bucket"
        self._parts: dict[tuple[str, int], bytes] = {}
        self._secret = secrets.token_bytes(16)
        self._lock = threading.RLock()
        self._counter = 0
        super().__init__(Handler, self)
        # stop within 50 ms of ``with`` ending (serve_forever's default poll is 0.5 s)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __repr__(self) -> str:  # never shows the token
        return f"FakeAIHub({self.url})"

    # -- for tests -----------------------------------------------------------------------------------

    def config(self, token: str | None = None) -> ClientConfig:
        """A ``qai_hub.client.ClientConfig`` for this server (``Client(config=hub.config())``)."""
        return ClientConfig(api_token=self.token if token is None else token, api_url=self.url, web_url=self.url,
                            verbose=False)

    def ini(self, path: str | Path, token: str | None = None) -> Path:
        """Write a client ini ([api] api_token, api_url, web_url; api_utils.py:139-187) for QAIHUB_CLIENT_INI.

        ``verbose = false`` too: without it the client is verbose and ``wait`` sleeps 1 s a poll (client.py:2128).
        """
        path = Path(path)
        if path.is_dir():
            path = path / "client.ini"
        path.write_text(f"[api]\napi_token = {self.token if token is None else token}\napi_url = {self.url}\n"
                        f"web_url = {self.url}\nverbose = false\n")
        return path

    def calls(self, method: str | None = None, pattern: str | None = None) -> list[Recorded]:
        """Recorded requests, optionally of one method and whose path matches a regex."""
        with self._lock:
            return [r for r in self.requests if (method is None or r.method == method)
                    and (pattern is None or re.search(pattern, r.path))]

    def fail_path(self, pattern: str, status: int = 500, count: int | None = 1, method: str | None = None) -> None:
        """The next ``count`` requests (None: all) whose path matches ``pattern`` answer ``status``."""
        with self._lock:
            self.path_faults.append({"pattern": pattern, "status": status, "count": count, "method": method})

    def fail_jobs(self, failure_type: int = F.JOB_FAILURE_TYPE_QNN_VERSION_MISMATCH, reason: str = "",
                  device: str | None = None, model: str | None = None) -> None:
        """Jobs on ``device`` (name) / of ``model`` (id or name), None = any, end FAILED with this type and reason."""
        with self._lock:
            self.job_rules.append({"action": "fail", "device": device, "model": model, "failure_type": failure_type,
                                   "reason": reason or F.Name(failure_type)})

    def hang_jobs(self, device: str | None = None, model: str | None = None) -> None:
        """Matching jobs never finish: they stay in their last running state until the rule is removed."""
        with self._lock:
            self.job_rules.append({"action": "hang", "device": device, "model": model})

    def clear_faults(self) -> None:
        with self._lock:
            self.bad_token, self.min_client_version, self.rate_limit_jobs = False, None, 0
            self.path_faults.clear()
            self.job_rules.clear()

    # -- plumbing --------------------------------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            n, chars = self._counter, ""
            for _ in range(8):
                n, r = divmod(n, 36)
                chars = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + chars
            return prefix + chars

    def _record(self, method, path, query, headers, size) -> Recorded:
        hdrs = {}
        for k, v in headers.items():
            if k.lower() == "authorization":
                v = "token <redacted>" if v.startswith("token ") else "<redacted>"
            hdrs[k] = v
        rec = Recorded(method, path, query, hdrs, size)
        with self._lock:
            self.requests.append(rec)
        return rec

    def _sign(self, *parts: str) -> str:
        return hmac.new(self._secret, "\n".join(parts).encode(), hashlib.sha256).hexdigest()

    def _presigned(self, method: str, key: str, **params: str) -> str:
        query = "&".join(f"{k}={quote(v)}" for k, v in params.items())
        sig = self._sign(method, key, query)
        return f"{self.url}/s3/{quote(key)}?{query + '&' if query else ''}X-Amz-Signature={sig}"

    @staticmethod
    def _pb(msg, status: int = 200):
        return status, {"Content-Type": "application/x-protobuf"}, msg.SerializeToString()

    @staticmethod
    def _detail(status: int, text: str):
        return status, {"Content-Type": "application/json"}, json.dumps({"detail": text}).encode()

    @staticmethod
    def _s3_error(status: int, code: str, message: str):
        xml = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        return status, {"Content-Type": "application/xml"}, xml.encode()

    def _path_fault(self, method: str, path: str) -> int | None:
        with self._lock:
            for f in self.path_faults:
                if (f["count"] is None or f["count"] > 0) and (f["method"] in (None, method)) \
                        and re.search(f["pattern"], path):
                    if f["count"] is not None:
                        f["count"] -= 1
                    return f["status"]
        return None

    def _dispatch(self, method: str, path: str, query: dict, headers, body: bytes):
        status = self._path_fault(method, path)
        if status is not None:
            return self._detail(status, "A server error occurred.") if path.startswith("/api/") else \
                self._s3_error(status, "InternalError", "We encountered an internal error. Please try again.")
        if path.startswith("/s3/"):
            return self._s3(method, path[len("/s3/"):], query, headers, body)
        if not path.startswith("/api/v1/"):
            return self._detail(404, "Not found.")
        if self.min_client_version:
            try:
                old = Version(headers.get("Client-Version", "0")) < Version(self.min_client_version)
            except InvalidVersion:
                old = True
            if old:
                return self._detail(426, "This version of the Hub client is no longer supported. Please upgrade by "
                                         "running 'pip install --upgrade qai-hub'.")
        auth = headers.get("Authorization", "")
        if not auth:
            return self._detail(401, "Authentication credentials were not provided.")
        if self.bad_token or not hmac.compare_digest(auth.encode(), f"token {self.token}".encode()):
            return self._detail(401, "Invalid token.")
        rel = re.sub(r"^projects/[^/]+/", "", path[len("/api/v1/"):])
        if method == "POST" and rel == "jobs/":
            with self._lock:
                if self.rate_limit_jobs > 0:
                    self.rate_limit_jobs -= 1
                    return self._detail(429, "Request was throttled. Expected available in 20 seconds.")
        for verb, pattern, fn in self._routes():
            m = re.fullmatch(pattern, rel)
            if m and verb == method:
                if fn == self._get_job:  # takes its own locks: it may wait for a runner
                    return fn(*m.groups(), query=query, body=body)
                with self._lock:
                    return fn(*m.groups(), query=query, body=body)
        if any(re.fullmatch(p, rel) for _, p, _ in self._routes()):
            return self._detail(405, f'Method "{method}" not allowed.')
        return self._detail(404, "Not found.")

    def _routes(self):
        i = "([^/]+)"
        return [
            ("GET", "devices/", self._get_devices),
            ("GET", "frameworks/", self._get_frameworks),
            ("POST", "models/", self._create_model),
            ("GET", f"models/{i}/", self._get_model),
            ("GET", f"models/{i}/multipart_upload/", self._model_upload_urls),
            ("POST", f"models/{i}/multipart_upload/", self._model_upload_complete),
            ("GET", f"models/{i}/download/", self._model_download),
            ("POST", "datasets/", self._create_dataset),
            ("GET", f"datasets/{i}/", self._get_dataset),
            ("PATCH", f"datasets/{i}/", self._dataset_upload_complete),
            ("GET", f"datasets/{i}/upload_url/", self._dataset_upload_url),
            ("GET", f"datasets/{i}/download_data/", self._dataset_download),
            ("POST", "jobs/", self._create_job),
            ("GET", f"jobs/{i}/", self._get_job),
            ("PATCH", f"jobs/{i}/", self._rename_job),
            ("GET", f"jobs/{i}/result/", self._get_result),
            ("GET", f"jobs/{i}/device_runs/{i}/artifact_list/(\\d+)/", self._artifacts),
        ]

    # -- presigned "S3" -------------------------------------------------------------------------------

    def _s3(self, method: str, key: str, query: dict, headers, body: bytes):
        key, query = unquote(key), dict(query)
        sig = query.pop("X-Amz-Signature", [""])[0]
        params = "&".join(f"{k}={quote(v[0])}" for k, v in query.items())
        if method == "POST" and key == "":  # presigned POST form: the signature is a form field
            form = _multipart(body, headers.get("Content-Type", ""))
            fkey = form.get("key", b"").decode()
            if not hmac.compare_digest(form.get("x-amz-signature", b"").decode(), self._sign("POST", fkey, "")):
                return self._s3_error(403, "AccessDenied", "Invalid according to Policy")
            if "file" not in form:
                return self._s3_error(400, "InvalidArgument", "POST requires exactly one file upload per request.")
            with self._lock:
                self.objects[fkey] = form["file"]
            return 204, {"ETag": f'"{hashlib.md5(form["file"]).hexdigest()}"'}, b""
        if not hmac.compare_digest(sig, self._sign(method, key, params)):
            return self._s3_error(403, "SignatureDoesNotMatch", "The request signature we calculated does not match.")
        if method == "PUT":
            with self._lock:
                self._parts[(query["uploadId"][0], int(query["partNumber"][0]))] = body
            return 200, {"ETag": f'"{hashlib.md5(body).hexdigest()}"'}, b""
        if method == "GET":
            with self._lock:
                data = self.objects.get(key)
            if data is None:
                return self._s3_error(404, "NoSuchKey", "The specified key does not exist.")
            return 200, {"Content-Type": "application/octet-stream"}, data
        return self._s3_error(405, "MethodNotAllowed", "The specified method is not allowed.")

    # -- devices and frameworks -------------------------------------------------------------------------

    def select_devices(self, name: str = "", os: str = "", attributes: list[str] | None = None,
                       select: bool = False) -> list[dict]:
        found = [d for d in self.devices if (not name or d["name"] == name) and _os_matches(os, d["os"])
                 and all(a in d["attributes"] for a in attributes or [])]
        if select and found:
            if not os:  # the latest OS of the first matching device name
                same = [d for d in found if d["name"] == found[0]["name"]]
                return [max(same, key=lambda d: _os_key(d["os"]))]
            return found[:1]
        return found

    @staticmethod
    def _device_pb(d: dict) -> pb.Device:
        return pb.Device(name=d["name"], os=d["os"], attributes=d["attributes"],
                         soc_description=d.get("soc_description", ""))

    def _get_devices(self, query, body):
        select = query.get("select", ["False"])[0].lower() in ("true", "1")
        found = self.select_devices(query.get("name", [""])[0], query.get("os", [""])[0],
                                    query.get("attributes", []), select)
        return self._pb(pb.DeviceList(devices=[self._device_pb(d) for d in found], total_query_count=len(found)))

    def _get_frameworks(self, query, body):
        fws = [pb.Framework(name=f["name"], api_version=f["api_version"], api_tags=f.get("api_tags", []),
                            full_version=f.get("full_version", "")) for f in self.frameworks]
        return self._pb(pb.FrameworkList(frameworks=fws, total_query_count=len(fws)))

    # -- models -----------------------------------------------------------------------------------------

    def _create_model(self, query, body):
        req = pb.Model.FromString(body)
        mid = self._new_id("m")
        self.models[mid] = {"name": req.name, "model_type": req.model_type, "is_directory": req.is_directory,
                            "created": _now(), "data": None, "upload": None, "metadata": None}
        return self._pb(pb.CreateUpdateResponse(id=mid, creation_time=self.models[mid]["created"]))

    def _model_pb(self, mid: str) -> pb.Model:
        m = self.models[mid]
        out = pb.Model(model_id=mid, name=m["name"], model_type=m["model_type"], is_directory=m["is_directory"],
                       creation_time=m["created"], file_upload_complete=m["data"] is not None)
        if m["data"] is not None:
            if m["metadata"] is None:
                m["metadata"] = {int(k): str(v) for k, v in self.model_metadata(m["data"], m["model_type"]).items()}
            for k, v in m["metadata"].items():
                out.metadata.entries[k] = v
        return out

    def _get_model(self, mid, query, body):
        if mid not in self.models:
            return self._detail(404, "Not found.")
        return self._pb(self._model_pb(mid))

    def _model_upload_urls(self, mid, query, body):
        if mid not in self.models:
            return self._detail(404, "Not found.")
        try:
            size = int(query["file_size"][0])
        except (KeyError, ValueError):
            return self._detail(400, "file_size is required.")
        upload_id = secrets.token_hex(8)
        n = max(1, math.ceil(size / self.max_part_size))
        self.models[mid]["upload"] = {"id": upload_id, "parts": n}
        urls = [self._presigned("PUT", f"models/{mid}/upload", partNumber=str(k + 1), uploadId=upload_id)
                for k in range(n)]
        return self._pb(pb.FileUploadResponse(multipart_url=pb.FileMultipartUploadURL(
            urls=urls, upload_id=upload_id, max_part_size=self.max_part_size)))

    def _model_upload_complete(self, mid, query, body):
        m = self.models.get(mid)
        if m is None:
            return self._detail(404, "Not found.")
        req = pb.FileMultipartUploadComplete.FromString(body)
        up = m["upload"]
        if not up or req.upload_id != up["id"]:
            return self._detail(400, "Unknown upload_id.")
        parts = [self._parts.get((up["id"], k + 1)) for k in range(up["parts"])]
        if any(p is None for p in parts) or len(req.etags) != len(parts) or any(
                e != f'"{hashlib.md5(p).hexdigest()}"' for e, p in zip(req.etags, parts)):
            return self._detail(400, "The ETags do not match the uploaded parts.")
        m["data"] = b"".join(parts)
        self.objects[f"models/{mid}/{m['name']}"] = m["data"]
        return self._pb(pb.CreateUpdateResponse(id=mid, creation_time=m["created"]))

    def _model_download(self, mid, query, body):
        m = self.models.get(mid)
        if m is None or m["data"] is None:
            return self._detail(404, "Not found.")
        name = m["name"] + (".zip" if m["is_directory"] and not m["name"].endswith(".zip") else "")
        return self._pb(pb.FileDownloadResponse(url=pb.FileDownloadURL(
            url=self._presigned("GET", f"models/{mid}/{m['name']}"), filename=name)))

    # -- datasets ---------------------------------------------------------------------------------------

    def _create_dataset(self, query, body):
        req = pb.Dataset.FromString(body)
        return self._pb(self._new_dataset(req.name or "dataset", req.permanent))

    def _new_dataset(self, name: str, permanent: bool = False, data: bytes | None = None) -> pb.CreateUpdateResponse:
        did = self._new_id("d")
        created = _now()
        expires = None if permanent else _now(DATASET_LIFETIME_S)
        self.datasets[did] = {"name": name, "permanent": permanent, "created": created, "expires": expires,
                              "complete": data is not None, "key": f"datasets/{did}/{did}.h5"}
        if data is not None:
            self.objects[self.datasets[did]["key"]] = data
        res = pb.CreateUpdateResponse(id=did, creation_time=created)
        if expires is not None:
            res.expiration_time.CopyFrom(expires)
        return res

    def _dataset_pb(self, did: str) -> pb.Dataset:
        d = self.datasets[did]
        out = pb.Dataset(dataset_id=did, name=d["name"], creation_time=d["created"], permanent=d["permanent"],
                         file_upload_complete=d["complete"])
        if d["expires"] is not None:
            out.expiration_time.CopyFrom(d["expires"])
        return out

    def _get_dataset(self, did, query, body):
        if did not in self.datasets:
            return self._detail(404, "Not found.")
        return self._pb(self._dataset_pb(did))

    def _dataset_upload_url(self, did, query, body):
        if did not in self.datasets:
            return self._detail(404, "Not found.")
        key = self.datasets[did]["key"]
        fields = {"key": key, "x-amz-signature": self._sign("POST", key, "")}
        return self._pb(pb.FileUploadResponse(url=pb.FileUploadURL(url=f"{self.url}/s3/", file_field_name="file",
                                                                   fields=fields)))

    def _dataset_upload_complete(self, did, query, body):
        d = self.datasets.get(did)
        if d is None:
            return self._detail(404, "Not found.")
        req = pb.Dataset.FromString(body)
        if req.file_upload_complete:
            if d["key"] not in self.objects:
                return self._detail(400, "The dataset file was not uploaded.")
            d["complete"] = True
        return self._pb(pb.CreateUpdateResponse(id=did, creation_time=d["created"]))

    def _dataset_download(self, did, query, body):
        d = self.datasets.get(did)
        if d is None or not d["complete"]:
            return self._detail(404, "Not found.")
        return self._pb(pb.FileDownloadResponse(url=pb.FileDownloadURL(url=self._presigned("GET", d["key"]),
                                                                       filename=f"{did}.h5")))

    def dataset_entries(self, dataset_id: str) -> Entries:
        """A stored dataset, read with the client's own converter."""
        with h5py.File(io.BytesIO(self.objects[self.datasets[dataset_id]["key"]]), "r") as h5f:
            return dict(h5_to_dataset_entries(h5f))

    # -- jobs -------------------------------------------------------------------------------------------

    def _create_job(self, query, body):
        req = pb.Job.FromString(body)
        kind = req.WhichOneof("job")
        if kind not in ("inference_job", "profile_job"):
            return self._pb(pb.CreateUpdateResponse(
                status=f"{kind or 'this job kind'} is not supported by this AI Hub stand-in: only inference jobs "
                       "(with or without profiling) run here"))
        j = req.inference_job if kind == "inference_job" else req.profile_job
        profiling = j.is_profiling_on if kind == "inference_job" else True
        mid = j.model.model_id
        if mid not in self.models or self.models[mid]["data"] is None:
            return self._pb(pb.CreateUpdateResponse(status=f"Model '{mid}' does not exist or was not uploaded."))
        found = self.select_devices(j.device.name, j.device.os, list(j.device.attributes), select=True)
        if not found:
            return self._pb(pb.CreateUpdateResponse(status=f"No device matches {j.device.name!r} "
                                                           f"{list(j.device.attributes)}."))
        did = j.dataset.dataset_id or None
        if did is not None and (did not in self.datasets or not self.datasets[did]["complete"]):
            return self._pb(pb.CreateUpdateResponse(status=f"Dataset '{did}' does not exist or was not uploaded."))
        job = _Job(id=self._new_id("j"), model_id=mid, device=found[0], dataset_id=did, name=j.name,
                   options=j.options, profiling=profiling, created=_now())
        job.log.append(f"created on {job.device['name']} with options {job.options!r}")
        self.jobs[job.id] = job
        job.thread = threading.Thread(target=self._run, args=(job,), daemon=True)
        job.thread.start()
        return self._pb(pb.CreateUpdateResponse(id=job.id, creation_time=job.created))

    def _rule(self, job: _Job) -> dict | None:
        m = self.models[job.model_id]
        for r in self.job_rules:
            if (r["device"] in (None, job.device["name"])) and (r["model"] in (None, job.model_id, m["name"])):
                return r
        return None

    def _run(self, job: _Job) -> None:
        """The runner, in its own thread from submission on, so a slow one never stalls a poll."""
        m = self.models[job.model_id]
        try:
            inputs = self.dataset_entries(job.dataset_id) if job.dataset_id else {}
            outputs = self.runner(m["data"], int(m["model_type"]), inputs, job.device["name"], job.options)
            job.outcome.update(inputs=inputs, outputs=outputs)
        except JobFailure as e:
            job.outcome.update(failure=(e.reason, e.failure_type))
        except Exception as e:
            job.outcome.update(failure=(f"{type(e).__name__}: {e}", F.JOB_FAILURE_TYPE_RUNTIME_UNKNOWN))

    def _advance(self, job: _Job) -> None:
        if job.state in (S.JOB_STATE_DONE, S.JOB_STATE_FAILED):
            return
        states = self.running_states[job.profiling]
        k, job.polls = job.polls, job.polls + 1
        if k < len(states):
            job.state = states[k]
            return
        with self._lock:
            rule = self._rule(job)
        job.state = states[-1]
        if rule and rule["action"] == "hang":
            return
        if rule and rule["action"] == "fail":
            with self._lock:
                return self._fail(job, rule["reason"], rule["failure_type"])
        assert job.thread is not None
        job.thread.join(self.runner_wait_s)
        if job.thread.is_alive():
            return
        with self._lock:
            if "failure" in job.outcome:
                return self._fail(job, *job.outcome["failure"])
            self._finish(job)

    def _fail(self, job: _Job, reason: str, failure_type: int) -> None:
        job.state, job.failure_reason, job.failure_type = S.JOB_STATE_FAILED, reason, failure_type
        job.log.append(f"FAILED ({F.Name(failure_type)}): {reason}")

    def _options(self, options: str) -> dict[str, str]:
        out, args = {}, shlex.split(options)
        for k, a in enumerate(args):
            if a.startswith("--"):
                key, eq, val = a[2:].partition("=")
                if not eq and k + 1 < len(args) and not args[k + 1].startswith("--"):
                    val = args[k + 1]
                out[key] = val
        return out

    def _framework(self, wanted: str | None) -> dict | None:
        """The framework ``--qairt_version`` names (api_version, full version, "default" or "latest")."""
        if wanted in (None, "default", "latest"):
            tag = wanted or "default"
            tagged = [f for f in self.frameworks if tag in f.get("api_tags", [])]
            if tagged:
                return tagged[0]
            return self.frameworks[0] if wanted is None and self.frameworks else None
        return next((f for f in self.frameworks if wanted in (f["api_version"], f.get("full_version"))), None)

    def _finish(self, job: _Job) -> None:
        m = self.models[job.model_id]
        opts = self._options(job.options)
        fw = self._framework(opts.get("qairt_version"))
        if fw is None:
            return self._fail(job, f"QAIRT version {opts.get('qairt_version')} is not available; see get_frameworks()",
                              F.JOB_FAILURE_TYPE_INVALID_ARGUMENT)
        inputs, outputs = job.outcome["inputs"], job.outcome["outputs"]
        for name, arrays in inputs.items():
            if arrays:
                try:
                    dtype = api_utils.get_type_value_from_str(str(arrays[0].dtype))
                except ValueError:
                    continue
                job.tensor_types.append(pb.NamedTensorType(name=name, tensor_type=pb.TensorType(
                    shape=list(arrays[0].shape), dtype=dtype)))
        result = pb.InferenceJobResult(inference_job_id=job.id)
        if job.dataset_id:  # no dataset, no output dataset (client.py:2939-2945)
            buf = io.BytesIO()
            with h5py.File(buf, "w") as h5f:
                dataset_entries_to_h5(outputs, h5f)
            result.output_dataset_id = self._new_dataset(f"{job.name}_outputs", data=buf.getvalue()).id
        if job.profiling:
            batches = len(next(iter(inputs.values()))) if inputs else 1
            result.detail.CopyFrom(self._profile(job, m, opts, fw, max(1, batches)))
        job.result = result
        job.state = S.JOB_STATE_DONE
        job.log.append(f"DONE with QAIRT {fw.get('full_version') or fw['api_version']}")

    def profile_latency_us(self, device: str, compute_unit: str = "npu") -> int:
        lat = self.latency_us.get(device, self.default_latency_us)
        if compute_unit == "cpu":
            return int(self.cpu_latency_us.get(device, round(lat * self.cpu_factor)))
        return int(lat)

    def _profile(self, job: _Job, m: dict, opts: dict, fw: dict, batches: int) -> pb.ProfileDetail:
        cu_name = (opts.get("compute_unit") or "npu").lower()
        unit = {"cpu": CU.COMPUTE_UNIT_CPU, "gpu": CU.COMPUTE_UNIT_GPU}.get(cu_name, CU.COMPUTE_UNIT_NPU)
        lat = self.profile_latency_us(job.device["name"], "cpu" if unit == CU.COMPUTE_UNIT_CPU else "npu")
        iterations = max(1, int(opts.get("max_profiler_iterations") or 100) // batches)
        s = self.latency_spread_us
        times = [lat + ((k * 7) % (2 * s + 1)) - s if s > 0 else lat for k in range(iterations)]
        first, warm, comp = (self.load_times_us[k] for k in ("first_load", "warm_load", "compile"))
        mem = self.memory_bytes
        d = pb.ProfileDetail(
            major_version=1, minor_version=2, execution_time=lat, load_time=first, peak_memory_usage=mem["compile"][1],
            cold_load_time=first, warm_load_time=warm, compile_time=comp,
            after_execution_peak_memory=mem["inference"][1], after_cold_load_peak_memory=mem["first_load"][1],
            after_warm_load_peak_memory=mem["warm_load"][1], after_compile_peak_memory=mem["compile"][1],
            all_execution_times=times, all_cold_load_times=[first], all_warm_load_times=[warm],
            all_compile_times=[comp] if comp else [])
        for stage, target in (("inference", d.execution_memory), ("first_load", d.cold_load_memory),
                              ("warm_load", d.warm_load_memory), ("compile", d.compile_memory)):
            lo, hi = mem[stage]
            if not hi:  # not measured (no on-device compile for a context binary): the client maps it to None
                continue
            target.increase.CopyFrom(pb.Range(lower=lo, upper=hi))
            target.peak.CopyFrom(pb.Range(lower=lo, upper=hi))
        layers = _layers(m["data"], m["model_type"])
        delegate = "CPU" if unit == CU.COMPUTE_UNIT_CPU else "QNN"
        share, rest = divmod(lat, len(layers))
        for k, (name, kind) in enumerate(layers):
            d.layer_details.append(pb.LayerDetail(
                name=name, compute_unit=unit, layer_type_name=kind, id=str(k), delegate_name=delegate,
                execution_time=share + (rest if k == len(layers) - 1 else 0), segment_id="0"))
        d.segment_details.append(pb.SegmentDetail(id="0", compute_unit=unit, delegate_name=delegate,
                                                  execution_time=lat))
        d.tool_versions.append(pb.ToolVersion(name="QAIRT", version=fw.get("full_version") or fw["api_version"]))
        if m["model_type"] == pb.ModelType.MODEL_TYPE_ONNX:
            d.tool_versions.append(pb.ToolVersion(name="ONNX Runtime", version=self.onnx_runtime_version))
        return d

    def _job_pb(self, job: _Job) -> pb.Job:
        m = self.models[job.model_id]
        ij = pb.InferenceJob(inference_job_id=job.id, name=job.name, options=job.options, job_state=job.state,
                             device=self._device_pb(job.device), is_profiling_on=job.profiling,
                             creation_time=job.created, last_updated_time=_now(),
                             model=pb.Model(model_id=job.model_id, name=m["name"], model_type=m["model_type"],
                                            is_directory=m["is_directory"], creation_time=m["created"],
                                            file_upload_complete=True))
        out = pb.Job(inference_job=ij, hub_version="fake-aihub")
        ij = out.inference_job  # the constructor copied it: edit the copy that goes out
        if job.dataset_id:
            ij.dataset.CopyFrom(self._dataset_pb(job.dataset_id))
        if job.state == S.JOB_STATE_FAILED:
            ij.failure_reason = job.failure_reason or ""
            out.failure_type = job.failure_type
        if job.state in (S.JOB_STATE_DONE, S.JOB_STATE_FAILED):
            ij.completion_time.CopyFrom(_now())
            out.available_artifacts.extend([pb.JobArtifactType.JOB_ARTIFACT_TYPE_DEVICE_LOG,
                                            pb.JobArtifactType.JOB_ARTIFACT_TYPE_HUB_LOG])
        if job.state == S.JOB_STATE_DONE:
            out.failure_type = F.JOB_FAILURE_TYPE_SUCCESS
            ij.tensor_type_list.CopyFrom(pb.NamedTensorTypeList(types=job.tensor_types))
            if job.result is not None and job.result.HasField("detail"):
                ij.execution_time = job.result.detail.execution_time
                lo, hi = self.memory_bytes["inference"]
                ij.execution_peak_memory.CopyFrom(pb.Range(lower=lo, upper=hi))
        return out

    def _get_job(self, jid, query, body):
        with self._lock:
            job = self.jobs.get(jid)
        if job is None:
            return self._detail(404, "Not found.")
        with job.lock:  # one poll of a job at a time; other requests go on while it waits for its runner
            self._advance(job)
            with self._lock:
                return self._pb(self._job_pb(job))

    def _rename_job(self, jid, query, body):
        job = self.jobs.get(jid)
        if job is None:
            return self._detail(404, "Not found.")
        job.name = pb.JobPublicUpdate.FromString(body).name
        return self._pb(pb.CreateUpdateResponse(id=jid))

    def _get_result(self, jid, query, body):
        job = self.jobs.get(jid)
        if job is None:
            return self._detail(404, "Not found.")
        return self._pb(pb.JobResult(inference_job_result=job.result or pb.InferenceJobResult(inference_job_id=jid)))

    def _artifacts(self, jid, run, kind, query, body):
        job = self.jobs.get(jid)
        kinds = {pb.JobArtifactType.JOB_ARTIFACT_TYPE_DEVICE_LOG: "device",
                 pb.JobArtifactType.JOB_ARTIFACT_TYPE_HUB_LOG: "hub"}
        if job is None or job.state not in (S.JOB_STATE_DONE, S.JOB_STATE_FAILED) or int(kind) not in kinds:
            return self._detail(404, "Not found.")
        what = kinds[int(kind)]
        key = f"jobs/{jid}/{what}.log"
        self.objects[key] = "".join(f"[{what}] {line}\n" for line in job.log).encode()
        return self._pb(pb.NamedArtifactDownloadURLList(artifacts=[pb.NamedArtifactDownloadURL(
            url=self._presigned("GET", key), filename=f"{jid}_{what}.log", name=f"{what}_log")]))


def _multipart(body: bytes, content_type: str) -> dict[str, bytes]:
    """The fields of a multipart/form-data body (the presigned POST's form)."""
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        return {}
    fields: dict[str, bytes] = {}
    for chunk in body.split(b"--" + m[1].encode())[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, data = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]*)"', head)
        if name:
            fields[name[1].decode()] = data.removesuffix(b"\r\n")
    return fields


__all__ = ["DEFAULT_DEVICES", "DEFAULT_FRAMEWORKS", "FakeAIHub", "JobFailure", "Recorded", "onnx_cpu_runner"]
