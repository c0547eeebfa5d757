"""`sdk fetch` / `sdk env` against a local Hugging Face-compatible server (HF_ENDPOINT)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import DEMO_MATRIX, REPO, path_model, run_cli, write_matrix
from tests.fakes.fake_hf import FakeHub
from tests.fakes.fake_qairt import make_fake_sdk
from tests.support import models
from tests.support.sdk import FLOW, REPO_ID, VERSION


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


def _env(url, tmp_path, **extra):
    return {**os.environ, "HF_ENDPOINT": url, "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf"),
            "QNN_RELEASE_CACHE": str(tmp_path / "cache"), "QNN_RELEASE_RETRY_BASE": "0.01", **extra}


def _fetch(hub, matrix, dest, *extra, cwd=None, **env):
    return run_cli("sdk", "fetch", "--matrix", str(matrix), "--dest", str(dest), *extra, cwd=cwd,
                   env=_env(hub.url, matrix.parents[2], **env))


def one_line_error(r, code: int) -> str:
    """The process failed with ``code`` and said so in one line: no traceback, no internal error."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, r.stderr
    assert len(lines) == 1 and lines[0].startswith("qnn-release: error: "), r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    return lines[0]


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
    assert not (tmp_path / "cache" / "downloads").exists()  # a corrupt download is not kept


def test_wrong_pinned_sha256_is_refused(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    dest = tmp_path / "opt"
    r = _fetch(hub, _matrix(tmp_path, sha256="a" * 64), dest)
    assert r.returncode == 4 and "(the matrix)" in r.stderr
    assert not dest.exists() or list(dest.iterdir()) == []


@pytest.mark.parametrize("name,mode", [(f"qairt/{VERSION}/../../escape.txt", 0o100644),
                                       ("/etc/evil.conf", 0o100644),
                                       (f"qairt/{VERSION}/bin/link", 0o120777)])  # -> ../../../../etc/passwd
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


def _installed(dest: Path) -> dict:
    return json.loads((dest / "qairt" / VERSION / ".qnn-release-sdk.json").read_text())


def test_transient_hub_errors_are_retried_and_a_dropped_download_resumes(hub, tmp_path):
    big = (f"qairt/{VERSION}/lib/big.bin", os.urandom(400_000), 0o100644)  # several reads: a drop keeps some
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path, [big]))
    zip_path = rf"/resolve/.*/v{VERSION}\.zip$"
    hub.fault("HEAD", zip_path, "503")
    hub.fault("GET", zip_path, "500")
    hub.fault("GET", zip_path, "429", after=0)
    hub.fault("GET", zip_path, "drop-mid-body")
    hub.fault("GET", zip_path, "drop")
    hub.fault("GET", zip_path, "503")
    dest = tmp_path / "opt"
    r = _fetch(hub, _matrix(tmp_path), dest)
    assert r.returncode == 0, r.stderr
    assert (dest / "qairt" / VERSION / "bin" / "x86_64-linux-clang" / "qnn-net-run").is_file()
    gets = [p for m, p in hub.state.log if m == "GET" and p.endswith(".zip")]
    assert len(gets) == 6  # five faults, then the rest of the file
    assert not (tmp_path / "cache" / "downloads").exists()  # nothing kept once installed


def test_retry_after_is_honoured(hub, tmp_path, monkeypatch):
    from ci_tools.sources import hub_file

    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", b"zip")
    monkeypatch.setattr(hub_file, "endpoint", lambda: hub.url)
    hub.fault("HEAD", r"\.zip$", "429", after=7)
    waits = []
    meta = hub_file.file_metadata(REPO_ID, f"v{VERSION}.zip", "main", sleep=waits.append)
    assert waits == [7.0] and meta.commit == hub.state.repos[REPO_ID]["commit"]
    # and on the download
    from ci_tools.sources.download import fetch_verified

    hub.fault("GET", r"\.zip$", "429", after=5)
    hub.fault("GET", r"\.zip$", "503")
    path = fetch_verified(tmp_path / "c", meta.sha256, hub_file.opener(meta), what="zip", sleep=waits.append)
    assert waits[1] == 5.0 and len(waits) == 3 and path.read_bytes() == b"zip"


def test_unreachable_hub_is_exit_4_naming_the_endpoint(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    matrix, dest = _matrix(tmp_path), tmp_path / "opt"
    r = run_cli("sdk", "fetch", "--matrix", str(matrix), "--dest", str(dest),
                env=_env(f"http://127.0.0.1:{port}", tmp_path))
    line = one_line_error(r, 4)
    assert f"127.0.0.1:{port}" in line and "HF_ENDPOINT" in line and "HF_TOKEN" in line
    assert not dest.exists()


@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_every_attempt_dropped_is_exit_4_and_dest_unchanged(hub, tmp_path, method):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    hub.fault(method, r"\.zip$", "drop", count=1000)
    matrix, dest, secret = _matrix(tmp_path), tmp_path / "opt", "hf_SECRETSECRETSECRET0123456789"
    r = run_cli("--verbose", "sdk", "fetch", "--matrix", str(matrix), "--dest", str(dest),
                env=_env(hub.url, tmp_path, HF_TOKEN=secret))
    assert r.returncode == 4 and secret not in r.stdout + r.stderr
    r = _fetch(hub, matrix, dest, HF_TOKEN=secret)
    line = one_line_error(r, 4)
    assert secret not in line
    assert "HF_ENDPOINT" in line and ("no answer" in line or "no progress" in line)
    assert not dest.exists()


def test_a_changed_pin_refetches_or_refuses(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    matrix, dest = _matrix(tmp_path), tmp_path / "opt"
    assert _fetch(hub, matrix, dest, "--record").returncode == 0
    first = _installed(dest)
    # the matrix now pins another sha256: the installed tree is not what it names
    text = matrix.read_text()
    matrix.write_text(text.replace(first["sha256"], "b" * 64))
    line = one_line_error(_fetch(hub, matrix, dest), 4)
    assert "(the matrix)" in line and "b" * 12 in line
    assert _installed(dest) == first  # refused: the old tree stays as it was
    r = run_cli("sdk", "env", "--matrix", str(matrix), "--dest", str(dest))
    assert "differs from the matrix's pins" in one_line_error(r, 4)
    # a new zip on the Hub, pinned by revision and sha256: the second fetch installs it
    new_zip = sdk_zip(tmp_path / "v2", [(f"qairt/{VERSION}/NEW.txt", b"new", 0o100644)])
    commit = hub.state.add_file(REPO_ID, f"v{VERSION}.zip", new_zip)
    matrix.write_text(text.replace(first["revision"], commit).replace(first["sha256"],
                                                                     hashlib.sha256(new_zip).hexdigest()))
    r = _fetch(hub, matrix, dest)
    assert r.returncode == 0 and "fetched into" in r.stderr, r.stderr
    assert (dest / "qairt" / VERSION / "NEW.txt").read_bytes() == b"new"
    assert _installed(dest)["revision"] == commit
    assert run_cli("sdk", "env", "--matrix", str(matrix), "--dest", str(dest)).returncode == 0


def test_unpinned_tree_is_refetched_when_the_hub_file_changed(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    matrix, dest = _matrix(tmp_path), tmp_path / "opt"
    assert _fetch(hub, matrix, dest).returncode == 0
    r = _fetch(hub, matrix, dest)
    assert r.returncode == 0 and "already in" in r.stderr
    new = sdk_zip(tmp_path / "v2", [(f"qairt/{VERSION}/NEW.txt", b"n", 0o100644)])
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", new)
    r = _fetch(hub, matrix, dest)
    assert r.returncode == 0 and "fetched into" in r.stderr
    assert (dest / "qairt" / VERSION / "NEW.txt").is_file()


def test_a_leftover_tree_without_marker_is_replaced(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    dest = tmp_path / "opt"
    leftover = dest / "qairt" / VERSION / "bin"
    leftover.mkdir(parents=True)
    (leftover / "half-written").write_bytes(b"x")
    r = _fetch(hub, _matrix(tmp_path), dest)
    assert r.returncode == 0, r.stderr
    assert not (leftover / "half-written").exists() and _installed(dest)["version"] == VERSION
    assert sorted(p.name for p in dest.iterdir()) == ["qairt"]  # no staging folder left


def test_env_lines_are_absolute_and_prepend(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    matrix = _matrix(tmp_path)
    ndk = tmp_path / "ndk"
    ndk.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": f"/usr/local/bin:{os.environ['PATH']}", "LD_LIBRARY_PATH": "/opt/lib",
           "PYTHONPATH": f"{REPO}:/opt/py", "ANDROID_NDK_HOME": str(ndk)}
    r = _fetch(hub, matrix, Path("opt"), cwd=work, **env)  # a relative --dest
    assert r.returncode == 0, r.stderr
    root = (work / "opt" / "qairt" / VERSION).resolve()
    lines = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert lines["QNN_SDK_ROOT"] == str(root)
    assert lines["PYTHONPATH"] == f"{root}/lib/python:{REPO}:/opt/py"
    assert lines["PATH"] == f"{root}/bin/x86_64-linux-clang:{ndk}:{env['PATH']}"
    assert lines["LD_LIBRARY_PATH"] == f"{root}/lib/x86_64-linux-clang:/opt/lib"
    assert lines["ANDROID_NDK_ROOT"] == str(ndk)
    r = run_cli("sdk", "env", "--matrix", str(matrix), "--dest", "opt", cwd=work, env={**os.environ, **env})
    assert r.stdout == "\n".join(f"{k}={v}" for k, v in lines.items()) + "\n"


def test_record_writes_flow_style_and_says_recorded_only_when_it_changed(hub, tmp_path):
    commit = hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    data = yaml.safe_load(DEMO_MATRIX.read_text())
    matrix = _matrix(tmp_path)
    text = matrix.read_text()
    start, end = text.index("sdk:"), text.index("release:") if "release:" in text else text.index("models:")
    matrix.write_text(text[:start] + FLOW[FLOW.index("sdk:"):] + text[end:])
    r = _fetch(hub, matrix, tmp_path / "opt", "--record")
    assert r.returncode == 0 and "recorded" in r.stderr, r.stderr
    pinned = yaml.safe_load(matrix.read_text())
    assert pinned["sdk"]["qairt"][0]["revision"] == commit and "# flow style, no pins yet" in matrix.read_text()
    assert pinned["models"] == data["models"]
    before = matrix.read_text()
    r = _fetch(hub, matrix, tmp_path / "opt", "--record")
    assert r.returncode == 0 and "recorded" not in r.stderr and "already pins" in r.stderr
    assert matrix.read_text() == before


@pytest.mark.parametrize("how", ["flag", "matrix"])
def test_a_bad_revision_names_repo_revision_and_file(hub, tmp_path, how):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    bad = "d" * 40
    secret = "hf_SECRETSECRETSECRET0123456789"
    if how == "flag":
        r = _fetch(hub, _matrix(tmp_path), tmp_path / "opt", "--revision", "no-such-branch", HF_TOKEN=secret)
        bad = "no-such-branch"
    else:
        r = _fetch(hub, _matrix(tmp_path, revision=bad), tmp_path / "opt", HF_TOKEN=secret)
    line = one_line_error(r, 4)
    assert secret not in r.stdout + r.stderr
    assert REPO_ID in line and repr(bad) in line and f"v{VERSION}.zip" in line and "not found" in line


def test_a_dest_that_cannot_be_written_is_one_line(hub, tmp_path):
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path))
    dest = tmp_path / "a-file"
    dest.write_text("not a folder")
    line = one_line_error(_fetch(hub, _matrix(tmp_path), dest), 2)
    assert f"--dest {dest}" in line and dest.read_text() == "not a folder"
    assert not (tmp_path / "cache" / "downloads").exists()


def test_a_link_that_stays_inside_the_sdk_tree_is_kept(hub, tmp_path):
    """Whether the QAIRT zip holds links is not documented: one that stays inside is unpacked as a link."""
    link = (f"qairt/{VERSION}/lib/x86_64-linux-clang/libQnnHtp.so.1", b"libQnnHtp.so", 0o120777)
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", sdk_zip(tmp_path, [link]))
    dest = tmp_path / "opt"
    r = _fetch(hub, _matrix(tmp_path), dest)
    assert r.returncode == 0, r.stderr
    got = dest / "qairt" / VERSION / "lib" / "x86_64-linux-clang" / "libQnnHtp.so.1"
    assert got.is_symlink() and os.readlink(got) == "libQnnHtp.so"


def test_the_image_stage_fetches_with_the_standard_library_alone(hub, tmp_path):
    """Dockerfile-2.40's first stage runs ci_tools/qairt_zip.py on its own (no toolkit installed)."""
    import hashlib
    import shutil
    import subprocess
    import sys

    data = sdk_zip(tmp_path, [])
    hub.state.add_file(REPO_ID, f"v{VERSION}.zip", data)
    commit = hub.state.repos[REPO_ID]["commit"]
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(REPO / "ci_tools" / "qairt_zip.py", alone / "qairt_zip.py")
    args = [sys.executable, "-I", str(alone / "qairt_zip.py"), "fetch", hub.url, REPO_ID, commit, f"v{VERSION}.zip"]
    r = subprocess.run([*args, hashlib.sha256(data).hexdigest(), VERSION, str(tmp_path / "opt")],
                       capture_output=True, text=True, cwd=alone)
    assert r.returncode == 0, r.stderr
    marker = json.loads((tmp_path / "opt" / "qairt" / VERSION / ".qnn-release-sdk.json").read_text())
    assert marker["sha256"] == hashlib.sha256(data).hexdigest() and marker["revision"] == commit
    r = subprocess.run([*args, "0" * 64, VERSION, str(tmp_path / "opt2")], capture_output=True, text=True, cwd=alone)
    assert r.returncode == 4 and "does not match the pin" in r.stderr


def test_the_image_fetch_sends_the_hub_token_to_the_hub_only(tmp_path, monkeypatch):
    """The Hub's resolve/ URLs redirect to CDN hosts; urllib copies ordinary headers to the redirect target,
    so the token must be an unredirected header (audit workflows-first-tag #9)."""
    from http.server import BaseHTTPRequestHandler

    from ci_tools import qairt_zip
    from tests.fakes.local_server import LocalServer

    seen: dict[str, str | None] = {}

    class Cdn(BaseHTTPRequestHandler):
        def do_GET(self):
            seen["cdn"] = self.headers.get("Authorization")
            self.send_response(404)
            self.end_headers()

        def log_message(self, *a):
            pass

    with LocalServer(Cdn) as cdn:
        class Hub(BaseHTTPRequestHandler):
            def do_GET(self):
                seen["hub"] = self.headers.get("Authorization")
                self.send_response(302)
                self.send_header("Location", cdn.url.replace("127.0.0.1", "localhost") + "/blob")
                self.end_headers()

            def log_message(self, *a):
                pass

        with LocalServer(Hub) as hub:
            monkeypatch.setenv("HF_TOKEN", "hf_SECRET")
            monkeypatch.setattr(qairt_zip.time, "sleep", lambda s: None)
            pin = qairt_zip.PinnedZip(repo="o/r", revision="0" * 40, file="v.zip", sha256="0" * 64,
                                      version="2.40.0.251030")
            with pytest.raises(qairt_zip.ZipRefused):
                qairt_zip.fetch(hub.url, pin, tmp_path / "sdk")
    assert seen["hub"] == "Bearer hf_SECRET" and seen["cdn"] is None
