"""#42 item 3: publish recovers from GitHub's documented failures and never uploads into, or publishes, anything this
release did not make. Against the stand-in GitHub (tests/fakes/fake_github.py: the 502 "starter" asset as GitHub's
REST docs describe it, its 1,000-asset limit scaled down here to 8 with the layout's to match)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.fakes.fake_github as fake
from ci_tools.errors import PublishError
from ci_tools.release.archive import make_tar_bz2
from ci_tools.release.github import Connection
from ci_tools.release.layout import Limits, place, uploads
from ci_tools.release.manifest import LibsAsset, Manifest, ModelAsset, manifest_json
from ci_tools.release.publish import publish
from ci_tools.sources.store import sha256_file
from tests.fakes.fake_github import FakeGitHub

REPO, TAG, SDK, LIMIT = "acme/models", "v2.0.0", "2.51.0.260929181845", 8


def _release(folder: Path, models: int, payload: bytes = b"") -> Path:
    """A release package's layout makes, in linked parts when ``models`` archives do not fit one release of 8."""
    folder.mkdir(parents=True, exist_ok=True)
    assets: list = []
    for i in range(models):
        stem = f"m{i:02d}-sm8750-fp16-qnn{SDK}"
        path = make_tar_bz2(folder / f"{stem}.tar.bz2", [(f"{stem}/m.bin", f"{i}".encode() + payload)])
        assets.append(ModelAsset(kind="model", name=path.name, size=path.stat().st_size, sha256=sha256_file(path),
                                 model=f"m{i:02d}", soc="SM8750", soc_aliases=["sm8750"], precision="fp16",
                                 sdk_version=SDK, graphs=["m"]))
    libs = make_tar_bz2(folder / f"qnn-libs-{SDK}.tar.bz2", [(f"qnn-libs-{SDK}/libQnnHtp.so", b"\x7fELF")])
    assets.append(LibsAsset(kind="qnn-libs", name=libs.name, size=libs.stat().st_size, sha256=sha256_file(libs),
                            sdk_version=SDK, htp_archs=["v79"]))
    placed, parts = place(assets, TAG, Limits(max_assets=LIMIT))
    manifest = Manifest(manifest_version=2, tag=TAG, toolkit="qnn-release test", sdk_versions=[SDK], parts=parts,
                        assets=sorted(placed, key=lambda a: a.name))
    (folder / "manifest.json").write_text(json.dumps(manifest_json(manifest), indent=2))
    (folder / "SHA256SUMS").write_text("".join(f"{s}  {n}\n" for n, s, _, _ in uploads(manifest.assets)))
    return folder


@pytest.fixture
def gh(monkeypatch):
    import ci_tools.release.publish as publishing

    monkeypatch.setattr(fake, "MAX_ASSETS", LIMIT)
    monkeypatch.setattr(publishing, "MAX_ASSETS", LIMIT)  # GitHub's 1,000, scaled down as the stand-in's
    with FakeGitHub() as server:
        yield server


def _publish(gh, folder: Path, **kw):
    return publish(folder, REPO, TAG, via=Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None),
                   **kw)


def _public(gh) -> dict[str, dict[str, str]]:
    """Every published release: tag -> {asset name: state}."""
    out: dict[str, dict[str, str]] = {}
    with gh.state.lock:
        for rid, r in gh.state.releases.items():
            if not r["draft"]:
                out[r["tag_name"]] = {a["name"]: a.get("state", "uploaded") for a in gh.state.assets.values()
                                      if a["release"] == rid}
    return out


def _listed(folder: Path) -> set[str]:
    return {line.split()[1] for line in (folder / "SHA256SUMS").read_text().splitlines()}


def test_a_502_that_leaves_an_empty_starter_asset_is_recovered_in_the_same_run_and_the_next(gh, tmp_path):
    folder = _release(tmp_path / "rel", 2)
    gh.fault("POST", r"/uploads/.*name=m01-", "502-starter", count=1)  # the retry meets the starter: deleted, again
    _publish(gh, folder)
    (tag,) = _public(gh)
    assert set(_public(gh)[tag].values()) == {"uploaded"} and _listed(folder) <= set(_public(gh)[tag])
    # every attempt of a run fails: the run stops (one line), the starter stays in the draft; the next run finishes
    folder2 = _release(tmp_path / "rel2", 2, payload=b"second")
    gh.state.releases.clear()
    gh.state.assets.clear()
    gh.fault("POST", r"/uploads/.*name=m01-", "502-starter", count=99)
    with pytest.raises(PublishError) as e:
        _publish(gh, folder2)
    assert "\n" not in e.value.message and not _public(gh)
    gh.state.faults.clear()
    with gh.state.lock:  # as if the run had been killed right after a 502: the empty asset stays in the draft
        (rid,) = gh.state.releases
        gh.state.assets[gh.state.new_id()] = {"release": rid, "name": f"m01-sm8750-fp16-qnn{SDK}.tar.bz2",
                                              "label": None, "data": b"", "content_type": "application/x-bzip2",
                                              "state": "starter"}
    _publish(gh, folder2)
    assert set(_public(gh)[TAG].values()) == {"uploaded"} and _listed(folder2) <= set(_public(gh)[TAG])


def test_a_stale_draft_goes_public_with_exactly_its_manifest(gh, tmp_path):
    """A draft left by an interrupted publish of other content: its extra assets are removed before anything is
    published, with or without --replace."""
    old = _release(tmp_path / "old", 2, payload=b"other content")
    gh.fault("PATCH", r"/releases/\d+$", "500", count=99)  # the old publish never leaves draft
    with pytest.raises(PublishError):
        _publish(gh, old)
    gh.state.faults.clear()
    with gh.state.lock:
        (rid,) = gh.state.releases
        gh.state.assets[gh.state.new_id()] = {"release": rid, "name": "stray.tar.bz2", "label": None, "data": b"x",
                                              "content_type": "application/x-bzip2"}
    new = _release(tmp_path / "new", 1, payload=b"this release")
    plan = _publish(gh, new, replace=True)
    names = set(_public(gh)[TAG])
    assert "stray.tar.bz2" not in names and f"m01-sm8750-fp16-qnn{SDK}.tar.bz2" not in names, names
    assert names == _listed(new) | {"manifest.json", "SHA256SUMS"}
    assert any(a.startswith("remove stray.tar.bz2 from the draft") for a in plan.actions)


def test_a_published_part_it_did_not_make_is_refused_and_nothing_goes_into_it(gh, tmp_path):
    folder = _release(tmp_path / "rel", 6)  # 3 archives in the tag's release, the rest in -part2
    assert json.loads((folder / "manifest.json").read_text())["parts"] == [f"{TAG}-part2"]
    client = Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None).client(REPO)
    other = client.create_draft(f"{TAG}-part2", "someone else's", "")
    client.upload(other, "theirs.zip", folder / "SHA256SUMS", "application/zip")
    client.update_release(other["id"], draft=False)
    with pytest.raises(PublishError) as e:
        _publish(gh, folder)
    assert f"{REPO}@{TAG}-part2 is already published with assets this release did not make" in e.value.message
    assert "theirs.zip" in e.value.message
    assert "gh release delete" in (e.value.hint or "")
    assert _public(gh) == {f"{TAG}-part2": {"theirs.zip": "uploaded"}}  # nothing uploaded into it, nothing public
    # a part this release published before it was interrupted is resumed
    gh.state.releases.clear()
    gh.state.assets.clear()
    gh.fault("PATCH", r"/releases/\d+$", "500", count=99, skip=1)  # the part is published, the tag's release not
    with pytest.raises(PublishError):
        _publish(gh, folder)
    assert list(_public(gh)) == [f"{TAG}-part2"]
    gh.state.faults.clear()
    _publish(gh, folder)
    assert set(_public(gh)) == {TAG, f"{TAG}-part2"}


def test_replace_in_a_full_part_works_in_a_draft_and_is_refused_up_front_when_published(gh, tmp_path):
    folder = _release(tmp_path / "rel", 2 + LIMIT)  # libs and 2 archives in the tag's release, -part2 holds 8: full
    _publish(gh, folder)
    changed = _release(tmp_path / "changed", 2 + LIMIT)
    last = f"m{1 + LIMIT:02d}-sm8750-fp16-qnn{SDK}.tar.bz2"
    make_tar_bz2(changed / last, [(f"{last.removesuffix('.tar.bz2')}/m.bin", b"rebuilt")])
    _release_again(changed, last)
    with pytest.raises(PublishError) as e:
        _publish(gh, changed, replace=True)
    assert "holds 8 assets, GitHub's limit" in e.value.message and "free slot" in e.value.message
    # the same release still a draft: the old version goes first, nobody sees the gap
    gh.state.releases.clear()
    gh.state.assets.clear()
    gh.fault("PATCH", r"/releases/\d+$", "500", count=99)
    with pytest.raises(PublishError):
        _publish(gh, folder)
    gh.state.faults.clear()
    _publish(gh, changed, replace=True)
    assert last in _public(gh)[f"{TAG}-part2"] and len(_public(gh)[f"{TAG}-part2"]) == LIMIT


def _release_again(folder: Path, name: str) -> None:
    """The manifest and SHA256SUMS of ``folder`` after ``name`` was rebuilt."""
    m = json.loads((folder / "manifest.json").read_text())
    for a in m["assets"]:
        if a["name"] == name:
            a["size"], a["sha256"] = (folder / name).stat().st_size, sha256_file(folder / name)
    (folder / "manifest.json").write_text(json.dumps(m, indent=2))
    (folder / "SHA256SUMS").write_text("".join(f"{a['sha256']}  {a['name']}\n" for a in m["assets"]))


def test_githubs_own_reason_is_in_the_line(gh, tmp_path, monkeypatch):
    """A 422 says why (here: the asset limit, reached by someone else's uploads to the draft meanwhile)."""
    monkeypatch.setattr(fake, "MAX_ASSETS", 2)
    folder = _release(tmp_path / "rel", 2)
    with pytest.raises(PublishError) as e:
        _publish(gh, folder)
    assert "HTTP 422 Validation Failed: a release holds at most 2 assets" in e.value.message, e.value.message


def test_a_published_tag_release_someone_else_made_is_refused(gh, tmp_path):
    folder = _release(tmp_path / "rel", 2)
    client = Connection(token=gh.state.token, api_url=gh.url, sleep=lambda s: None).client(REPO)
    other = client.create_draft(TAG, "someone else's", "")
    client.upload(other, "theirs.zip", folder / "SHA256SUMS", "application/zip")
    client.update_release(other["id"], draft=False)
    with pytest.raises(PublishError) as e:
        _publish(gh, folder)
    assert f"{REPO}@{TAG} is already published with assets this release did not make" in e.value.message
    assert _public(gh) == {TAG: {"theirs.zip": "uploaded"}}


def test_an_interrupted_replace_in_a_published_release_is_finished_by_the_next_run(gh, tmp_path):
    """The swap of --replace stopped after the old version was renamed away: the next run finishes it (the new
    version is renamed into place, the temporary copies removed); a starter asset left under a temporary name is
    removed too. Nothing is refused as someone else's."""
    folder = _release(tmp_path / "rel", 2)
    _publish(gh, folder)
    changed = _release(tmp_path / "changed", 2)
    name = f"m01-sm8750-fp16-qnn{SDK}.tar.bz2"
    make_tar_bz2(changed / name, [(f"{name.removesuffix('.tar.bz2')}/m.bin", b"rebuilt")])
    _release_again(changed, name)
    gh.fault("PATCH", r"/releases/assets/\d+$", "500", count=99, skip=1)  # the old one renamed, the new one not
    with pytest.raises(PublishError):
        _publish(gh, changed, replace=True)
    names = set(_public(gh)[TAG])
    assert name not in names and any(n.startswith(name + ".new-") for n in names), names
    gh.state.faults.clear()
    with gh.state.lock:  # and a 502 left an empty asset under another temporary name
        (rid,) = gh.state.releases
        gh.state.assets[gh.state.new_id()] = {"release": rid, "name": f"{name}.new-0000aaaa", "label": None,
                                              "data": b"", "content_type": "x", "state": "starter"}
    _publish(gh, changed, replace=True)
    assert set(_public(gh)[TAG]) == _listed(changed) | {"manifest.json", "SHA256SUMS"}
    with gh.state.lock:
        (stored,) = [a for a in gh.state.assets.values() if a["name"] == name]
    assert stored["data"] == (changed / name).read_bytes()


def test_an_upload_that_keeps_leaving_starter_assets_says_so(gh, tmp_path):
    folder = _release(tmp_path / "rel", 1)
    gh.fault("POST", r"/uploads/.*name=m00-", "502-starter", count=99)
    with pytest.raises(PublishError) as e:
        _publish(gh, folder)
    assert "left an empty asset" in e.value.message or "gave up after" in e.value.message, e.value.message
    assert not any(a.get("state") == "starter" for a in gh.state.assets.values())
