"""The clients without Python: qnn-fetch.sh under dash and busybox sh, and the Java resolver (javac + java).

Both must answer like the Python resolver (``ci_tools.catalog.socs``) on every chip spelling of the catalog
and like ``qnn-release fetch`` on every manifest case; qnn-fetch.sh runs against the fake GitHub.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from ci_tools.catalog.socs import load_catalog
from ci_tools.errors import QnnReleaseError
from ci_tools.release.archive import make_tar_bz2
from ci_tools.release.clients import FETCH_SH, JAVA, spelling_table
from ci_tools.release.fetch import AppNeeds, fetch_model
from ci_tools.release.github import Connection
from ci_tools.release.manifest import validate_manifest
from ci_tools.release.publish import publish
from ci_tools.sources.store import sha256_file
from tests.conftest import REPO
from tests.fakes.fake_github import FakeGitHub
from tests.support.clients import _python_chip

OWNER_REPO, TAG, SDK = "acme/models", "v3.1.0", "2.40.0.251030"
SCRIPT = REPO / FETCH_SH
INSTALLER = JAVA.with_name("QnnModelInstaller.java")
COMMONS_COMPRESS = Path("/usr/share/java/commons-compress.jar")


# -- the spellings ------------------------------------------------------------------------------


def _variants(cat) -> list[str]:
    """Every spelling the catalog lists, as devices, users and build scripts write it, and near misses."""
    table, _ = spelling_table(cat)
    base = sorted(set(table) | {s for soc in cat.socs for s in (soc.name, soc.marketing, *soc.aliases) if s})
    out: list[str] = []
    for s in base:
        out += [s, s.upper(), s.title(), f"  {s}\n", f"{s}\r\n", s.replace("-", " "), s.replace("-", "_"),
                s.replace("-", " _ "), f"{s}-AC", f"{s}-ab", f"{s}-AC-x1", f"{s}x", s[:-1]]
    for soc in cat.socs:
        for i in getattr(soc, "soc_ids", []):
            out += [f"soc_id:{i}", f"SOC_ID {i}", f"socid=0{i}", f"soc-id: {i}", f"soc_id:{i}0"]
    out += ["", " ", "\t\n", "SM", "sm875", "sm87500", "MT6989", "Exynos 2400", "soc_id:0", "soc_id:99999",
            "snapdragon", "qualcomm", "-ac", "sm8750--ac", "sm8750-ac-", "SM8750 AC", "sm8750ac", "SM8750-",
            "sm8750-a*", "sm8750-[ac]", "sm8750|sm8550", "'sm8750'", "$(echo SM8750)", "*", "?", "soc_id:",
            "ＳＭ８７５０", "sm8750\x00", "x" * 300]
    return list(dict.fromkeys(out))


# -- Java -----------------------------------------------------------------------------------------

def _java_tools():
    javac, java = shutil.which("javac"), shutil.which("java")
    if not (javac and java):
        pytest.skip("no JDK (javac and java): apt-get install default-jdk-headless to run the Java resolver tests")
    return javac, java


def _compile_java(src: Path, out: Path) -> Path:
    javac, _ = _java_tools()
    out.mkdir(parents=True, exist_ok=True)
    # Java 8 language level and API: what Android API 24 accepts
    r = subprocess.run([javac, "--release", "8", "-Xlint:all", "-Xlint:-options", "-Werror", "-d", str(out), str(src),
                        str(REPO / INSTALLER), str(REPO / "tests" / "java" / "ResolverHarness.java"),
                        str(REPO / "tests" / "java" / "ManifestHarness.java")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory):
    return _compile_java(REPO / JAVA, tmp_path_factory.mktemp("java"))


def _java_chips(classes: Path, spellings: list[str]) -> list[str]:
    _, java = _java_tools()
    stdin = "".join(s.encode().hex() + "\n" for s in spellings)
    r = subprocess.run([java, "-cp", str(classes), "qnnrelease.ResolverHarness"], input=stdin, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_java_and_python_agree_on_every_spelling(java_classes):
    cat = load_catalog()
    spellings = _variants(cat)
    assert len(spellings) > 500
    expected = [_python_chip(cat, s) for s in spellings]
    got = _java_chips(java_classes, spellings)
    wrong = [(s, e, g) for s, e, g in zip(spellings, expected, got) if e != g]
    assert len(got) == len(spellings) and not wrong, wrong[:10]
    assert {"SM8750", "SM8550", "none"} <= set(expected)


BIG_CATALOG = """
version: 1
sources: {t: test}
groups: {}
socs:
  - {name: SM8750, marketing: Snapdragon 8 Elite, kind: phone, soc_model: 69, htp_arch: 79, vtcm_mb: 8, fp16: true,
     aliases: [sm8750-ac, qualcomm-snapdragon-8-elite, sun], sources: &all {soc_model: [t], htp_arch: [t],
     vtcm_mb: [t], fp16: [t]}}
  - {name: SM7675, marketing: "Snapdragon 7+ Gen 3", kind: phone, soc_model: 70, htp_arch: 73, vtcm_mb: 4,
     fp16: true, aliases: [cliffs, qualcomm-snapdragon-7plus-gen3, "sd 7+g3"], sources: *all}
  - {name: QCS6490, marketing: QCS6490, kind: iot, soc_model: 35, htp_arch: 68, vtcm_mb: 2, fp16: false,
     aliases: [qcm6490, kodiak], sources: *all}
"""


def test_a_new_catalog_regenerates_clients_that_agree(tmp_path):
    """The tables come from whatever catalog is loaded: a chip added to it is known to both clients."""
    from ci_tools.release.clients import render_java

    path = tmp_path / "socs.yaml"
    path.write_text(BIG_CATALOG)
    cat = load_catalog(path)
    src = tmp_path / "src" / "QnnModelResolver.java"
    src.parent.mkdir()
    src.write_text(render_java(cat))
    classes = _compile_java(src, tmp_path / "classes")
    spellings = _variants(cat)
    expected = [_python_chip(cat, s) for s in spellings]
    assert "SM7675" in expected and "QCS6490" in expected
    assert _java_chips(classes, spellings) == expected
    script = tmp_path / "qnn-fetch.sh"
    from ci_tools.release.clients import render_fetch_sh

    script.write_text(render_fetch_sh(cat))
    for sh in _shells():
        assert _sh_chips(sh, script, spellings) == expected, sh


# -- sh -------------------------------------------------------------------------------------------

def _busybox_path(tmp: Path) -> Path | None:
    """A PATH of busybox applets only: no GNU tools, no curl (busybox wget downloads)."""
    bb = shutil.which("busybox")
    if bb is None:
        return None
    folder = tmp / "busybox-bin"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        applets = subprocess.run([bb, "--list"], capture_output=True, text=True).stdout.split()
        for a in applets:
            (folder / a).symlink_to(bb)
    return folder


def _shells() -> list[str]:
    found = [s for s in ("dash", "busybox") if shutil.which(s)]
    if not found:
        pytest.skip("neither dash nor busybox is installed (apt-get install dash busybox)")
    return found


def _sh_argv(sh: str) -> list[str]:
    return [shutil.which("dash")] if sh == "dash" else [shutil.which("busybox"), "sh"]


def _sh_chips(sh: str, script: Path, spellings: list[str]) -> list[str]:
    safe = [s for s in spellings if "\x00" not in s]  # argv cannot carry NUL
    r = subprocess.run([*_sh_argv(sh), str(script), "--resolve", *safe], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode in (0, 3), r.stderr
    got = iter(r.stdout.splitlines())
    return [next(got) if "\x00" not in s else "none" for s in spellings]


@pytest.mark.parametrize("sh", ["dash", "busybox"])
def test_sh_and_python_agree_on_every_spelling(sh):
    if not shutil.which(sh):
        pytest.skip(f"{sh} is not installed (apt-get install {sh})")
    cat = load_catalog()
    spellings = _variants(cat)
    expected = [_python_chip(cat, s) if "\x00" not in s else "none" for s in spellings]
    got = _sh_chips(sh, SCRIPT, spellings)
    wrong = [(s, e, g) for s, e, g in zip(spellings, expected, got) if e != g]
    assert not wrong, wrong[:10]


# -- manifests: the same choice as `qnn-release fetch` --------------------------------------------

ROWS = [("vad", "SM8750", "fp16"), ("vad", "SM8750", "w8a16"), ("vad", "SM8750", "int8"),
        ("vad", "SM8550", "int8"), ("vad", "SM8550", "w8a16"), ("ocr", "SM8650", "w8a16"), ("ocr", "QCS9100", "fp16")]


def _release(folder: Path, rows=ROWS, libs: bool = True, sdk: str = SDK, tag: str = TAG) -> Path:
    """A release made with the real archive writer: several models, chips and precisions, one qnn-libs."""
    cat = load_catalog()
    folder.mkdir(parents=True, exist_ok=True)
    assets = []
    for model, soc, precision in rows:
        chip = cat.get(soc)
        stem = f"{model}-{soc.lower()}-{precision}-qnn{sdk}"
        make_tar_bz2(folder / f"{stem}.tar.bz2", [
            (f"{stem}/{model}_ctx.onnx", f"stub {soc} {precision}".encode()),
            (f"{stem}/{model}_ctx_qnn.bin", f"binary for {soc} {precision}".encode() * 50),
            (f"{stem}/metadata.json", json.dumps({"chip": {"name": soc}}).encode())])
        assets.append({"name": f"{stem}.tar.bz2", "kind": "model", "model": model, "soc": soc,
                       "soc_aliases": [soc.lower(), *chip.aliases], "precision": precision, "sdk_version": sdk,
                       "graphs": [model]})
    if libs:
        make_tar_bz2(folder / f"qnn-libs-{sdk}.tar.bz2", [(f"qnn-libs-{sdk}/libQnnHtp.so", b"\x7fELF htp")])
        assets.append({"name": f"qnn-libs-{sdk}.tar.bz2", "kind": "qnn-libs", "sdk_version": sdk,
                       "htp_archs": ["v73", "v79"]})
    _finish(folder, assets, sdk, tag)
    return folder


def _finish(folder: Path, assets: list[dict], sdk: str = SDK, tag: str = TAG) -> None:
    for a in assets:
        a["size"], a["sha256"] = (folder / a["name"]).stat().st_size, sha256_file(folder / a["name"])
    manifest = {"manifest_version": 1, "tag": tag, "toolkit": "qnn-release test", "sdk_versions": [sdk],
                "skipped": [], "assets": sorted(assets, key=lambda a: a["name"])}
    validate_manifest(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (folder / "SHA256SUMS").write_text("".join(f"{a['sha256']}  {a['name']}\n" for a in manifest["assets"]))


@pytest.fixture
def gh():
    with FakeGitHub() as server:
        yield server


def _publish(gh, folder: Path, tag: str = TAG) -> None:
    publish(folder, OWNER_REPO, tag, via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None))


CASES = [("vad", "sm8750-ac", None), ("vad", "SM8750", "int8"), ("vad", "Snapdragon 8 Gen 2", None),
         ("vad", "kalama", "fp16"), ("ocr", "SM8650", None), ("ocr", "qcs9100", None), ("ocr", "SM8750", None),
         ("vad", "MT6989", None), ("vad", "SM8650", None), ("vad", "sm8550-AB", "w8a16"), ("asr", "SM8750", None)]


def _python_case(gh, model, soc, precision, dest) -> tuple[int, str]:
    try:
        r = fetch_model(f"{OWNER_REPO}@{TAG}", model, soc=soc, needs=AppNeeds(precision=precision), dest=dest,
                        via=Connection(api_url=gh.url, sleep=lambda s: None))
    except QnnReleaseError as e:
        return e.exit_code, ""
    return 0, f"{r.archive} {r.precision} {r.soc} {r.qnn_libs}"


def test_java_chooses_what_fetch_chooses(gh, tmp_path, java_classes):
    folder = _release(tmp_path / "rel")
    _publish(gh, folder)
    _, java = _java_tools()
    base = f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/"
    for i, (model, soc, precision) in enumerate(CASES):
        code, want = _python_case(gh, model, soc, precision, tmp_path / f"py{i}")
        r = subprocess.run([java, "-cp", str(java_classes), "qnnrelease.QnnModelResolver",
                            str(folder / "manifest.json"), model, soc, precision or "-", base],
                           capture_output=True, text=True)
        assert r.returncode == code, (model, soc, precision, r.stdout, r.stderr)
        if code == 0:
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
            assert f"{kv['asset']} {kv['precision']} {kv['soc']} {kv['qnn_libs']}" == want
            assert kv["url"] == base + kv["asset"] and len(kv["sha256"]) == 64
            assert kv["qnn_libs_url"].endswith(kv["qnn_libs"])
            assert kv["sha256"] == sha256_file(folder / kv["asset"])
        elif code == 3:
            assert r.stdout.startswith(f"none: no NPU build of {model} for ") and "use the CPU model" in r.stdout
        else:
            assert "no model 'asr' in this release" in r.stderr


# -- the Java installer: downloads, checks and unpacks what the resolver chose -----------------------

def _commons() -> Path:
    if not COMMONS_COMPRESS.is_file():
        pytest.skip("no Apache Commons Compress (apt-get install libcommons-compress-java) for the Java installer")
    return COMMONS_COMPRESS


def install_java(classes: Path, manifest: str, model: str, soc: str, dest: Path, *rest: str, api: str | None = None):
    """``java qnnrelease.QnnModelInstaller`` as an app's build would run it (Commons Compress reads the bzip2);
    ``api``: GitHub's API for --look-back."""
    _, java = _java_tools()
    env = {**os.environ, "GITHUB_API_URL": api} if api else None
    return subprocess.run([java, "-cp", f"{_commons()}{os.pathsep}{classes}", "qnnrelease.QnnModelInstaller",
                           manifest, model, soc, str(dest), *rest], capture_output=True, text=True, timeout=120,
                          env=env)


def test_the_java_installer_installs_what_fetch_installs(gh, tmp_path, java_classes, monkeypatch):
    """#41 item 3: the Java client downloads, checks the sha256 and unpacks, byte for byte what `fetch` writes,
    with the same exit code for every case; the manifest read from the release's URL."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = _release(tmp_path / "rel")
    _publish(gh, folder)
    url = f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/manifest.json"
    for i, (model, soc, precision) in enumerate(CASES):
        code, want = _python_case(gh, model, soc, precision, tmp_path / f"py{i}")
        dest = tmp_path / f"java{i}"
        r = install_java(java_classes, url, model, soc, dest, precision or "-")
        assert r.returncode == code, (model, soc, precision, r.stdout, r.stderr)
        if code:
            assert r.stderr.count("\n") == 1 and r.stderr.startswith("QnnModelInstaller: error: "), r.stderr
            assert not dest.exists() or not any(dest.iterdir())
            continue
        kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
        assert want.startswith(f"{kv['archive']} ")
        assert Path(kv["path"]) == (dest / kv["archive"].removesuffix(".tar.bz2")).resolve()
        with tarfile.open(folder / kv["archive"]) as tf:
            files = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}
        assert {str(p.relative_to(dest)): p.read_bytes() for p in Path(kv["path"]).rglob("*") if p.is_file()} == files
        assert (Path(kv["qnn_libs_path"]) / "libQnnHtp.so").read_bytes() == b"\x7fELF htp"
        assert sorted(p.name for p in dest.iterdir()) == sorted([Path(kv["path"]).name, f"qnn-libs-{SDK}"])
    # installed again over itself: the new copy replaces the old one only when whole
    (tmp_path / "java0" / f"qnn-libs-{SDK}" / "stale.so").write_bytes(b"old")
    r = install_java(java_classes, url, "vad", "sm8750-ac", tmp_path / "java0")
    assert r.returncode == 0 and not (tmp_path / "java0" / f"qnn-libs-{SDK}" / "stale.so").exists(), r.stderr


@pytest.mark.parametrize("kind", ["traversal", "absolute", "symlink", "hardlink", "outside-top", "fifo"])
def test_the_java_installer_refuses_malicious_archives_leaving_dest_as_it_was(gh, tmp_path, java_classes, kind):
    folder = _publish_evil(gh, tmp_path, kind)
    dest = tmp_path / "outer" / "dest"
    dest.mkdir(parents=True)
    (dest / "mine.txt").write_text("app data")
    r = install_java(java_classes, str(folder / "manifest.json"), "vad", "SM8750", dest, "-",
                     f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/")
    assert r.returncode == 9, r.stdout + r.stderr
    assert "refused" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["mine.txt"]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["dest"]
    assert not Path("/tmp/qnn-fetch-evil-absolute.txt").exists() and not (tmp_path / "evil.txt").exists()


# -- qnn-fetch.sh against the fake GitHub ---------------------------------------------------------

def _run_sh(sh: str, gh, tmp: Path, *args: str, downloader: str | None = None,
            api: bool = False) -> subprocess.CompletedProcess:
    env = {"HOME": str(tmp), "QNN_FETCH_BASE_URL": gh.url, "LC_ALL": "C"}
    if api:  # --look-back lists the releases through GitHub's API
        env["GITHUB_API_URL"] = gh.url
    if sh == "busybox":
        env["PATH"] = str(_busybox_path(tmp))  # busybox alone: its tar, awk, sed, sha256sum, wget
    else:
        env["PATH"] = os.environ["PATH"]
    if downloader:
        env["QNN_FETCH_DOWNLOADER"] = downloader
    return subprocess.run([*_sh_argv(sh), str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


SH_VARIANTS = [("dash", None), ("dash", "wget"), ("busybox", None)]


def _need(sh: str, downloader: str | None) -> None:
    if not shutil.which(sh):
        pytest.skip(f"{sh} is not installed (apt-get install {sh})")
    if downloader and not shutil.which(downloader):
        pytest.skip(f"{downloader} is not installed")


@pytest.mark.parametrize(("sh", "downloader"), SH_VARIANTS)
def test_sh_fetches_what_fetch_fetches(gh, tmp_path, sh, downloader):
    _need(sh, downloader)
    folder = _release(tmp_path / "rel")
    _publish(gh, folder)
    for i, (model, soc, precision) in enumerate(CASES):
        code, want = _python_case(gh, model, soc, precision, tmp_path / f"py{i}")
        dest = tmp_path / f"sh{i}"
        args = ["--release", f"{OWNER_REPO}@{TAG}", "--model", model, "--soc", soc, "--dest", str(dest)]
        r = _run_sh(sh, gh, tmp_path, *args, *(["--precision", precision] if precision else []),
                    downloader=downloader)
        assert r.returncode == code, (model, soc, precision, r.stdout, r.stderr)
        if code:
            assert not dest.exists(), "a failed fetch left DEST behind"
            assert r.stderr.count("\n") == 1 and r.stderr.startswith("qnn-fetch.sh: error: ")
            if code == 3:
                assert "use the CPU model" in r.stderr
            continue
        kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
        assert f"{kv['archive']} {kv['precision']} {kv['soc']} {kv['qnn_libs']}" == want
        top = Path(kv["path"])
        assert top == (dest / kv["archive"].removesuffix(".tar.bz2")).resolve()
        with tarfile.open(folder / kv["archive"]) as tf:  # exactly the archive's files, byte for byte
            for m in tf.getmembers():
                if m.isfile():
                    assert (dest / m.name).read_bytes() == tf.extractfile(m).read()
        assert (Path(kv["qnn_libs_path"]) / "libQnnHtp.so").read_bytes() == b"\x7fELF htp"
        assert sorted(p.name for p in dest.iterdir()) == sorted([".downloads", top.name, f"qnn-libs-{SDK}"])
    # a second run downloads only the manifest: the verified archives are kept in DEST/.downloads
    gh.state.log.clear()
    r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "sm8750-ac",
                "--dest", str(tmp_path / "sh0"), downloader=downloader)
    assert r.returncode == 0, r.stderr
    assert [p for m, p, _ in gh.state.log] == [f"/{OWNER_REPO}/releases/download/{TAG}/manifest.json"]


def _evil(path: Path, stem: str, kind: str) -> None:
    with tarfile.open(path, "w:bz2") as tar:
        def add(name, data=b"x", **attrs):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for k, v in attrs.items():
                setattr(info, k, v)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
        add(f"{stem}/ok.bin")
        if kind == "traversal":
            add(f"{stem}/../../evil.txt")
        elif kind == "absolute":
            add("/tmp/qnn-fetch-evil-absolute.txt")
        elif kind == "symlink":
            add(f"{stem}/link", b"", type=tarfile.SYMTYPE, linkname="../../../../etc")
        elif kind == "hardlink":
            add(f"{stem}/hard", b"", type=tarfile.LNKTYPE, linkname="../outside.txt")
        elif kind == "outside-top":
            add("other/evil.txt")
        elif kind == "fifo":
            add(f"{stem}/fifo", b"", type=tarfile.FIFOTYPE)


def _publish_evil(gh, tmp: Path, kind: str) -> Path:
    """A one-archive release whose model archive is malicious in the way ``kind`` says, published; its folder."""
    folder = _release(tmp / "rel", rows=[("vad", "SM8750", "fp16")])
    manifest = json.loads((folder / "manifest.json").read_text())
    model = next(a for a in manifest["assets"] if a["kind"] == "model")
    _evil(folder / model["name"], model["name"].removesuffix(".tar.bz2"), kind)
    _finish(folder, manifest["assets"])
    _publish(gh, folder)
    return folder


@pytest.mark.parametrize("kind", ["traversal", "absolute", "symlink", "hardlink", "outside-top", "fifo"])
@pytest.mark.parametrize("sh", ["dash", "busybox"])
def test_sh_refuses_malicious_archives_leaving_nothing_behind(gh, tmp_path, sh, kind):
    _need(sh, None)
    _publish_evil(gh, tmp_path, kind)
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "outside.txt").write_text("keep me")
    r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
                "--dest", str(outer / "dest"))
    assert r.returncode == 9, r.stdout + r.stderr
    assert "refused" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert sorted(p.name for p in outer.iterdir()) == ["outside.txt"]  # DEST was new: it is gone again
    assert (outer / "outside.txt").read_text() == "keep me"
    assert not Path("/tmp/qnn-fetch-evil-absolute.txt").exists() and not (tmp_path / "evil.txt").exists()
    # an existing DEST is left as it was
    (outer / "dest").mkdir()
    (outer / "dest" / "mine.txt").write_text("app data")
    r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
                "--dest", str(outer / "dest"))
    assert r.returncode == 9
    assert sorted(p.name for p in (outer / "dest").iterdir()) == ["mine.txt"]


@pytest.mark.parametrize("sh", ["dash", "busybox"])
def test_sh_corrupt_download_is_retried_then_refused(gh, tmp_path, sh):
    _need(sh, None)
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")], libs=False)
    _publish(gh, folder)
    gh.fault("GET", r"/releases/download/.*vad-sm8750", "corrupt", count=1)
    dest = tmp_path / "d"
    args = ("--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750", "--dest", str(dest))
    r = _run_sh(sh, gh, tmp_path, *args)
    assert r.returncode == 0, r.stderr  # the second attempt got the right bytes
    assert dict(line.split("=", 1) for line in r.stdout.splitlines())["qnn_libs_path"] == ""
    gh.fault("GET", r"/releases/download/.*vad-sm8750", "corrupt", count=3)
    shutil.rmtree(dest)
    r = _run_sh(sh, gh, tmp_path, *args)
    assert r.returncode == 4 and "sha256" in r.stderr, r.stderr  # as `qnn-release fetch` (#41 item 4)
    assert not dest.exists()


def test_sh_usage_errors_are_one_line_with_exit_2(gh, tmp_path):
    _need("dash", None)
    cases = [(["--model", "vad"], "required"), (["--release", "acme@v1", "--model", "m", "--soc", "SM8750",
                                                  "--dest", "d"], "OWNER/NAME@TAG"),
             (["--release", "a/b@v1", "--model", "m", "--soc", "SM8750", "--dest", "d", "--precision", "fp8"],
              "--precision"), (["--bogus"], "unknown argument")]
    for args, text in cases:
        r = _run_sh("dash", gh, tmp_path, *args)
        assert r.returncode == 2 and text in r.stderr and "error:" in r.stderr, (args, r.stderr)
    r = _run_sh("dash", gh, tmp_path, "--release", f"{OWNER_REPO}@v9.9.9", "--model", "vad", "--soc", "SM8750",
                "--dest", str(tmp_path / "none"))
    assert r.returncode == 10 and "manifest.json" in r.stderr and not (tmp_path / "none").exists()


# -- one table of exit codes ----------------------------------------------------------------------

def _java_code(classes: Path | None, manifest: Path, model: str, soc: str) -> int | None:
    if classes is None:
        return None
    _, java = _java_tools()
    return subprocess.run([java, "-cp", str(classes), "qnnrelease.QnnModelResolver", str(manifest), model, soc],
                          capture_output=True, text=True).returncode


def test_every_client_exits_with_the_same_code_for_the_same_fault(gh, tmp_path, request, monkeypatch):
    """#41 item 4: the same fault against each client, the same exit code (docs/app-developers.md, "Exit codes");
    the Java resolver reads a manifest and downloads nothing, so it has no download faults; the Java installer
    downloads, so it has them all."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))  # its own downloads
    java_classes = request.getfixturevalue("java_classes") if _java_tools() else None
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")], libs=False)
    _publish(gh, folder)
    shells = [sh for sh in ("dash", "busybox") if shutil.which(sh)]
    bad = tmp_path / "bad-manifest.json"
    bad.write_text('{"manifest_version": 2, "assets": [')

    def codes(model: str, soc: str, tag: str = TAG, manifest: Path | None = None) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        try:
            fetch_model(f"{OWNER_REPO}@{tag}", model, soc=soc, dest=tmp_path / f"py-{len(os.listdir(tmp_path))}",
                        via=Connection(api_url=gh.url, sleep=lambda s: None))
            out["python"] = 0
        except QnnReleaseError as e:
            out["python"] = e.exit_code
        for sh in shells:
            dest = tmp_path / f"{sh}-{len(os.listdir(tmp_path))}"
            out[sh] = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{tag}", "--model", model, "--soc", soc,
                              "--dest", str(dest)).returncode
        out["java"] = _java_code(java_classes, manifest or folder / "manifest.json", model, soc)
        if java_classes is not None and COMMONS_COMPRESS.is_file():  # the installer downloads: every fault applies
            url = f"{gh.url}/{OWNER_REPO}/releases/download/{tag}/manifest.json"
            out["java-installer"] = install_java(java_classes, url, model, soc,
                                                 tmp_path / f"jinst-{len(os.listdir(tmp_path))}").returncode
        return out

    def same(got: dict, code: int, java: bool = True) -> None:
        want = {k: code for k in got if k != "java" or java}
        assert {k: v for k, v in got.items() if k != "java" or java} == want, got
        if java and got.get("java") is not None:
            assert got["java"] == code, got

    same(codes("asr", "SM8750"), 2)  # no such model in the release
    same(codes("vad", "SM8550"), 3)  # no NPU build for the chip: the CPU model
    gh.fault("GET", r"/releases/download/.*vad-sm8750", "corrupt", count=99)  # every copy served is corrupt
    same(codes("vad", "SM8750"), 4, java=False)  # the download does not match its sha256
    gh.state.faults.clear()
    same(codes("vad", "SM8750", tag="v9.9.9"), 10, java=False)  # no such release
    assert _java_code(java_classes, bad, "vad", "SM8750") in (None, 9)  # a malformed manifest is refused
    if java_classes is not None and COMMONS_COMPRESS.is_file():
        assert install_java(java_classes, str(bad), "vad", "SM8750", tmp_path / "jbad").returncode == 9


# -- the app's QNN runtime ------------------------------------------------------------------------

def test_a_binary_that_needs_a_newer_runtime_is_refused_alike_and_look_back_finds_an_older_one(gh, tmp_path,
                                                                                                request, monkeypatch):
    """#41 item 2: the rule tests/test_runtime_rule.py measures (a binary of QNN 2.51.0 fails on a 2.50.40 runtime,
    one of 2.50.40 loads on 2.51.0), applied by every client the same way: exit 12 naming both versions."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))  # its own downloads
    from tests.conftest import run_cli

    java_classes = request.getfixturevalue("java_classes") if _java_tools() else None
    old, new = "2.50.40.260815120000", "2.51.0.260929181845"
    _publish(gh, _release(tmp_path / "v1", rows=[("vad", "SM8750", "fp16")], libs=False, sdk=old, tag="v3.0.0"),
             tag="v3.0.0")
    newest = _release(tmp_path / "v2", rows=[("vad", "SM8750", "fp16")], libs=False, sdk=new)
    _publish(gh, newest)
    shells = [sh for sh in ("dash", "busybox") if shutil.which(sh)]
    for runtime, code in (("2.50.40", 12), ("2.51.0", 0), ("2.52", 0)):
        try:
            fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / f"py{runtime}",
                        via=Connection(api_url=gh.url, sleep=lambda s: None), needs=AppNeeds(runtime=runtime))
            got = {"python": 0}
        except QnnReleaseError as e:
            got = {"python": e.exit_code}
            assert "needs QNN runtime 2.51.0 or newer; the app ships 2.50.40" in e.message, e.message
        for sh in shells:
            r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
                        "--dest", str(tmp_path / f"{sh}{runtime}"), "--qnn-runtime", runtime)
            got[sh] = r.returncode
            if code:
                assert "needs QNN runtime 2.51.0 or newer; the app ships 2.50.40" in r.stderr, r.stderr
                assert not (tmp_path / f"{sh}{runtime}").exists()
        if java_classes is not None:
            _, java = _java_tools()
            r = subprocess.run([java, "-cp", str(java_classes), "qnnrelease.QnnModelResolver",
                                str(newest / "manifest.json"), "vad", "SM8750", "-", "-", runtime],
                               capture_output=True, text=True)
            got["java"] = r.returncode
            if code:
                assert r.stdout.startswith("runtime: vad for SM8750 needs QNN runtime 2.51.0"), r.stdout
        assert set(got.values()) == {code}, (runtime, got)
    # asked to, every client looks back for the newest earlier release this runtime loads: v3.0.0, not the
    # newer v1.5.0 (no binary for the chip), not v9.0.0 (newer than the tag asked for), not a linked part
    _publish(gh, _release(tmp_path / "v9", rows=[("vad", "SM8750", "fp16")], libs=False, sdk=old, tag="v9.0.0"),
             tag="v9.0.0")
    _publish(gh, _release(tmp_path / "v15", rows=[("vad", "SM8550", "fp16")], libs=False, sdk=old, tag="v1.5.0"),
             tag="v1.5.0")
    for sh in shells:
        for runtime, code, tag in (("2.50.40", 0, "v3.0.0"), ("2.49.0", 12, None)):
            dest = tmp_path / f"{sh}-back-{runtime}"
            r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750",
                        "--dest", str(dest), "--qnn-runtime", runtime, "--look-back", api=True)
            assert r.returncode == code, (sh, runtime, r.stdout, r.stderr)
            if code:
                assert "no earlier release" in r.stderr and not dest.exists(), r.stderr
                continue
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
            assert kv["sdk_version"] == old and kv["archive"] == f"vad-sm8750-fp16-qnn{old}.tar.bz2", kv
            assert f"fetching {OWNER_REPO}@{tag}" in r.stderr
            assert (Path(kv["path"]) / "vad_ctx.onnx").read_bytes() == b"stub SM8750 fp16"
    if java_classes is not None and COMMONS_COMPRESS.is_file():
        url = f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/manifest.json"
        for runtime, code, tag in (("2.50.40", 0, "v3.0.0"), ("2.49.0", 12, None)):
            dest = tmp_path / f"java-back-{runtime}"
            r = install_java(java_classes, url, "vad", "SM8750", dest, "-", "-", runtime, "--look-back", api=gh.url)
            assert r.returncode == code, (runtime, r.stdout, r.stderr)
            if code:
                assert "no earlier release" in r.stderr and r.stderr.count("\n") == 1, r.stderr
                continue
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
            assert kv["sdk_version"] == old and f"installing from {tag}" in r.stderr, (kv, r.stderr)
            assert (Path(kv["path"]) / "vad_ctx.onnx").read_bytes() == b"stub SM8750 fp16"
    env = {**os.environ, "GITHUB_API_URL": gh.url, "QNN_RELEASE_CACHE": str(tmp_path / "cache")}
    r = run_cli("fetch", "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750", "--dest",
                str(tmp_path / "back"), "--qnn-runtime", "2.50.40", "--look-back", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sdk_version"] == old and f"fetching {OWNER_REPO}@v3.0.0" in r.stderr
    r = run_cli("fetch", "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8750", "--dest",
                str(tmp_path / "none"), "--qnn-runtime", "2.49.0", "--look-back", env=env)
    assert r.returncode == 12 and "no earlier release" in r.stderr, r.stderr


def test_every_client_returns_the_twin_for_a_chip_without_a_binary(gh, tmp_path, request, monkeypatch):
    """#41 item 1: no binary for the chip, the model's twin: kind=jit where the catalog knows the chip (an HTP),
    kind=cpu where it does not; a binary where there is one. Python, dash, busybox and Java alike."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))  # its own downloads
    java_classes = request.getfixturevalue("java_classes") if _java_tools() else None
    folder = tmp_path / "rel"
    _release(folder, rows=[("vad", "SM8750", "fp16")], libs=False)
    manifest = json.loads((folder / "manifest.json").read_text())
    twin = make_tar_bz2(folder / "vad-float-onnx.tar.bz2", [("vad-float-onnx/vad/graph.onnx", b"float graph"),
                                                            ("vad-float-onnx/twin.json", b"{}")])
    qdq = make_tar_bz2(folder / "vad-w8a16-onnx.tar.bz2", [("vad-w8a16-onnx/vad/graph.onnx", b"qdq graph"),
                                                           ("vad-w8a16-onnx/twin.json", b"{}")])
    manifest["assets"].append({"name": qdq.name, "kind": "twin", "model": "vad", "precision": "w8a16",
                               "graphs": ["vad"]})  # listed first: a client must pick by precision, not order
    manifest["assets"].append({"name": twin.name, "kind": "twin", "model": "vad", "precision": "float",
                               "graphs": ["vad"]})
    _finish(folder, manifest["assets"])
    _publish(gh, folder)
    shells = [sh for sh in ("dash", "busybox") if shutil.which(sh)]
    for soc, kind, asset in (("SM8650", "jit", twin.name), ("MT6989", "cpu", twin.name),
                             ("sm8750-ac", "binary", f"vad-sm8750-fp16-qnn{SDK}.tar.bz2")):
        res = fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc=soc, dest=tmp_path / f"py-{soc}",
                          via=Connection(api_url=gh.url, sleep=lambda s: None))
        assert (res.kind, res.archive) == (kind, asset)
        for sh in shells:
            r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", soc,
                        "--dest", str(tmp_path / f"{sh}-{soc}"))
            assert r.returncode == 0, r.stderr
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
            assert (kv["kind"], kv["archive"]) == (kind, asset), kv
            if kind != "binary":
                assert (Path(kv["path"]) / "vad" / "graph.onnx").read_bytes() == b"float graph"
        if java_classes is not None:
            _, java = _java_tools()
            r = subprocess.run([java, "-cp", str(java_classes), "qnnrelease.QnnModelResolver",
                                str(folder / "manifest.json"), "vad", soc], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
            assert (kv["kind"], kv["asset"]) == (kind, asset), kv
            if COMMONS_COMPRESS.is_file():
                r = install_java(java_classes, f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/manifest.json", "vad",
                                 soc, tmp_path / f"java-{soc}")
                assert r.returncode == 0, r.stderr
                kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
                assert (kv["kind"], kv["archive"]) == (kind, asset), kv
                if kind != "binary":
                    assert (Path(kv["path"]) / "vad" / "graph.onnx").read_bytes() == b"float graph"
    # asked for a quantized precision, the QDQ twin of it; for one the release has no twin of, exit 3 (CPU model)
    for precision, code in (("w8a16", 0), ("int8", 3)):
        try:
            res = fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc="SM8650", needs=AppNeeds(precision=precision),
                              dest=tmp_path / f"py-{precision}", via=Connection(api_url=gh.url, sleep=lambda s: None))
            got = {"python": (0, res.kind, res.archive)}
        except QnnReleaseError as e:
            got = {"python": (e.exit_code, None, None)}
        for sh in shells:
            r = _run_sh(sh, gh, tmp_path, "--release", f"{OWNER_REPO}@{TAG}", "--model", "vad", "--soc", "SM8650",
                        "--precision", precision, "--dest", str(tmp_path / f"{sh}-{precision}"))
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines()) if r.returncode == 0 else {}
            got[sh] = (r.returncode, kv.get("kind"), kv.get("archive"))
            if r.returncode == 0:
                assert (Path(kv["path"]) / "vad" / "graph.onnx").read_bytes() == b"qdq graph"
        if java_classes is not None:
            _, java = _java_tools()
            r = subprocess.run([java, "-cp", str(java_classes), "qnnrelease.QnnModelResolver",
                                str(folder / "manifest.json"), "vad", "SM8650", precision], capture_output=True,
                               text=True)
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines()) if r.returncode == 0 else {}
            got["java"] = (r.returncode, kv.get("kind"), kv.get("asset"))
        want = (0, "jit", qdq.name) if code == 0 else (3, None, None)
        assert set(got.values()) == {want}, (precision, got)


# -- hostile manifests against the Python client (#42 item 1, in part) ------------------------------

def _serve(gh, name: str, data: bytes) -> None:
    """The published release's asset ``name`` replaced by ``data``: a manifest made by someone else."""
    (rel,) = gh.releases(OWNER_REPO, TAG)
    with gh.state.lock:
        (asset,) = [a for a in gh.state.assets.values() if a["release"] == rel["id"] and a["name"] == name]
        asset["data"] = data


def _hostile(folder: Path, change) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("case", "change"), [
    ("a part outside the release's tags", lambda m: m.update(parts=["../../../../other/repo/releases/tags/v1"])),
    ("a part that is not the layout's", lambda m: m.update(parts=[f"{TAG}-part3"])),
    ("a piece listed twice", lambda m: m["assets"][0].update(pieces=[
        {"name": m["assets"][0]["name"] + ".001", "size": 1, "sha256": "a" * 64}] * 2, size=2)),
    ("pieces that do not add up", lambda m: m["assets"][0].update(pieces=[
        {"name": m["assets"][0]["name"] + ".001", "size": 1, "sha256": "a" * 64}], size=10 ** 18)),
    ("a size of 10^18", lambda m: m["assets"][0].update(size=10 ** 18)),
])
def test_fetch_refuses_a_manifest_that_is_not_what_the_layout_makes_before_any_download(gh, tmp_path, monkeypatch,
                                                                                      case, change):
    """Names from a manifest build API paths and URLs, and its sizes bound what is written: anything package does
    not make is refused (exit 9) before an asset is requested, and no request leaves the release's repository."""
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")], libs=False)
    _publish(gh, folder)
    gh.state.log.clear()
    _hostile(folder, change)  # what the release serves from now on (whoever can upload to it)
    _serve(gh, "manifest.json", (folder / "manifest.json").read_bytes())
    with pytest.raises(QnnReleaseError) as e:
        fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / "d",
                    via=Connection(api_url=gh.url, token=gh.state.token, sleep=lambda s: None))
    assert e.value.exit_code == 9, (case, e.value.message)
    requested = [p for _, p, _ in gh.state.log]
    assert not any(("/repos/" in p and not p.startswith(f"/repos/{OWNER_REPO}/")) or "other" in p
                   for p in requested), requested  # nothing outside the release's repository
    # refused before any archive was asked for: the one asset downloaded is the manifest
    assert len([p for p in requested if "/releases/assets/" in p]) == 1 and not any(".tar.bz2" in p
                                                                                    for p in requested), requested
    assert not (tmp_path / "d").exists()


def test_fetch_refuses_a_manifest_nested_past_the_recursion_limit(gh, tmp_path, monkeypatch):
    monkeypatch.setenv("QNN_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")], libs=False)
    _publish(gh, folder)
    _serve(gh, "manifest.json", b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(QnnReleaseError) as e:
        fetch_model(f"{OWNER_REPO}@{TAG}", "vad", soc="SM8750", dest=tmp_path / "d",
                    via=Connection(api_url=gh.url, sleep=lambda s: None))
    assert e.value.exit_code == 9 and "(rule json)" in e.value.message


def _pax_zero_record(path: Path, stem: str) -> None:
    """An archive whose pax record says its length is 0 (a reader that trusts it never moves on)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"{stem}/" + "n" * 120)  # a long name: written as a pax 'path' record
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    data = raw.getvalue()
    at = data.index(b" path=")
    start = data.rindex(b"\n", 0, at) + 1 if b"\n" in data[:at] else data.rindex(b"\0", 0, at) + 1
    data = data[:start] + b"0" * (at - start) + data[at:]
    import bz2

    path.write_bytes(bz2.compress(data))


def test_the_java_installer_is_all_or_nothing_and_refuses_broken_archives(gh, tmp_path, java_classes):
    """The model's and its qnn-libs' install is all or nothing (qnn-libs that fail leave dest as it was);
    a pax record of length 0 and a corrupt bzip2 stream are refused with exit 9, never a hang or exit 4."""
    url = f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/manifest.json"
    folder = _release(tmp_path / "rel", rows=[("vad", "SM8750", "fp16")])
    manifest = json.loads((folder / "manifest.json").read_text())
    model = next(a for a in manifest["assets"] if a["kind"] == "model")
    libs = next(a for a in manifest["assets"] if a["kind"] == "qnn-libs")
    _publish(gh, folder)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "mine.txt").write_text("app data")
    gh.fault("GET", r"/releases/download/.*qnn-libs", "corrupt", count=99)  # the model downloads, its libraries fail
    r = install_java(java_classes, url, "vad", "SM8750", dest)
    assert r.returncode == 4 and "qnn-libs" in r.stderr, r.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["mine.txt"]  # not the model without its libraries
    gh.state.faults.clear()
    for name, make in (("pax", lambda p: _pax_zero_record(p, model["name"].removesuffix(".tar.bz2"))),
                       ("crc", lambda p: p.write_bytes(p.read_bytes()[:40] + bytes([p.read_bytes()[40] ^ 0xFF])
                                                       + p.read_bytes()[41:]))):
        bad = _release(tmp_path / f"rel-{name}", rows=[("vad", "SM8750", "fp16")], tag=f"v0.{len(name)}.{name}")
        make(bad / model["name"])
        m = json.loads((bad / "manifest.json").read_text())
        _finish(bad, m["assets"], tag=f"v0.{len(name)}.{name}")
        _publish(gh, bad, tag=f"v0.{len(name)}.{name}")
        r = install_java(java_classes, url.replace(TAG, f"v0.{len(name)}.{name}"), "vad", "SM8750", dest)
        assert r.returncode == 9 and "refused" in r.stderr, (name, r.stderr)
        assert sorted(p.name for p in dest.iterdir()) == ["mine.txt"], name
    assert libs["name"]  # (the qnn-libs asset was there to fail)
