"""Qualcomm AI Hub through its own client (``qai-hub``): devices, runtimes, uploads, jobs, results.

A thin layer that keeps the client quiet (its prints and progress bars go to a log file) and turns every
fault into a ``HubFault`` with a status and one line: a bad token (401), a client too old (426), a rate
limit (429), an outage (5xx, no connection), a job that failed with its typed reason. The token is only
ever handed to the client; nothing here prints it, and ``scrub`` removes it from any text that leaves.

Evidence (qai-hub 0.56.0, ``../shared/research/ai-hub.md``): devices are chosen by ``chipset:`` attributes
and carry ``hexagon:vNN`` and ``soc-model:NN`` (section 4); a context binary uploads as
QNN_CONTEXT_BINARY and runs on a ``framework:qnn`` device; one inference job with ``profile=True`` gives
the device's outputs and its profile (section 2); ``--qairt_version`` picks the runtime, which must be at
least the QAIRT that built the binary (section 5); the profile's times are µs and memory bytes.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from ..util.text import clip
from .numbers import CpuBaseline, Device, Latency, Placement, Status

DEFAULT_URL = "https://workbench.aihub.qualcomm.com"
TOKEN_ENV = "QAI_HUB_API_TOKEN"  # noqa: S105 (the name of the env var the release workflow sets from its secret)
URL_ENV = "QAI_HUB_API_URL"  # another Hub deployment (or a stand-in); the default is Qualcomm's


def credentials(env: Mapping[str, str]) -> tuple[str | None, str, str | None]:
    """(token, API URL, why there is none): ``QAI_HUB_API_TOKEN`` (and ``QAI_HUB_API_URL``), else the client's
    own configuration, the ini ``qai-hub configure`` writes (``QAIHUB_CLIENT_INI``, else
    ``~/.qai_hub/client.ini``; section ``[api]``, ``api_token`` and ``api_url``: qai_hub/api_utils.py:67-82,
    139-187)."""
    import configparser

    token = env.get(TOKEN_ENV, "").strip()
    if token:
        return token, env.get(URL_ENV) or DEFAULT_URL, None
    ini = Path(env.get("QAIHUB_CLIENT_INI") or Path.home() / ".qai_hub" / "client.ini").expanduser()
    if ini.is_file():
        cp = configparser.ConfigParser()
        try:
            cp.read(ini)
            token = cp.get("api", "api_token", fallback="").strip()
        except configparser.Error as e:
            return None, DEFAULT_URL, f"no device numbers: {ini}: not an AI Hub client ini ({type(e).__name__})"
        if token:
            return token, cp.get("api", "api_url", fallback=DEFAULT_URL) or DEFAULT_URL, None
        return None, DEFAULT_URL, f"no device numbers: {ini} has no [api] api_token"
    return None, DEFAULT_URL, (f"no device numbers: {TOKEN_ENV} is not set and there is no AI Hub client ini (a "
                               "fork's pull request, or a repository without the secret)")


class HubFault(Exception):
    """Why AI Hub could not measure: ``status`` is a DeviceRun status, ``reason`` one line."""

    def __init__(self, status: Status, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class JobState:
    done: bool
    ok: bool
    reason: str | None = None


def one_line(text: object) -> str:
    """The client's messages come in text boxes over several lines (box-drawing characters): one line of what
    they say, without the box."""
    parts = [re.sub(r"[\u2500-\u257f]+", " ", ln) for ln in str(text).splitlines()]
    parts = [re.sub(r"^[\s|+*#-]+|[\s|+*#-]+$", "", re.sub(r"\s+", " ", p)) for p in parts]
    return clip(" ".join(p for p in parts if p), 400) or type(text).__name__


class Hub:
    """One AI Hub session; every call goes through ``call`` (quiet, faults as ``HubFault``)."""

    def __init__(self, token: str, api_url: str = DEFAULT_URL, log: Path | None = None, deadline: float | None = None):
        try:
            from qai_hub.client import Client, ClientConfig
        except ImportError:
            raise UsageError("device numbers through AI Hub need its client: pip install 'qnn-release[hub]'",
                             hint="or run without QAI_HUB_API_TOKEN to record \"no device numbers\"") from None

        self.token = token
        self.api_url = api_url.rstrip("/")
        self.config = ClientConfig(api_token=token, api_url=self.api_url, web_url=self.api_url)
        self.client = Client(config=self.config)
        self.log = log
        self.deadline = deadline  # time.monotonic() by which every call must have answered
        self._uploads: dict[tuple[str, str], Any] = {}

    def scrub(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text

    def call(self, what: str, fn, *args, **kwargs):
        """``fn`` quietly, within the run's budget (the client retries 429/5xx itself, honouring Retry-After:
        a call that outlives the budget is left behind, recorded as a timeout)."""
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["value"] = fn(*args, **kwargs)
            except BaseException as e:  # handed to the caller's thread below
                box["error"] = e

        sink = open(self.log, "a") if self.log else open(os.devnull, "w")
        worker = threading.Thread(target=work, daemon=True)
        with sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            worker.start()
            worker.join(None if self.deadline is None else max(0.0, self.deadline - time.monotonic()))
        if worker.is_alive():
            raise HubFault("timeout", f"{what}: no answer from AI Hub within the budget")
        if "error" in box:
            raise self._fault(what, box["error"]) from None
        return box["value"]

    def _fault(self, what: str, e: BaseException) -> BaseException:
        from qai_hub.api_utils import APIException
        from qai_hub.client import InternalError, RateLimitedError, UserError

        msg = self.scrub(one_line(e))
        if isinstance(e, RateLimitedError):
            return HubFault("unavailable", f"{what}: AI Hub rate-limited the request (429): {msg}")
        if isinstance(e, UserError):
            low = msg.lower()
            if "authenticate" in low or "api token" in low:
                return HubFault("unavailable", f"{what}: AI Hub refused the token (401): set {TOKEN_ENV} to a valid "
                                "API token (AI Hub, Account settings)")
            if "upgrade" in low or "426" in low or "client version" in low:
                return HubFault("unavailable", f"{what}: AI Hub refused this client as too old (426): {msg}")
            return HubFault("failed", f"{what}: AI Hub refused it: {msg}")
        if isinstance(e, (InternalError, APIException, OSError, ValueError)):
            return HubFault("unavailable", f"{what}: AI Hub unavailable: {type(e).__name__}: {msg}")
        if isinstance(e, Exception):  # anything else the client raises (a malformed answer): that call failed
            return HubFault("failed", f"{what}: the AI Hub client failed: {type(e).__name__}: {msg}")
        return e

    # -- what the service offers ------------------------------------------------------------------

    def runtimes(self) -> list[tuple[str, str, list[str]]]:
        """(api_version "2.40", full_version, tags) of every QAIRT the service offers."""
        fws = self.call("frameworks", self.client.get_frameworks)
        return [(f.api_version, f.full_version, list(f.api_tags)) for f in fws
                if f.name.upper() in ("QAIRT", "QNN")]

    def devices(self, chipset: str) -> list:
        """AI Hub's devices of a chipset that run QNN context binaries (``framework:qnn``)."""
        found = self.call(f"devices chipset:{chipset}", self.client.get_devices, attributes=[f"chipset:{chipset}"])
        return [d for d in found if "framework:qnn" in d.attributes]

    # -- uploads and jobs ---------------------------------------------------------------------------

    def upload_model(self, path: Path, key: str):
        if ("model", key) not in self._uploads:
            self._uploads[("model", key)] = self.call(f"upload {path.name}", self.client.upload_model, str(path),
                                                      name=path.name)
        return self._uploads[("model", key)]

    def upload_dataset(self, entries: dict[str, list[np.ndarray]], key: str):
        if ("data", key) not in self._uploads:
            self._uploads[("data", key)] = self.call(f"upload inputs of {key}", self.client.upload_dataset,
                                                     entries, name=key.replace("/", "-"))
        return self._uploads[("data", key)]

    def submit(self, what: str, model, device, dataset, options: str):
        return self.call(what, self.client.submit_inference_job, model, device, inputs=dataset,
                         name=what.replace("/", "-")[:60], options=options, retry=False, profile=True)  # a job name

    def state(self, job) -> JobState:
        st = self.call(f"job {job.job_id}", job.get_status)
        if not st.finished:
            return JobState(done=False, ok=False)
        if st.success:
            return JobState(done=True, ok=True)
        return JobState(done=True, ok=False, reason=self._failure(job, st.message))

    def _failure(self, job, message: str | None) -> str:
        from qai_hub import public_api_pb2 as pb
        from qai_hub import public_rest_api as api

        kind = ""
        with contextlib.suppress(Exception):  # the typed reason is extra detail: the message stands alone
            raw = self.call(f"job {job.job_id}", api.get_job, self.config, job.job_id)
            if raw.failure_type:
                kind = pb.JobFailureType.Name(raw.failure_type).removeprefix("JOB_FAILURE_TYPE_") + ": "
        return f"AI Hub job {job.job_id} failed: {kind}{self.scrub(one_line(message or 'no reason given'))}"

    def profile(self, job) -> tuple[dict, dict[str, str]]:
        """(profile, tool versions) of a finished job."""
        from qai_hub import public_rest_api as api

        profile = self.call(f"profile of {job.job_id}", job.download_profile)
        try:  # which runtime ran it: extra detail, only in the raw result (ProfileDetail.tool_versions)
            raw = self.call(f"results of {job.job_id}", api.get_job_results, self.config, job.job_id)
            tools = {t.name: t.version for t in raw.inference_job_result.detail.tool_versions}
        except HubFault:
            tools = {}
        return profile, tools

    def outputs(self, job) -> dict[str, list[np.ndarray]] | None:
        return self.call(f"outputs of {job.job_id}", job.download_output_data)


# -- from the profile to the numbers ------------------------------------------------------------


def ms(us) -> float | None:
    return round(float(us) / 1000.0, 3) if isinstance(us, (int, float)) and us > 0 else None


def latency(summary: dict) -> Latency | None:
    times = [t for t in summary.get("all_inference_times") or [] if isinstance(t, (int, float)) and t > 0]
    if not times and ms(summary.get("estimated_inference_time")) is not None:
        times = [summary["estimated_inference_time"]]
    if not times:
        return None
    return Latency(median_ms=round(statistics.median(times) / 1000.0, 3), min_ms=round(min(times) / 1000.0, 3),
                   max_ms=round(max(times) / 1000.0, 3), runs=len(times))


def memory_mb(summary: dict) -> tuple[float, float] | None:
    r = summary.get("inference_memory_peak_range")
    if isinstance(r, (list, tuple)) and len(r) == 2 and all(isinstance(x, (int, float)) for x in r):
        return (round(r[0] / 2**20, 1), round(r[1] / 2**20, 1))
    peak = summary.get("estimated_inference_peak_memory")
    return (round(peak / 2**20, 1),) * 2 if isinstance(peak, (int, float)) and peak > 0 else None


def placement(detail: list[dict]) -> Placement | None:
    if not detail:
        return None
    units = [str(d.get("compute_unit", "")).upper() for d in detail]
    return Placement(npu=units.count("NPU"), gpu=units.count("GPU"), cpu=units.count("CPU"),
                     not_on_npu=[str(d.get("name")) for d, u in zip(detail, units) if u != "NPU"][:20])  # a list


def device_info(dev, stands_in_for: str | None = None) -> Device:
    attrs = {a.split(":", 1)[0]: a.split(":", 1)[1] for a in dev.attributes if ":" in a}
    chipsets = [a.split(":", 1)[1] for a in dev.attributes if a.startswith("chipset:")]
    soc_model = attrs.get("soc-model")
    return Device(name=dev.name, os=dev.os or None, chipset=chipsets[0] if chipsets else None,
                  hexagon=attrs.get("hexagon"), soc_model=int(soc_model) if soc_model and soc_model.isdigit() else None,
                  stands_in_for=stands_in_for)


def cpu_baseline(profile: dict, tools: dict[str, str], job) -> CpuBaseline | None:
    lat = latency(profile.get("execution_summary") or {})
    if lat is None:
        return None
    ort = next((f"{k} {v}" for k, v in tools.items() if "onnx" in k.lower()), None)
    return CpuBaseline(latency=lat, runtime=ort, job_id=job.job_id, job_url=getattr(job, "url", None))
