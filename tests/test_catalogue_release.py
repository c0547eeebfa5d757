"""A catalogue's release past GitHub's limits: 1,100 archives (more than a release holds) and one over the size
an asset may have, packaged into linked releases and pieces, published to the stand-in GitHub (which refuses the
1,001st asset of a release), an interrupted publish resumed, and a chip's archive fetched from the second part
by all three clients."""

from __future__ import annotations

import json
import subprocess
import tarfile

import pytest

from ci_tools.errors import PublishError
from ci_tools.release.fetch import fetch_model
from ci_tools.release.github import Connection
from ci_tools.release.layout import Limits, place, split_large, uploads
from ci_tools.release.manifest import LibsAsset, Manifest, ModelAsset, manifest_json
from ci_tools.release.publish import publish
from ci_tools.sources.store import sha256_file
from tests.conftest import REPO
from tests.fakes.fake_github import MAX_ASSETS, FakeGitHub

OWNER_REPO, TAG, SDK = "acme/catalogue", "v2.0.0", "2.51.0.260929181845"
CHIPS = ["SM8750", "SM8650", "SM8550", "SM8475", "SM8450", "SM7675", "SM7550", "QCS8550", "QCS9100", "SA8295"]
MODELS = 110  # x 10 chips: 1,100 archives


def _archive(folder, stem: str, payload: bytes):
    from ci_tools.release.archive import make_tar_bz2

    return make_tar_bz2(folder / f"{stem}.tar.bz2", [(f"{stem}/m_ctx.onnx", b"stub " + stem.encode()),
                                                     (f"{stem}/m_ctx_qnn.bin", payload)])


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """The release folder, made by the same layout package uses (a 64 KiB asset limit stands in for 2 GiB)."""
    import os

    from ci_tools.catalog.socs import load_catalog
    from ci_tools.release.clients import write_fetch_sh

    folder = tmp_path_factory.mktemp("catalogue")
    cat = load_catalog()
    assets = []
    for i in range(MODELS):
        for soc in CHIPS:
            stem = f"m{i:03d}-{soc.lower()}-fp16-qnn{SDK}"
            # the last model's SM8750 archive is over the size limit: it goes up in pieces
            payload = os.urandom(200_000) if (i, soc) == (MODELS - 1, "SM8750") else soc.encode() * 8
            path = _archive(folder, stem, payload)
            assets.append(ModelAsset(kind="model", name=path.name, size=path.stat().st_size,
                                     sha256=sha256_file(path), model=f"m{i:03d}", soc=soc,
                                     soc_aliases=[soc.lower(), *cat.get(soc).aliases], precision="fp16",
                                     sdk_version=SDK, graphs=["m"]))
    from ci_tools.release.archive import make_tar_bz2

    libs = make_tar_bz2(folder / f"qnn-libs-{SDK}.tar.bz2", [(f"qnn-libs-{SDK}/libQnnHtp.so", b"\x7fELF htp")])
    assets.append(LibsAsset(kind="qnn-libs", name=libs.name, size=libs.stat().st_size, sha256=sha256_file(libs),
                            sdk_version=SDK, htp_archs=["v79"]))
    limits = Limits(max_assets=MAX_ASSETS, max_asset_bytes=64 * 1024)
    placed, parts = place(split_large(folder, assets, limits), TAG, limits)
    manifest = Manifest(manifest_version=2, tag=TAG, toolkit="qnn-release test", sdk_versions=[SDK], parts=parts,
                        assets=sorted(placed, key=lambda a: a.name))
    (folder / "manifest.json").write_text(json.dumps(manifest_json(manifest), indent=2))
    (folder / "SHA256SUMS").write_text("".join(f"{s}  {n}\n" for n, s, _, _ in uploads(manifest.assets)))
    (folder / "RELEASE_NOTES.md").write_text(f"# {TAG}\n")
    write_fetch_sh(folder, cat)
    return folder, manifest


def test_the_layout_keeps_every_release_within_github_limits(catalogue):
    folder, manifest = catalogue
    assert manifest.parts == [f"{TAG}-part2"]
    per_release: dict = {}
    for name, _, size, release in uploads(manifest.assets):
        per_release[release] = per_release.get(release, 0) + 1
        assert size <= 64 * 1024 and (folder / name).is_file()
    assert per_release[None] + 5 <= MAX_ASSETS and per_release[f"{TAG}-part2"] <= MAX_ASSETS
    big = next(a for a in manifest.assets if a.pieces)
    assert len(big.pieces) >= 3 and not (folder / big.name).exists()  # what goes up is the pieces
    assert next(a for a in manifest.assets if a.kind == "qnn-libs").release is None  # every client needs them


def _via(gh, token=True):
    return Connection(token=gh.state.token if token else None, api_url=gh.url, sleep=lambda s: None)


def test_a_catalogue_is_published_in_linked_parts_resumes_and_every_client_finds_its_archive(catalogue, tmp_path):
    folder, manifest = catalogue
    with FakeGitHub(page_size=100) as gh:
        # interrupted: uploads start failing after 700 of them; nothing is visible yet (every part is a draft)
        gh.fault("POST", r"^/uploads/", "500", count=1000, skip=700)
        with pytest.raises(PublishError):
            publish(folder, OWNER_REPO, TAG, via=_via(gh))
        assert all(r["draft"] for r in gh.state.releases.values())
        with pytest.raises(PublishError, match="no published release"):
            fetch_model(f"{OWNER_REPO}@{TAG}", "m000", soc="SM8750", dest=tmp_path / "early", via=_via(gh, False))
        gh.state.faults.clear()
        plan = publish(folder, OWNER_REPO, TAG, via=_via(gh))  # the re-run resumes
        assert sum(a.startswith("skip ") for a in plan.actions) >= 700
        (main,) = gh.releases(OWNER_REPO, TAG)
        (part,) = gh.releases(OWNER_REPO, f"{TAG}-part2")
        assert not main["draft"] and not part["draft"] and part["prerelease"] and part["make_latest"] == "false"
        for r in (main, part):
            assert len(gh.asset_names(r["id"])) <= MAX_ASSETS
        assert {"manifest.json", "SHA256SUMS", "qnn-fetch.sh"} <= set(gh.asset_names(main["id"]))
        # a chip whose archive sits in the second part, and the archive uploaded in pieces
        late = max((a for a in manifest.assets if a.kind == "model" and a.release and not a.pieces),
                   key=lambda a: a.name)
        big = next(a for a in manifest.assets if a.pieces)
        assert late.release == big.release == f"{TAG}-part2"
        for a in (late, big):
            r = fetch_model(f"{OWNER_REPO}@{TAG}", a.model, soc=a.soc, dest=tmp_path / "py", via=_via(gh, False))
            assert r.archive == a.name and r.qnn_libs == f"qnn-libs-{SDK}.tar.bz2"
            _same_files(tmp_path / "py", a, folder, big)
        _sh(gh, tmp_path, late, big, folder)
        _java(gh, tmp_path, late, big, folder)


def _same_files(dest, asset, folder, big) -> None:
    """The fetched folder holds the archive's files byte for byte (the big one joined from its pieces)."""
    import io

    if asset.pieces:
        data = b"".join((folder / p.name).read_bytes() for p in asset.pieces)
    else:
        data = (folder / asset.name).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:bz2") as tf:
        for m in tf.getmembers():
            if m.isfile():
                assert (dest / m.name).read_bytes() == tf.extractfile(m).read()


def _sh(gh, tmp_path, late, big, folder) -> None:
    import shutil

    for sh in ("dash", "busybox"):
        if not shutil.which(sh):
            continue
        argv = [shutil.which("dash")] if sh == "dash" else [shutil.which("busybox"), "sh"]
        for a in (late, big):
            dest = tmp_path / f"{sh}-{a.model}"
            r = subprocess.run([*argv, str(REPO / "clients" / "qnn-fetch.sh"), "--release", f"{OWNER_REPO}@{TAG}",
                                "--model", a.model, "--soc", a.soc, "--dest", str(dest)], capture_output=True,
                               text=True, env={"PATH": "/usr/bin:/bin", "QNN_FETCH_BASE_URL": gh.url, "LC_ALL": "C"},
                               timeout=300)
            assert r.returncode == 0, r.stderr
            kv = dict(line.split("=", 1) for line in r.stdout.splitlines())
            assert kv["archive"] == a.name
            _same_files(dest, a, folder, big)


def _java(gh, tmp_path, late, big, folder) -> None:
    from tests.test_clients import JAVA, _compile_java, _java_tools

    classes = _compile_java(REPO / JAVA, tmp_path / "java")
    _, java = _java_tools()
    manifest = tmp_path / "manifest.json"
    import requests

    manifest.write_bytes(requests.get(f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/manifest.json",
                                      timeout=30).content)
    base = f"{gh.url}/{OWNER_REPO}/releases/download/{TAG}/"
    for a in (late, big):
        r = subprocess.run([java, "-cp", str(classes), "qnnrelease.QnnModelResolver", str(manifest), a.model, a.soc,
                            "-", base], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        kv = dict(line.split("=", 1) for line in lines if not line.startswith(("piece=", "qnn_libs_piece=")))
        assert kv["asset"] == a.name and f"/releases/download/{TAG}-part2/" in kv["url"]
        assert f"/releases/download/{TAG}/" in kv["qnn_libs_url"]  # the libraries stay in the tag's release
        pieces = [line.split("=", 1)[1].split() for line in lines if line.startswith("piece=")]
        if not a.pieces:
            assert not pieces
            got = requests.get(kv["url"], timeout=30).content
        else:  # what an app does: each piece checked, joined, the whole checked
            import hashlib

            got = b""
            for sha, url in pieces:
                body = requests.get(url, timeout=30).content
                assert hashlib.sha256(body).hexdigest() == sha
                got += body
        import hashlib

        assert hashlib.sha256(got).hexdigest() == kv["sha256"] == a.sha256
    from tests.test_clients import COMMONS_COMPRESS, install_java

    if COMMONS_COMPRESS.is_file():  # the Java installer does the same: from part2, and joined from its pieces
        for a in (late, big):
            dest = tmp_path / f"java-{a.model}"
            r = install_java(classes, str(manifest), a.model, a.soc, dest, "-", base)
            assert r.returncode == 0, r.stderr
            _same_files(dest, a, folder, big)
            assert (dest / f"qnn-libs-{SDK}" / "libQnnHtp.so").read_bytes() == b"\x7fELF htp"
