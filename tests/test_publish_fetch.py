"""publish and fetch against a local GitHub-compatible server, with faults injected."""

from __future__ import annotations

import json
import os
import tarfile
import threading
from pathlib import Path

import pytest

from ci_tools.errors import NoBuildForChip, PackageError, PublishError, SourceError, UsageError
from ci_tools.release.fetch import fetch_model
from ci_tools.release.github import Connection
from ci_tools.release.publish import publish
from tests.conftest import run_cli
from tests.fakes.fake_github import FakeGitHub
from tests.support.release_fixture import SDK, make_release

REPO, TAG = "acme/models", "v1.0.0"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Partial downloads go to <cache>/downloads: a per-test cache, fast retries (CLI children inherit both)."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("QNN_RELEASE_RETRY_BASE", "0.001")


@pytest.fixture
def gh():
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def release(tmp_path):
    return make_release(tmp_path / "release", TAG)


def _publish(gh, folder, **kw):
    return publish(folder, REPO, TAG, **kw, via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))


def _expected_names(folder: Path) -> list[str]:
    m = json.loads((folder / "manifest.json").read_text())
    return sorted([a["name"] for a in m["assets"]] + ["manifest.json", "SHA256SUMS", "RELEASE_NOTES.md"])


def test_publish_creates_draft_uploads_all_then_publishes(gh, release):
    _publish(gh, release)
    (rel,) = gh.releases(REPO, TAG)
    assert rel["draft"] is False and rel["body"].startswith("# v1.0.0")
    assert gh.asset_names(rel["id"]) == _expected_names(release)
    uploads = [p for m, p, _ in gh.state.log if m == "POST" and p.startswith("/uploads/")]
    assert "manifest.json" in uploads[-1] and "SHA256SUMS" in uploads[-2]  # what clients read goes last
    patches = [i for i, (m, p, _) in enumerate(gh.state.log) if m == "PATCH" and "/releases/" in p]
    assert patches and patches[-1] > max(i for i, (m, p, _) in enumerate(gh.state.log) if p.startswith("/uploads/"))
    for m, _, headers in gh.state.log:
        if m == "POST" and "Content-Length" in headers:
            assert headers["Content-Type"]


def test_publish_is_idempotent_and_never_overwrites_silently(gh, release, tmp_path):
    _publish(gh, release)
    n_uploads = sum(1 for m, p, _ in gh.state.log if p.startswith("/uploads/"))
    plan = _publish(gh, release)
    assert sum(1 for m, p, _ in gh.state.log if p.startswith("/uploads/")) == n_uploads
    assert all(a.startswith("skip") for a in plan.actions)
    changed = make_release(tmp_path / "changed", TAG, seed=7)
    with pytest.raises(PublishError, match="already published with other content"):
        _publish(gh, changed)
    (rel,) = gh.releases(REPO, TAG)
    assert len(gh.asset_names(rel["id"])) == len(_expected_names(release))


def test_replace_swaps_content_and_keeps_one_version_visible(gh, release, tmp_path):
    _publish(gh, release)
    changed = make_release(tmp_path / "changed", TAG, seed=7)
    _publish(gh, changed, replace=True)
    (rel,) = gh.releases(REPO, TAG)
    assert gh.asset_names(rel["id"]) == _expected_names(changed)
    stored = {a["name"]: a["data"] for a in gh.state.assets.values()}
    name = next(n for n in stored if n.startswith("vad-sm8750"))
    assert stored[name] == (changed / name).read_bytes()
    # the new version was uploaded (under a temporary name) before the old one was touched
    log = [(m, p) for m, p, _ in gh.state.log if m in ("POST", "PATCH", "DELETE")]
    first_new = next(i for i, (m, p) in enumerate(log) if m == "POST" and ".new-" in p)
    first_delete = next(i for i, (m, p) in enumerate(log) if m == "DELETE")
    assert first_new < first_delete


def test_dry_run_changes_nothing(gh, release):
    plan = publish(release, REPO, TAG, dry_run=True, via=Connection(token=None, api_url=gh.url))
    assert plan.actions[0] == f"create draft release for {TAG}"
    assert any(a.startswith("upload manifest.json") for a in plan.actions)
    assert gh.state.releases == {} and not [m for m, _, _ in gh.state.log if m != "GET"]


def test_faults_500_429_secondary_and_dropped_upload(gh, release):
    gh.fault("POST", r"^/uploads/", "500", count=2)
    gh.fault("GET", r"/releases/tags/", "429", count=1)
    gh.fault("POST", r"^/repos/.*/releases$", "403-secondary", count=1)
    gh.fault("POST", r"^/uploads/", "drop-after-store", count=1)  # stored, but the client never hears so
    _publish(gh, release)
    (rel,) = gh.releases(REPO, TAG)
    assert rel["draft"] is False
    names = [a["name"] for a in gh.state.assets.values()]
    assert sorted(names) == _expected_names(release)  # nothing lost, nothing duplicated


def test_a_failure_leaves_a_draft_not_a_half_published_release(gh, release):
    gh.fault("POST", r"manifest\.json", "500", count=100)
    with pytest.raises(PublishError):
        _publish(gh, release)
    (rel,) = gh.releases(REPO, TAG)
    assert rel["draft"] is True
    assert gh.asset_names(rel["id"])  # the archives are there, but nobody sees the release
    with pytest.raises(PublishError, match="no published release"):
        fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=Path(release) / "x", via=Connection(api_url=gh.url))
    gh.state.faults.clear()
    _publish(gh, release)  # the next run resumes and publishes
    (rel,) = gh.releases(REPO, TAG)
    assert rel["draft"] is False and gh.asset_names(rel["id"]) == _expected_names(release)


def test_two_publishers_racing_on_one_tag(gh, release):
    gh.state.create_delay = 0.3
    errors = []

    def run():
        try:
            _publish(gh, release)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    rels = gh.releases(REPO, TAG)
    assert len(rels) == 1 and rels[0]["draft"] is False
    assert sorted(a["name"] for a in gh.state.assets.values()) == _expected_names(release)


def test_fetch_resolves_alias_resumes_and_checks_sha(gh, release, tmp_path):
    _publish(gh, release)
    gh.fault("GET", r"/releases/download/.*vad-sm8750", "drop-mid-body", count=1)
    dest = tmp_path / "models"
    res = fetch_model(f"{REPO}@{TAG}", "vad", soc="sm8750-ac", dest=dest,
                      via=Connection(api_url=gh.url, sleep=lambda s: None))
    assert res.soc == "SM8750" and res.archive.startswith("vad-sm8750-fp16")
    assert (Path(res.path) / "vad_ctx_qnn.bin").read_bytes().endswith(b"SM8750")
    assert res.qnn_libs == f"qnn-libs-{SDK}.tar.bz2"
    assert (Path(res.qnn_libs_path) / "libQnnHtpV79Skel.so").is_file()
    ranges = [h.get("Range") for m, p, h in gh.state.log if "vad-sm8750" in p]
    assert any(r and r.startswith("bytes=") and r != "bytes=0-" for r in ranges), "did not resume"
    gh.fault("GET", r"/releases/download/.*vad-sm8550", "corrupt", count=1)
    res = fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8550", dest=tmp_path / "m2",
                      via=Connection(api_url=gh.url, sleep=lambda s: None))
    assert (Path(res.path) / "vad_ctx_qnn.bin").read_bytes().endswith(b"SM8550")


def test_fetch_no_build_for_chip_is_exit_3(gh, release, tmp_path):
    _publish(gh, release)
    with pytest.raises(NoBuildForChip, match="no NPU build of vad for SM8650: use the CPU model"):
        fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8650", dest=tmp_path / "d", via=Connection(api_url=gh.url))
    env = {**os.environ, "GITHUB_API_URL": gh.url}
    r = run_cli("fetch", "--release", f"{REPO}@{TAG}", "--model", "vad", "--soc", "MT6989", "--dest",
                str(tmp_path / "d"), env=env)
    assert r.returncode == 3 and "no NPU build of vad for MT6989: use the CPU model" in r.stderr
    r = run_cli("fetch", "--release", f"{REPO}@{TAG}", "--model", "vad", "--soc", "sm8750-ac", "--dest",
                str(tmp_path / "ok"), "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["soc"] == "SM8750"


def _tar(path: Path, members: list[tuple]) -> None:
    """A .tar.bz2 of (name, data, TarInfo attributes) in this order, as an attacker would write it."""
    import io

    with tarfile.open(path, "w:bz2", compresslevel=1) as tar:
        for name, data, attrs in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for k, v in attrs.items():
                setattr(info, k, v)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


SYM, HARD, DIR = {"type": tarfile.SYMTYPE}, {"type": tarfile.LNKTYPE}, {"type": tarfile.DIRTYPE}


def _evil_members(top: str, kind: str) -> list[tuple]:
    ok = [(top, b"", DIR), (f"{top}/ok.bin", b"x", {})]
    return ok + {
        "traversal": [(f"{top}/../../evil.txt", b"x", {})],
        "absolute": [("/tmp/evil-absolute.txt", b"x", {})],
        "symlink": [(f"{top}/link", b"", {**SYM, "linkname": "../../../../etc"})],
        "hardlink": [(f"{top}/hard", b"", {**HARD, "linkname": "../outside.txt"})],
        # each link looks harmless where it is created; together they climb out
        "link-chain": [(f"{top}/b", b"", {**SYM, "linkname": "."}), (f"{top}/a", b"", {**SYM, "linkname": "b/.."}),
                       (f"{top}/a/evil.txt", b"x", {})],
        "dir-then-link": [(f"{top}/d", b"", {**SYM, "linkname": ".."}), (f"{top}/d/evil.txt", b"x", {})],
        "later-link-turns-earlier-outward": [(f"{top}/l", b"", {**SYM, "linkname": "x/../y"}),
                                             (f"{top}/x", b"", {**SYM, "linkname": "."})],
        "hardlink-through-link": [(f"{top}/up", b"", {**SYM, "linkname": "."}),
                                  (f"{top}/h", b"", {**HARD, "linkname": f"{top}/up/../../outside.txt"})],
        "outside-top": [("other-folder/x.bin", b"x", {})],
        "device": [(f"{top}/dev", b"", {"type": tarfile.CHRTYPE})],
        "setuid": [(f"{top}/tool", b"x", {"mode": 0o4755})],
        "duplicate": [(f"{top}/ok.bin", b"y", {})],
        "file-through-link": [(f"{top}/l", b"", {**SYM, "linkname": "ok.bin"}),
                              (f"{top}/self", b"", {**SYM, "linkname": "."}), (f"{top}/self/l", b"y", {})],
    }[kind]


def _publish_with_model_archive(gh, tmp_path, write) -> tuple[Path, str]:
    """A release whose SM8750 archive is whatever ``write(path, top)`` writes (manifest and sums updated)."""
    from ci_tools.sources.store import sha256_file

    folder = make_release(tmp_path / "rel", TAG, socs=("SM8750",))
    manifest = json.loads((folder / "manifest.json").read_text())
    model = next(a for a in manifest["assets"] if a["kind"] == "model")
    top = model["name"].removesuffix(".tar.bz2")
    write(folder / model["name"], top)
    model["size"], model["sha256"] = (folder / model["name"]).stat().st_size, sha256_file(folder / model["name"])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "SHA256SUMS").write_text("".join(f"{a['sha256']}  {a['name']}\n" for a in manifest["assets"]))
    _publish(gh, folder)
    return folder, top


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else ["<absent>"]


EVIL = ["traversal", "absolute", "symlink", "hardlink", "link-chain", "dir-then-link",
        "later-link-turns-earlier-outward", "hardlink-through-link", "outside-top", "device", "setuid", "duplicate",
        "file-through-link"]


@pytest.mark.parametrize("kind", EVIL)
def test_fetch_refuses_malicious_archives_with_our_own_checks(gh, tmp_path, kind, monkeypatch):
    # Python versions without extraction filters: our checks alone must refuse, and nothing may extract
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    monkeypatch.setattr(tarfile.TarFile, "extractall", lambda *a, **k: pytest.fail("extractall was used"))
    _publish_with_model_archive(gh, tmp_path, lambda path, top: _tar(path, _evil_members(top, kind)))
    dest = tmp_path / "outer" / "dest"
    with pytest.raises(PackageError, match="refused") as e:
        fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=dest, via=Connection(api_url=gh.url))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "outer").exists()  # DEST as before: not even created
    assert not Path("/tmp/evil-absolute.txt").exists() and not (tmp_path / "evil.txt").exists()
    assert not (tmp_path / "cache" / "downloads").exists()  # a refused archive is not kept either


def test_links_inside_the_archive_are_extracted(gh, tmp_path):
    def write(path, top):
        _tar(path, [(top, b"", DIR), (f"{top}/lib", b"", DIR), (f"{top}/lib/libQnnHtp.so.2", b"ELF", {}),
                    (f"{top}/lib/libQnnHtp.so", b"", {**SYM, "linkname": "libQnnHtp.so.2"}),
                    (f"{top}/copy.so", b"", {**HARD, "linkname": f"{top}/lib/libQnnHtp.so.2"})])

    _publish_with_model_archive(gh, tmp_path, write)
    res = fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / "d", via=Connection(api_url=gh.url))
    assert (Path(res.path) / "lib" / "libQnnHtp.so").read_bytes() == b"ELF"
    assert (Path(res.path) / "lib" / "libQnnHtp.so").is_symlink() and (Path(res.path) / "copy.so").is_file()


def _many_members(path, top):
    _tar(path, [(top, b"", DIR)] + [(f"{top}/f{i}", b"", {}) for i in range(20_000)])


def _huge_member(path, top):
    import bz2

    info = tarfile.TarInfo(f"{top}/huge.bin")
    info.size = 9 * 1024**3  # declared only: the refusal comes before any data is read
    path.write_bytes(bz2.compress(info.tobuf(tarfile.PAX_FORMAT)))


def test_fetch_refuses_absurd_archives_before_reading_them(gh, tmp_path):
    for write, message in ((_many_members, "more than 10000 members"), (_huge_member, "expands to more than 8 GiB")):
        with FakeGitHub() as server:
            _publish_with_model_archive(server, tmp_path / message[:4], write)
            with pytest.raises(PackageError, match=message):
                fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / "d",
                            via=Connection(api_url=server.url))
            assert not (tmp_path / "d").exists()


def test_fetch_returns_folders_that_exist(gh, release, tmp_path):
    _publish(gh, release)
    res = fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8550", dest=tmp_path / "d", via=Connection(api_url=gh.url))
    assert Path(res.path).is_dir() and Path(res.qnn_libs_path).is_dir()
    assert all(Path(f).is_file() for f in res.files) and len(res.files) == 5
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [Path(res.qnn_libs_path).name, Path(res.path).name]


def test_resume_gives_up_on_lack_of_progress_not_on_a_count(gh, release, tmp_path):
    _publish(gh, release)
    # every attempt brings half of what is left: twelve drops in a row still make progress
    gh.fault("GET", r"/releases/download/.*vad-sm8750", "drop-mid-body", count=12)
    res = fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / "d",
                      via=Connection(api_url=gh.url, sleep=lambda s: None))
    assert (Path(res.path) / "vad_ctx_qnn.bin").read_bytes().endswith(b"SM8750")
    assert not (tmp_path / "cache" / "downloads").exists()


def test_a_failed_download_keeps_its_part_and_the_next_run_resumes(gh, release, tmp_path):
    _publish(gh, release)
    gh.fault("GET", r"/releases/download/.*vad-sm8750", "drop-mid-body", count=1)
    gh.fault("GET", r"/releases/download/.*vad-sm8750", "500", count=1000)
    dest = tmp_path / "d"
    with pytest.raises(SourceError, match="gave up") as e:
        fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=dest,
                    via=Connection(api_url=gh.url, sleep=lambda s: None))
    assert "it resumes" in str(e.value) and not dest.exists()
    (part,) = (tmp_path / "cache" / "downloads").glob("*.part")
    kept = part.stat().st_size
    assert kept > 0
    gh.state.faults.clear()
    n = len(gh.state.log)
    fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=dest, via=Connection(api_url=gh.url))
    ranges = [h.get("Range") for m, p, h in gh.state.log[n:] if "vad-sm8750" in p]
    assert ranges[0] == f"bytes={kept}-"
    assert not (tmp_path / "cache" / "downloads").exists()


def test_a_failed_fetch_leaves_an_existing_dest_as_it_was(gh, tmp_path):
    folder = make_release(tmp_path / "good", TAG, socs=("SM8750",))
    _publish(gh, folder)
    dest = tmp_path / "d"
    fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=dest, via=Connection(api_url=gh.url))
    (dest / "mine.txt").write_text("keep")
    before = {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    with FakeGitHub() as evil:  # the same tag elsewhere, with a refused archive
        _publish_with_model_archive(evil, tmp_path / "evil", lambda p, top: _tar(p, _evil_members(top, "link-chain")))
        with pytest.raises(PackageError):
            fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=dest, via=Connection(api_url=evil.url))
    with pytest.raises(NoBuildForChip):
        fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8650", dest=dest, via=Connection(api_url=gh.url))
    assert {p: p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before


def test_a_dest_that_cannot_be_written_is_a_usage_error(gh, release, tmp_path):
    _publish(gh, release)
    dest = tmp_path / "a-file"
    dest.write_text("not a folder")
    with pytest.raises(UsageError, match="cannot write there"):
        fetch_model(f"{REPO}@{TAG}", "vad", soc="SM8750", dest=dest, via=Connection(api_url=gh.url))
    assert dest.read_text() == "not a folder"


def one_line_error(r, code: int) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, r.stderr
    assert len(lines) == 1 and lines[0].startswith("qnn-release: error: "), r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    return lines[0]


def test_every_fetch_failure_is_one_line_with_its_exit_code(gh, tmp_path):
    _publish_with_model_archive(gh, tmp_path, lambda p, top: _tar(p, _evil_members(top, "link-chain")))
    env = {**os.environ, "GITHUB_API_URL": gh.url}

    def fetch(*extra, soc="SM8750", tag=TAG):
        return run_cli("fetch", "--release", f"{REPO}@{tag}", "--model", "vad", "--soc", soc,
                       "--dest", str(tmp_path / "d"), *extra, env=env)

    assert "refused" in one_line_error(fetch(), 9)
    assert "no NPU build of vad for SM8650" in one_line_error(fetch(soc="SM8650"), 3)
    assert "no published release v9" in one_line_error(fetch(tag="v9"), 10)
    gh.fault("GET", r"/releases/tags/", "drop", count=1000)
    assert "gave up after 6 attempts (ConnectionError)" in one_line_error(fetch(), 4)
    gh.state.faults.clear()
    gh.fault("GET", r"/releases/download/.*manifest", "500", count=1000)
    assert "gave up after 6 attempts (HTTP 500)" in one_line_error(fetch(), 4)
    assert not (tmp_path / "d").exists()


def test_publish_says_the_release_was_published(gh, release):
    env = {**os.environ, "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": gh.state.token}
    r = run_cli("publish", str(release), "--repo", REPO, "--tag", TAG, env=env)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "now published" in first and "draft release" not in first
    r = run_cli("publish", str(release), "--repo", REPO, "--tag", TAG, env=env)
    assert r.stdout.splitlines()[0].startswith(f"done: {REPO}@{TAG} (published release ")


def test_token_never_printed(gh, release, tmp_path):
    secret = "ghp_SECRETSECRETSECRET1234"
    env = {**os.environ, "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": secret}
    r = run_cli("--verbose", "publish", str(release), "--repo", REPO, "--tag", TAG, env=env)  # wrong token: 401
    assert r.returncode == 10 and "Bad credentials" in r.stderr and "GITHUB_TOKEN" in r.stderr
    assert secret not in r.stdout + r.stderr
    env["GITHUB_TOKEN"] = gh.state.token
    r = run_cli("--verbose", "publish", str(release), "--repo", REPO, "--tag", TAG, env=env)
    assert r.returncode == 0, r.stderr
    assert gh.state.token not in r.stdout + r.stderr
    r = run_cli("--verbose", "fetch", "--release", f"{REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
                "--dest", str(tmp_path / "d"), env=env)
    assert r.returncode == 0 and gh.state.token not in r.stdout + r.stderr


def test_fetch_asks_the_device_through_adb(gh, release, tmp_path):
    """`--adb SERIAL` runs `adb -s SERIAL shell getprop ro.soc.model` (an adb stand-in on PATH answers it)."""
    _publish(gh, release)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    adb = bindir / "adb"
    adb.write_text('#!/bin/sh\n[ "$1 $2 $3 $4 $5" = "-s R5CX shell getprop ro.soc.model" ] || exit 1\necho SM8750-AC\n')
    adb.chmod(0o755)
    env = {**os.environ, "GITHUB_API_URL": gh.url, "PATH": f"{bindir}:{os.environ['PATH']}"}
    r = run_cli("fetch", "--release", f"{REPO}@{TAG}", "--model", "vad", "--adb", "R5CX", "--dest",
                str(tmp_path / "d"), "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["soc"] == "SM8750"
    r = run_cli("fetch", "--release", f"{REPO}@{TAG}", "--model", "vad", "--adb", "OTHER", "--dest",
                str(tmp_path / "e"), env=env)
    assert r.returncode == 2 and "adb getprop ro.soc.model failed" in r.stderr


def test_latest_and_previous_follow_version_order_not_creation_order(tmp_path):
    """A v1.0.1 hotfix published after v1.1.0 does not become "latest"; v1.1.0's notes compare with v1.0.x (not
    its own rc), and the hotfix's with v1.0.0 (not the newer v1.1.0)."""
    from ci_tools.release.previous import previous_manifest

    repo = "acme/models"
    with FakeGitHub() as gh:
        def release(tag: str) -> dict:
            publish(make_release(tmp_path / tag, tag=tag), repo, tag,
                    via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))
            (rel,) = gh.releases(repo, tag)
            return rel

        assert release("v1.0.0")["make_latest"] == "true"
        assert release("v1.1.0-rc1")["make_latest"] == "false"
        assert release("v1.1.0")["make_latest"] == "true"
        assert release("v1.0.1")["make_latest"] == "false"  # published last, yet behind v1.1.0

        def previous(tag: str) -> str | None:
            return previous_manifest(repo, tag, tmp_path / f"prev-{tag}.json", token=gh.state.token, api_url=gh.url)

        assert previous("v1.1.0") == "v1.0.1"  # the highest final release below it, not v1.1.0-rc1
        assert previous("v1.0.1") == "v1.0.0"  # not v1.1.0, though it is newer
        assert previous("v1.2.0-rc1") == "v1.1.0"
        assert previous("v1.0.0") is None
        assert json.loads((tmp_path / "prev-v1.0.0.json").read_text())["tag"] is None


def test_a_release_over_githubs_asset_limit_is_refused_before_anything_is_uploaded(gh, tmp_path):
    """GitHub holds at most 1,000 assets per release (issue #33): publish says so up front, not after hundreds of
    uploads; the stand-in refuses the 1,001st upload as GitHub does."""
    import hashlib
    import json

    from ci_tools.errors import PublishError

    folder = make_release(tmp_path / "big", TAG, socs=("SM8750",), payload=10)
    manifest = json.loads((folder / "manifest.json").read_text())
    for i in range(1000):  # with the model, qnn-libs, notes, SHA256SUMS and manifest: 1,005 files
        name = f"extra-{i:04d}.tar.bz2"
        (folder / name).write_bytes(str(i).encode())
        manifest["assets"].append({"name": name, "kind": "qnn-include", "sdk_version": manifest["sdk_versions"][0],
                                   "htp_archs": [], "size": len(str(i)),
                                   "sha256": hashlib.sha256(str(i).encode()).hexdigest()})
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PublishError, match=r"1005 assets for release v.*; a GitHub release holds at most 1000"):
        _publish(gh, folder)
    assert not gh.state.releases and not gh.state.assets  # nothing created, nothing half-published

    # the stand-in: a release that already holds 1,000 assets refuses the next upload (422)
    import requests

    headers = {"Authorization": f"Bearer {gh.state.token}", "Accept": "application/vnd.github+json"}
    rel = requests.post(f"{gh.url}/repos/{REPO}/releases", json={"tag_name": "big", "draft": True},
                        headers=headers, timeout=10).json()
    upload = f"{gh.url}/uploads/repos/{REPO}/releases/{rel['id']}/assets"
    for i in range(1000):
        r = requests.post(upload, params={"name": f"a{i}"}, data=b"x", timeout=10,
                          headers={**headers, "Content-Type": "application/octet-stream"})
        assert r.status_code == 201, r.text
    r = requests.post(upload, params={"name": "a1000"}, data=b"x", timeout=10,
                      headers={**headers, "Content-Type": "application/octet-stream"})
    assert r.status_code == 422 and "at most 1000" in r.text
