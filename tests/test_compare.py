"""#44 item 1: `qnn-release compare OLD NEW` on two packaged releases, altered by hand as an SDK bump could alter
them: each change shows first with its numbers, the check fails on a regression and passes on none or an accepted
one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from ci_tools.release.archive import make_tar_bz2
from ci_tools.sources.store import sha256_file
from tests.conftest import REPO, run_cli


def _target(folder: Path, model: str, soc: str, *, snr: float = 30.0, pad: int = 0, verdict: str = "real-samples",
            runtime: str = "2.50.40", device_ms: float | None = None) -> dict:
    stem = f"{model}-{soc.lower()}-fp16-qnn{runtime}"
    meta = {"numbers": {"g": {"parity_vs_cpu": {"cosine": 0.9999, "snr_db": snr}, "emulator_latency_ms": 12.5}}}
    path = make_tar_bz2(folder / f"{stem}.tar.bz2", [(f"{stem}/metadata.json", json.dumps(meta).encode()),
                                                     (f"{stem}/g_ctx_qnn.bin", bytes(1000) + os.urandom(pad))])
    return {"name": path.name, "kind": "model", "model": model, "soc": soc, "soc_aliases": [soc.lower()],
            "precision": "fp16", "sdk_version": runtime, "qnn_runtime": runtime, "graphs": ["g"],
            "size": path.stat().st_size, "sha256": sha256_file(path), "verified": verdict != "not-verified",
            "verified_on": verdict, "cosine": 0.9999, "compile_seconds": 1.0,
            "device": {"via": "ai-hub", "status": "ok", "device": "Galaxy S25", "latency_ms": device_ms}
            if device_ms else None}


def _release(folder: Path, assets: list[dict], skipped: list[str] = ()) -> Path:
    (folder / "manifest.json").write_text(json.dumps({"manifest_version": 1, "tag": folder.name, "toolkit": "t",
                                                      "sdk_versions": [], "skipped": list(skipped),
                                                      "assets": assets}))
    return folder


def _pair(tmp: Path):
    old, new = tmp / "v1", tmp / "v2"
    old.mkdir()
    new.mkdir()
    _release(old, [_target(old, "a", "SM8750"), _target(old, "a", "SM8650"), _target(old, "b", "SM8750"),
                   _target(old, "c", "SM8750"), _target(old, "e", "SM8750", device_ms=2.0),
                   _target(old, "f", "SM8750")])
    _release(new, [_target(new, "a", "SM8750", snr=25.0, runtime="2.51.0"),  # SNR down 5 dB
                   _target(new, "a", "SM8650", pad=200_000, runtime="2.51.0"),  # the binary grew
                   _target(new, "c", "SM8750", verdict="generated-inputs", runtime="2.51.0"),  # verdict lost
                   _target(new, "d", "SM8750", runtime="2.51.0"),  # added
                   _target(new, "e", "SM8750", device_ms=3.0, runtime="2.51.0"),  # slower on the same device
                   _target(new, "f", "SM8750", snr=29.5, runtime="2.51.0")],  # within bounds
             skipped=["b/SM8750/fp16 (0 of 1 graphs built)"])  # newly failing
    return old, new


def _matrix(tmp: Path, accept: list[str] = ()) -> Path:
    m = yaml.safe_load((REPO / "matrix" / "models.yaml").read_text())
    m.setdefault("release", {})["regressions"] = {"accept": list(accept)}
    path = tmp / "matrix" / "models.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(m))
    return path


def test_each_change_shows_first_with_its_numbers_and_the_check_fails(tmp_path):
    old, new = _pair(tmp_path)
    r = run_cli("compare", str(old), str(new), "--json", "--matrix", str(_matrix(tmp_path)))
    assert r.returncode == 13 and "regressed from v1 to v2" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    rows = {row["target"]: row for row in json.loads(r.stdout)}
    order = [row["target"] for row in json.loads(r.stdout)]
    assert rows["a/SM8750/fp16"]["regressions"] == ["SNR 30.0 -> 25.0 dB"]
    assert rows["a/SM8650/fp16"]["regressions"][0].startswith("size +")
    assert rows["b/SM8750/fp16"]["regressions"] == ["released -> failed (0 of 1 graphs built)"]
    assert rows["c/SM8750/fp16"]["regressions"] == ["verdict real-samples -> generated-inputs"]
    assert rows["e/SM8750/fp16"]["regressions"] == ["device latency +50% on Galaxy S25"]
    assert rows["d/SM8750/fp16"]["changes"] == ["added"] and not rows["d/SM8750/fp16"]["regressions"]
    assert not rows["f/SM8750/fp16"]["regressions"]  # half a dB: within the default bound
    assert "needs QNN runtime >= 2.51.0 (was 2.50.40)" in rows["f/SM8750/fp16"]["changes"]
    assert order.index("f/SM8750/fp16") > max(order.index(t) for t in rows if rows[t]["regressions"])
    md = run_cli("compare", str(old), str(new), "--matrix", str(_matrix(tmp_path))).stdout
    assert "| a/SM8750/fp16 | **SNR 30.0 -> 25.0 dB**" in md and "30.0 → 25.0" in md
    assert "never counted as a regression" in md


def test_accepted_regressions_and_identical_releases_pass(tmp_path):
    old, new = _pair(tmp_path)
    accept = ["a/SM8750/fp16", "a/SM8650/fp16", "b/SM8750/fp16", "c/SM8750/fp16", "e/SM8750/fp16"]
    r = run_cli("compare", str(old), str(new), "--json", "--matrix", str(_matrix(tmp_path, accept)))
    assert r.returncode == 0, r.stderr
    rows = {row["target"]: row for row in json.loads(r.stdout)}
    assert "SNR 30.0 -> 25.0 dB (accepted in the matrix)" in rows["a/SM8750/fp16"]["changes"]
    r = run_cli("compare", str(old), str(old), "--matrix", str(_matrix(tmp_path)))
    assert r.returncode == 0 and "0 regression(s), 0 other change(s), 6 unchanged" in r.stdout
    r = run_cli("compare", str(old), str(tmp_path / "nowhere"), "--matrix", str(_matrix(tmp_path)))
    assert r.returncode == 2 and "neither a release folder nor OWNER/NAME@TAG" in r.stderr


def test_compare_against_the_latest_published_release(tmp_path):
    """What the bump's pull request runs: `compare OWNER/NAME@latest dist/release`, the old side read from GitHub (its
    manifest, under the contract); nothing published yet is every target added, no regression."""
    import os

    from ci_tools.release.github import Connection
    from ci_tools.release.publish import publish
    from tests.fakes.fake_github import FakeGitHub

    old, new = _pair(tmp_path)
    for f in (old, new):  # SHA256SUMS beside the manifest, as package writes it
        m = json.loads((f / "manifest.json").read_text())
        (f / "SHA256SUMS").write_text("".join(f"{a['sha256']}  {a['name']}\n" for a in m["assets"]))
    with FakeGitHub() as gh:
        env = {**os.environ, "GITHUB_API_URL": gh.url}
        r = run_cli("compare", "acme/models@latest", str(new), "--json", "--matrix", str(_matrix(tmp_path)), env=env)
        assert r.returncode == 0, r.stderr
        assert {row["changes"][0] for row in json.loads(r.stdout)} == {"added"}
        m = json.loads((old / "manifest.json").read_text())
        m["tag"] = "v1.0.0"
        (old / "manifest.json").write_text(json.dumps(m))
        publish(old, "acme/models", "v1.0.0", via=Connection(token=gh.state.token, api_url=gh.url,
                                                             sleep=lambda s: None))
        r = run_cli("compare", "acme/models@latest", str(new), "--json", "--matrix", str(_matrix(tmp_path)), env=env)
    assert r.returncode == 13, r.stderr
    rows = {row["target"]: row for row in json.loads(r.stdout)}
    assert rows["c/SM8750/fp16"]["regressions"] == ["verdict real-samples -> generated-inputs"]
    assert rows["a/SM8650/fp16"]["regressions"][0].startswith("size +")
