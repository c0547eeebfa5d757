"""#42: one manifest contract (ci_tools/release/contract.py, docs/reference/manifest-contract.md), the same verdict
from every client: ``qnn-release fetch`` (Python), qnn-fetch.sh (dash with curl, dash with wget, busybox alone) and
the Java resolver, each against the same hostile manifest served by the stand-in GitHub.

Each case breaks one rule; every client must refuse it with exit code 9 naming that rule, before any archive is
requested, leaving DEST as it was. Then the faults around the manifest: a server sending more than an asset's
declared size, fetches sharing a cache or a DEST, a work folder left by a fetch killed with SIGKILL.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from ci_tools.errors import QnnReleaseError
from ci_tools.release import contract
from ci_tools.release.clients import JAVA
from ci_tools.release.fetch import fetch_model
from ci_tools.release.github import Connection
from tests.conftest import REPO
from tests.fakes.fake_github import FakeGitHub
from tests.test_clients import (
    OWNER_REPO,
    TAG,
    _busybox_path,
    _compile_java,
    _java_tools,
    _publish,
    _release,
    _run_sh,
    _serve,
)

CLIENTS = [("dash", None), ("dash", "wget"), ("busybox", None)]


def _model(m: dict) -> dict:
    return next(a for a in m["assets"] if a.get("kind") == "model")


def _pieces(a: dict, sizes: list[int], names: list[str] | None = None) -> None:
    names = names or [f"{a['name']}.{i:03d}" for i in range(1, len(sizes) + 1)]
    a["pieces"] = [{"name": n, "size": s, "sha256": "a" * 64} for n, s in zip(names, sizes)]


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"x": value}
    return value


# (rule it breaks, what, the change to a manifest package made; or bytes served as they are)
CASES = [
    ("json", "nested 200,000 deep", b"[" * 200_000 + b"]" * 200_000),
    ("json", "an object nested 20 deep", lambda m: m.update(extra=_nested(20))),
    ("json", "a string of 10,000 characters", lambda m: m.update(note="n" * 10_000)),
    ("json", "100,000 escaped quotes in one string", lambda m: m.update(note='"' * 100_000)),
    ("json", "cut off", lambda m: None),  # (cut below)
    ("json", "a list, not an object", b"[]"),
    ("json", "a number with leading zeros", lambda m: m.update(extra="@012@")),
    ("json", "a key listed twice", lambda m: m.update(extra="@DUP@")),
    ("json", "a key listed twice inside an asset (its pieces)", lambda m: _model(m).update(extra="@DUP-PIECES@")),
    ("json", "NaN", lambda m: m.update(extra="@NaN@")),
    ("json", "a trailing comma", lambda m: m.update(extra="@TRAILING@")),
    ("json", "a missing comma", lambda m: m.update(extra="@MISSING@")),
    ("json", "an escape JSON does not have", lambda m: m.update(extra="@ESCAPE@")),
    ("json", "a raw tab in a string", lambda m: m.update(extra="@TAB@")),
    ("json", "a number of 5,000 digits", lambda m: m.update(extra="@LONG@")),
    ("json", "3,000 raw non-ASCII characters", lambda m: m.update(extra="\u00e9" * 3000)),
    ("json", "a UTF-8 byte order mark", lambda m: m.update(extra="@BOM@")),
    ("json", "UTF-16", lambda m: m.update(extra="@UTF16@")),
    ("json", "300 numbers between two strings", lambda m: m.update(extra=[1] * 300)),
    ("version", "manifest_version 3", lambda m: m.update(manifest_version=3)),
    ("version", "manifest_version as a string", lambda m: m.update(manifest_version="2")),
    ("version", "manifest_version 2.0", lambda m: m.update(manifest_version=2.0)),
    ("tag", "another tag", lambda m: m.update(tag="v0.0.1")),
    ("parts", "a part outside the release's tags",
     lambda m: m.update(parts=["../../../../other/repo/releases/tags/v1"])),
    ("parts", "a part the layout does not make", lambda m: m.update(parts=[f"{TAG}-part3"])),
    ("parts", "a part listed twice", lambda m: m.update(parts=[f"{TAG}-part2", f"{TAG}-part2"])),
    ("parts", "101 parts", lambda m: m.update(parts=[f"{TAG}-part{k}" for k in range(2, 103)])),
    ("parts", "parts as a string", lambda m: m.update(parts=f"{TAG}-part2")),
    ("assets", "assets as an object", lambda m: m.update(assets={"a": 1})),
    # the count is refused before any asset is read: each of them breaks the asset rules as well (and is small, so
    # that the 100,001 do not cost the shells' awk half a minute to read)
    ("assets", "100,001 assets", lambda m: m.update(assets=[{"name": "a"}] * (contract.MAX_ASSETS_LISTED + 1))),
    ("name", "a name with a path", lambda m: _model(m).update(name="../../evil.tar.bz2")),
    ("name", "a hidden name", lambda m: _model(m).update(name=".evil.tar.bz2")),
    ("name", "a name listed twice", lambda m: m["assets"].append(dict(_model(m)))),
    ("name", "an upper-case sha256", lambda m: _model(m).update(sha256=_model(m)["sha256"].upper())),
    ("json", "a sha256 of 64 digits as a number (past any number's length)", lambda m: _model(m).update(
        sha256="@DIGITS@")),
    ("name", "a sha256 as a number", lambda m: _model(m).update(sha256=12345)),
    ("size", "a size of 10^18", lambda m: _model(m).update(size=10**18)),
    ("size", "a negative size", lambda m: _model(m).update(size=-1)),
    ("size", "a size as a string", lambda m: _model(m).update(size="12")),
    ("size", "a fractional size", lambda m: _model(m).update(size=1.5)),
    ("size", "no size", lambda m: _model(m).pop("size")),
    ("pieces", "a piece listed twice", lambda m: (_pieces(_model(m), [1, 1]), _model(m)["pieces"][1].update(
        name=_model(m)["pieces"][0]["name"]), _model(m).update(size=2))),
    ("pieces", "pieces that do not add up", lambda m: (_pieces(_model(m), [1, 2]), _model(m).update(size=10**9))),
    ("pieces", "pieces out of order", lambda m: (_pieces(_model(m), [1, 1], [_model(m)["name"] + ".002",
                                                                         _model(m)["name"] + ".001"]),
                                                 _model(m).update(size=2))),
    ("pieces", "1,000 pieces", lambda m: (_pieces(_model(m), [1] * 1000), _model(m).update(size=1000))),
    ("pieces", "no pieces in the list", lambda m: _model(m).update(pieces=[])),
    ("release", "a release that is not a part", lambda m: _model(m).update(release=f"{TAG}-part2")),
    ("release", "a release outside the repository", lambda m: _model(m).update(release="../../x/y/releases/v1")),
    ("model", "an unknown precision", lambda m: _model(m).update(precision="fp8")),
    ("model", "no sdk_version", lambda m: _model(m).pop("sdk_version")),
    ("model", "a qnn_runtime that is not a version", lambda m: _model(m).update(qnn_runtime="2.50; rm -rf /")),
    ("model", "a qnn_runtime as a number", lambda m: _model(m).update(qnn_runtime=2.5)),
]


def _served(folder: Path, case) -> bytes:
    _, what, change = case
    if isinstance(change, bytes):
        return change
    m = json.loads((folder / "manifest.json").read_text())
    change(m)
    text = json.dumps(m, ensure_ascii="non-ASCII" not in what)
    text = text[:-40] if what == "cut off" else text
    raw = {'"@012@"': "012", '"@NaN@"': "NaN", '"@TRAILING@"': "[1, 2,]", '"@MISSING@"': "[1 2]",
           '"@ESCAPE@"': '"\\q"', '"@TAB@"': '"a\tb"', '"@LONG@"': "1" * 5000, '"@DIGITS@"': "1" * 64,
           '"extra": "@DUP@"': '"tag": "' + TAG + '"',
           '"extra": "@DUP-PIECES@"': '"pieces": [], "pieces": null'}
    for placeholder, value in raw.items():
        text = text.replace(placeholder, value)
    data = text.encode()
    if '"@BOM@"' in text:
        data = b"\xef\xbb\xbf" + text.replace('"@BOM@"', "1").encode()
    if '"@UTF16@"' in text:
        data = text.replace('"@UTF16@"', "1").encode("utf-16")
    return data


def _java_verdicts(java_classes: Path, manifests: list[Path], base: str) -> list[tuple[int, str]]:
    """The Java resolver's (exit code, rule) for each manifest file, all in one JVM (as its main would answer)."""
    _, java = _java_tools()
    r = subprocess.run([java, "-Xss512k", "-cp", str(java_classes), "qnnrelease.ManifestHarness", base],
                       input="".join(f"{m}\n" for m in manifests), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "Exception in thread" not in r.stderr, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(manifests) and not any(line.startswith("X") for line in lines), lines
    return [(int(code), _rule(message)) for code, message in (line.split("\t", 1) for line in lines)]


def _verdicts(gh, tmp: Path, java_classes: Path | None, clients=CLIENTS) -> dict[str, tuple[int, str]]:
    """Each client's (exit code, the rule its one-line error names) for the manifest the release serves now."""
    out: dict[str, tuple[int, str]] = {}
    try:
        fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc="SM8750", dest=tmp / "py",
                    via=Connection(api_url=gh.url, token=gh.state.token, sleep=lambda s: None))
        out["python"] = (0, "")
    except QnnReleaseError as e:
        out["python"] = (e.exit_code, _rule(e.message))
    for sh, downloader in clients:
        if not shutil.which(sh) or (downloader and not shutil.which(downloader)):
            continue
        r = _run_sh(sh, gh, tmp.parent, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
                    "--dest", str(tmp / f"{sh}-{downloader}"), downloader=downloader)
        assert r.stderr.count("\n") <= 1, r.stderr  # one line, whatever the manifest holds
        out[f"{sh}+{downloader or 'default'}"] = (r.returncode, _rule(r.stderr))
    if java_classes is not None:
        _, java = _java_tools()
        (tmp / "served.json").write_bytes(gh.served)
        base = f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/"
        r = subprocess.run([java, "-Xss512k", "-cp", str(java_classes), "qnnrelease.QnnModelResolver",
                            str(tmp / "served.json"), "vad", "SM8750", "-", base], capture_output=True, text=True,
                           timeout=120)
        assert "Exception in thread" not in r.stderr and "Error" not in r.stderr.split(":")[0], r.stderr
        out["java"] = (r.returncode, _rule(r.stderr))
    return out


def _rule(message: str) -> str:
    found = re.search(r"\(rule (\w+)\)", message)
    return found.group(1) if found else message.strip()


@pytest.fixture(scope="module")
def java_or_none(tmp_path_factory):
    """The Java resolver compiled, or None where there is no JDK (the other clients still run)."""
    if not (shutil.which("javac") and shutil.which("java")):
        return None
    return _compile_java(REPO / JAVA, tmp_path_factory.mktemp("java"))


@pytest.fixture
def gh():
    with FakeGitHub() as server:
        yield server


def test_every_rule_has_a_case():
    assert {rule for rule, _, _ in CASES} == set(contract.RULES)


def test_every_client_refuses_each_hostile_manifest_by_the_same_rule(gh, tmp_path, monkeypatch, java_or_none):
    """The same manifest, the same verdict: exit 9 and the rule it breaks, from Python, dash (curl; wget for the
    size rule), busybox and Java; nothing but the manifest requested, nothing left in DEST; no request outside the
    repository."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")], libs=False)
    _publish(gh, folder)
    verdicts = []
    for i, case in enumerate(CASES):
        rule, what, _ = case
        gh.served = _served(folder, case)
        _serve(gh, "manifest.json", gh.served)
        gh.state.log.clear()
        tmp = tmp_path / f"case{i}"
        tmp.mkdir()
        # dash with wget reads the manifest with the same awk as dash with curl: its downloader's part (a manifest
        # too big, cut off) is the json rule's; the control runs all of them. Java answers every case in one JVM.
        got = _verdicts(gh, tmp, None, clients=[c for c in CLIENTS if c[1] != "wget" or rule == "json"])
        (tmp / "served.json").write_bytes(gh.served)
        verdicts.append((what, rule, got))
        requested = [p for _, p, _ in gh.state.log]
        assert not any(".tar.bz2" in p or (p.startswith("/repos/") and not p.startswith(f"/repos/{OWNER_REPO}/"))
                       for p in requested), (what, requested)
        assert not [p.name for p in tmp.iterdir() if p.name != "served.json"], (what, list(tmp.iterdir()))
    if java_or_none is not None:
        java = _java_verdicts(java_or_none, [tmp_path / f"case{i}" / "served.json" for i in range(len(CASES))],
                              f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/")
        for (_, _, got), verdict in zip(verdicts, java):
            got["java"] = verdict
    wrong = [(what, rule, got) for what, rule, got in verdicts if set(got.values()) != {(9, rule)}]
    assert not wrong, "\n".join(map(str, wrong))


def test_the_unchanged_manifest_passes_every_client(gh, tmp_path, monkeypatch, java_or_none):
    """The control: what package makes passes every rule in every client (a too strict rule fails here)."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")])
    _publish(gh, folder)
    gh.served = (folder / "manifest.json").read_bytes()
    got = _verdicts(gh, tmp_path, java_or_none)
    assert set(got.values()) == {(0, "")} or {c for c, _ in got.values()} == {0}, got


def test_a_server_sending_more_than_the_declared_size_is_cut_off(gh, tmp_path, monkeypatch):
    """Declared sizes bound what is written: an archive that keeps coming is refused (exit 4) once past its size,
    in Python and in every shell, and nothing of it is kept."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")], libs=False)
    _publish(gh, folder)
    name = _model(json.loads((folder / "manifest.json").read_text()))["name"]
    _serve(gh, name, (folder / name).read_bytes() + b"\0" * (1 << 20))  # one MiB more than the manifest says
    with pytest.raises(QnnReleaseError) as e:
        fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / "py",
                    via=Connection(api_url=gh.url, sleep=lambda s: None))
    assert e.value.exit_code == 4 and "more than the" in e.value.message, e.value.message
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and p.stat().st_size > 1 << 20]
    for sh, downloader in CLIENTS:
        if not shutil.which(sh) or (downloader and not shutil.which(downloader)):
            continue
        dest = tmp_path / f"{sh}-{downloader}"
        r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
                    "--dest", str(dest), downloader=downloader)
        assert r.returncode == 4 and "more than the" in r.stderr, (sh, downloader, r.stderr)
        assert not dest.exists()


def test_parallel_fetches_sharing_a_cache_and_a_dest_all_succeed(gh, tmp_path, monkeypatch):
    """Apps and CI run fetches side by side: four Python fetches sharing one cache, four sh fetches sharing one
    DEST; every one succeeds with the right bytes, nothing is left half-written."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")])
    _publish(gh, folder)
    results: list[object] = []

    def run(k: int) -> None:
        try:
            results.append(fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / f"py{k}",
                                       via=Connection(api_url=gh.url, sleep=lambda s: None)).archive)
        except QnnReleaseError as e:  # pragma: no cover - the failure this test is about
            results.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(isinstance(r, str) for r in results), results
    shells = [sh for sh in ("dash", "busybox") if shutil.which(sh)]
    if not shells:
        return
    env_runs = []
    _busybox_path(tmp_path)  # busybox's applets linked once, before the threads share them
    dest = tmp_path / "shared"
    dest.mkdir()
    (dest / ".qnn-fetch.999999").mkdir()  # left by a fetch killed with SIGKILL (no such process)
    (dest / ".qnn-fetch.999999" / "manifest.json").write_text("{}")
    for k in range(4):
        sh = shells[k % len(shells)]
        env_runs.append(threading.Thread(target=lambda sh=sh: results.append(_run_sh(
            sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
            "--dest", str(dest)))))
    for t in env_runs:
        t.start()
    for t in env_runs:
        t.join()
    runs = results[4:]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    tops = [a["name"].removesuffix(".tar.bz2") for a in json.loads((folder / "manifest.json").read_text())["assets"]
            if a["kind"] == "model" or a["kind"] == "qnn-libs"]
    # the archive's folders and the verified downloads; no work folder (the killed fetch's too), no lock
    assert sorted(p.name for p in dest.iterdir()) == sorted([".downloads", *tops])
