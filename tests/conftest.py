"""Shared fixtures. Unit tests may not reach the network: only loopback connections pass."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEMO_MATRIX = REPO / "matrix" / "models.yaml"


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and self.family in (socket.AF_INET, socket.AF_INET6):
            try:
                ok = ipaddress.ip_address(host).is_loopback
            except ValueError:
                ok = host == "localhost"
            if not ok:
                raise AssertionError(f"a test tried to reach {address}: tests may only use local servers")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real console entry point in a child process, as a user would."""
    return subprocess.run([sys.executable, "-m", "ci_tools", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, env=env, timeout=900)


def readme_commands(readme: Path, cwd: Path) -> list[subprocess.CompletedProcess]:
    """Every ``python ...`` line of a README's ```sh blocks run as written (bash, in ``cwd``), as a new user pastes
    them: only the archive, no qnn-release on the path (``-I`` is not theirs to add: PYTHONPATH is dropped)."""
    import re

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    lines = [ln.split("  #")[0].strip() for block in re.findall(r"```sh\n(.*?)```", readme.read_text(), re.S)
             for ln in block.splitlines() if ln.startswith("python ")]
    assert lines, f"{readme}: no python command in a sh block"
    return [subprocess.run(["bash", "-c", ln.replace("python ", f"{sys.executable} -I ", 1)], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=900) for ln in lines]


SDK_SECTION = {
    "qairt": [{"version": "2.40.0.251030", "hf_repo": "csukuangfj/qnn-toolkit", "file": "v2.40.0.251030.zip",
               "revision": None, "sha256": None}],
    "onnxruntime_qnn": "2.7.0",
}


@pytest.fixture
def repo(tmp_path):
    """A repository folder with models/ (a test's own, where its module defines none)."""
    (tmp_path / "models").mkdir()
    return tmp_path


def write_matrix(repo: Path, models: list[dict]) -> Path:
    """A matrix file at <repo>/matrix/models.yaml; `path` sources are relative to <repo>."""
    import yaml

    path = repo / "matrix" / "models.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": models}, sort_keys=False))
    return path


def path_model(repo: Path, name: str, onnx_file: Path, graphs: list[dict] | None = None, **extra) -> dict:
    from ci_tools.sources.store import sha256_file

    rel = onnx_file.relative_to(repo)
    return {"name": name, "description": f"test model {name}", "license": "MIT",
            "source": {"kind": "path", "path": str(rel), "sha256": sha256_file(onnx_file)},
            "graphs": graphs or [{"name": "main", "file": onnx_file.name}], **extra}


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One source/prepare cache per test session (wheels of the demo models are fetched once)."""
    return tmp_path_factory.mktemp("qnn-release-cache")


def sdk_line_python(version: str) -> Path:
    """The python of a venv with onnxruntime-qnn==version from the package registry (another SDK line than the
    suite's own), made once under the cache's ``venvs/`` and kept; two test workers asking at once make it once."""
    import fcntl
    import os

    root = Path(os.environ.get("QNN_RELEASE_CACHE") or Path.home() / ".cache" / "qnn-release") / "venvs"
    folder = root / f"onnxruntime-qnn-{version}"
    python = folder / "bin" / "python"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".onnxruntime-qnn-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".complete").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
            r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                f"onnxruntime-qnn=={version}", "numpy"], capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                pytest.skip(f"onnxruntime-qnn=={version} could not be installed from the registry: "
                            f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
            (folder / ".complete").write_text(version)
    return python



# fixtures shared by the two tiers, made by tests/support (imported when used: those modules import this one)
@pytest.fixture
def parts(tmp_path):
    from tests.support.parts_source import make_parts

    return make_parts(tmp_path)


@pytest.fixture
def onnx_bytes(tmp_path):
    from tests.support.sources import make_onnx_bytes

    return make_onnx_bytes(tmp_path)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.support.whisper import make_tiny

    return make_tiny(tmp_path_factory)
