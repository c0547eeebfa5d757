"""`sdk fetch` / `sdk env` against a local Hugging Face-compatible server (HF_ENDPOINT)."""

from __future__ import annotations

import io
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests import models
from tests.conftest import DEMO_MATRIX, path_model, run_cli, write_matrix
from tests.fake_hf import FakeHub
from tests.fake_qairt import make_fake_sdk

VERSION = "2.40.0.251030"
REPO_ID = "csukuangfj/qnn-toolkit"


def sdk_zip(tmp_path: Path, extra: list[tuple[str, bytes, int]] = ()) -> bytes:
    root = make_fake_sdk(tmp_path / "src", VERSION)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                info = zipfile.ZipInfo(str(p.relative_to(tmp_path / "src")))
                info.external_attr = (p.stat().st_mode & 0xFFFF) << 16
                zf.writestr(info, p.read_bytes())
        for name, data, mode in extra:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return buf.getvalue()


@pytest.fixture
def hub():
    with FakeHub() as h:
        yield h


def _matrix(tmp_path, **sdk_fields):
    data = yaml.safe_load(DEMO_MATRIX.read_text())
    data["sdk"]["qairt"][0].update(sdk_fields)
    path = tmp_path / "repo" / "matrix" / "models.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _fetch(hub, matrix, dest, *extra):
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(dest.parent / "hf")}
    return run_cli("sdk", "fetch", "--matrix", str(matrix), "--dest", str(dest), *extra, env=env)


def test_fetch_gives_a_usable_qnn_sdk_root(hub, tmp_path):
    commit = hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    matrix = _matrix(tmp_path)
    dest = tmp_path / "opt"
    r = _fetch(hub, matrix, dest, "--record")
    assert r.returncode == 0, r.stderr
    root = dest / "qairt" / VERSION
    assert r.stdout.splitlines()[0] == f"QNN_SDK_ROOT={root}"
    tool = root / "bin" / "x86_64-linux-clang" / "qnn-context-binary-generator"
    assert tool.stat().st_mode & stat.S_IXUSR
    pinned = yaml.safe_load(matrix.read_text())["sdk"]["qairt"][0]
    assert pinned["revision"] == commit and len(pinned["sha256"]) == 64
    r = run_cli("sdk", "env", "--matrix", str(matrix), "--dest", str(dest))
    assert r.returncode == 0 and r.stdout.splitlines()[0] == f"QNN_SDK_ROOT={root}"
    # the fetched tree drives the qairt route
    repo = tmp_path / "m"
    (repo / "models").mkdir(parents=True)
    f = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    m = write_matrix(repo, [path_model(repo, "m", f, chips=["SM8650"])])
    r = run_cli("build", "--backend", "qairt", "--matrix", str(m), "--out", str(tmp_path / "dist"),
                env={**os.environ, "QNN_SDK_ROOT": str(root), "QNN_PYTHON": sys.executable,
                     "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stdout + r.stderr


def test_corrupted_download_is_refused_and_leaves_nothing(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    hub.state.corrupt.add(f"v{VERSION}.zip")
    dest = tmp_path / "opt"
    r = _fetch(hub, _matrix(tmp_path), dest)
    assert r.returncode == 4 and "does not match" in r.stderr and "Traceback" not in r.stderr
    assert not dest.exists() or list(dest.iterdir()) == []


def test_wrong_pinned_sha256_is_refused(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    dest = tmp_path / "opt"
    r = _fetch(hub, _matrix(tmp_path, sha256="a" * 64), dest)
    assert r.returncode == 4 and "(the matrix)" in r.stderr
    assert not dest.exists() or list(dest.iterdir()) == []


@pytest.mark.parametrize("name,mode", [(f"qairt/{VERSION}/../../escape.txt", 0o100644),
                                       ("/etc/evil.conf", 0o100644),
                                       (f"qairt/{VERSION}/bin/link", 0o120777)])
def test_malicious_zip_is_refused_and_leaves_nothing(hub, tmp_path, name, mode):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path, [(name, b"../../../../etc/passwd", mode)]))
    dest = tmp_path / "opt"
    r = _fetch(hub, _matrix(tmp_path), dest)
    assert r.returncode == 4 and "refused" in r.stderr
    assert not dest.exists() or list(dest.iterdir()) == []
    assert not (tmp_path / "escape.txt").exists()


def test_missing_file_and_env_without_sdk(hub, tmp_path):
    hub.state.add_file(REPO_ID, "other.zip", b"x")
    r = _fetch(hub, _matrix(tmp_path), tmp_path / "opt")
    assert r.returncode == 4 and "EntryNotFound" in r.stderr
    r = run_cli("sdk", "env", "--dest", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and "sdk fetch" in r.stderr
