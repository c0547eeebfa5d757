"""``qnn-release publish``: upload a packaged release to GitHub, never half-published.

The release is a DRAFT until every asset is present with the manifest's sha256; the archives
go first, ``manifest.json``, ``SHA256SUMS`` and the notes last, then it is published. Runs are
idempotent: an asset already there with the same digest is skipped, a different one is refused
unless ``--replace``. Several publishers racing on one tag converge on the oldest draft.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PublishError
from ..sources.store import sha256_file
from ..util.github_limits import EXTRAS, LAST, MAX_ASSET_BYTES, MAX_ASSETS
from ..util.text import clip
from .github import Connection, GitHub
from .manifest import Manifest, read_manifest

MAX_ASSET = MAX_ASSET_BYTES + 1  # GitHub refuses assets of 2 GiB and more


@dataclass
class Plan:
    tag: str
    release: str = ""
    actions: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.actions.append(text)


def is_prerelease(tag: str) -> bool:
    """v1.2.0-rc1, 1.2.0b1, v2.0.0.dev3: a pre-release, never the "latest" release apps fetch by default."""
    import re

    from packaging.version import InvalidVersion, Version

    core = tag[1:] if tag[:1] in "vV" else tag
    if re.match(r"^\d+(\.\d+)*-", core):  # semver: anything after '-' is a pre-release
        return True
    try:
        return Version(core).is_prerelease
    except InvalidVersion:
        return False


def tag_version(tag: str | None):
    """A release tag as a comparable version (v1.2.0, 1.2.0-rc1 -> 1.2.0rc1), or None for another kind of tag."""
    from packaging.version import InvalidVersion, Version

    core = (tag or "")[1:] if (tag or "")[:1] in "vV" else (tag or "")
    try:
        return Version(core)
    except InvalidVersion:
        return None


def is_newest(tag: str, published: list[dict]) -> bool:
    """Whether ``tag`` should be "latest": not a pre-release, and no published final release has a higher
    version (a v1.0.1 hotfix published after v1.1.0 stays behind it). Tags that are not versions: newest wins."""
    mine = tag_version(tag)
    if is_prerelease(tag):
        return False
    if mine is None:
        return True
    others = [tag_version(r.get("tag_name")) for r in published
              if not r.get("draft") and not r.get("prerelease") and r.get("tag_name") != tag]
    return all(v is None or v <= mine for v in others)


def release_dir(path: Path) -> Path:
    for p in (path, path / "release"):
        if (p / "manifest.json").is_file():
            return p
    raise PublishError(f"{path}: no manifest.json here or in {path / 'release'}",
                       hint="run `qnn-release package` first")


Upload = tuple[str, Path, str, str]  # (name, path, sha256, content type)
Files = list[Upload]  # in upload order


def local_assets(folder: Path) -> tuple[Manifest, Files]:
    """(manifest, the files of the tag's own release in upload order), every file checked; for a release in
    several parts see ``release_files``."""
    manifest, by_release = release_files(folder)
    return manifest, by_release[None]


def release_files(folder: Path) -> tuple[Manifest, dict[str | None, Files]]:
    """(manifest, release tag -> its files in upload order; None: the tag's own release, which gets the notes,
    the page, the sh client, then SHA256SUMS and manifest.json last), every file checked against the manifest
    and against GitHub's limits."""
    manifest = read_manifest(folder / "manifest.json", PublishError)
    by_release: dict[str | None, Files] = {part: [] for part in manifest.parts}
    by_release[None] = []
    for a in manifest.assets:
        named: list[Any] = list(a.pieces) if a.pieces else [a]  # its pieces, or itself: each has name, sha256
        for f in named:
            path = folder / f.name
            if not path.is_file():
                raise PublishError(f"{path}: listed in manifest.json but missing")
            digest = sha256_file(path)
            if digest != f.sha256:
                raise PublishError(f"{path}: sha256 {digest[:12]}... does not match the manifest's "
                                   f"{f.sha256[:12]}...", hint="package again; never edit a packaged release")
            if path.stat().st_size >= MAX_ASSET:
                raise PublishError(f"{path}: {path.stat().st_size} bytes; GitHub assets must be under 2 GiB",
                                   hint="package again: a larger archive is uploaded in pieces "
                                        "(release.max_asset_bytes)")
            if a.release not in by_release:
                raise PublishError(f"{folder}/manifest.json: {a.name} is in release {a.release}, which is not "
                                   "one of its parts", hint="package again; never edit a packaged release")
            by_release[a.release].append((f.name, path, digest, "application/x-bzip2"))
    files = by_release[None]
    for name, ctype in EXTRAS:
        if (folder / name).is_file():
            files.append((name, folder / name, sha256_file(folder / name), ctype))
    for name in LAST:
        files.append((name, folder / name, sha256_file(folder / name),
                      "application/json" if name.endswith(".json") else "text/plain"))
    for release, listed in by_release.items():
        if len(listed) > MAX_ASSETS:
            raise PublishError(f"{folder}: {len(listed)} assets for release {release or manifest.tag}; a "
                               f"GitHub release holds at most {MAX_ASSETS}",
                               hint="package again with this qnn-release: it continues a release in linked parts "
                                    "(nothing was uploaded)")
    return manifest, by_release


def _digest(gh: GitHub, asset: dict) -> str:
    d = asset.get("digest") or ""
    if d.startswith("sha256:"):
        return d.split(":", 1)[1]
    # older servers have no digest field: hash the stored bytes
    r = gh.call("GET", asset["url"], f"download asset {asset['name']}",
                headers={"Accept": "application/octet-stream"}, stream=True)
    h = hashlib.sha256()
    for chunk in r.iter_content(1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _find_release(gh: GitHub, tag: str, plan: Plan, dry_run: bool, body: str) -> dict | None:
    published = gh.release_by_tag(tag)
    if published is not None:
        plan.release = f"published release {published['id']}"
        return published
    drafts = gh.drafts_for(tag)
    if drafts:
        plan.release = f"draft release {drafts[0]['id']}"
        return drafts[0]
    plan.add(f"create draft release for {tag}")
    if dry_run:
        return None
    # a linked part's tag goes on the commit the release was built from (Actions: GITHUB_SHA), not the default
    # branch's head
    mine = gh.create_draft(tag, tag, body, target=os.environ.get("GITHUB_SHA") or None)
    # another publisher may have created one at the same moment: everybody keeps the oldest
    drafts = gh.drafts_for(tag)
    keep = drafts[0] if drafts else mine
    if keep["id"] != mine["id"]:
        gh.delete_release(mine["id"])
    plan.release = f"draft release {keep['id']}"
    return keep


def publish(path: Path, repo: str, tag: str, *, via: Connection, dry_run: bool = False,
            replace: bool = False) -> Plan:
    """Upload every part, each a draft until all of them hold every asset with the manifest's sha256; then the
    linked parts are published (pre-releases, never "latest"), the tag's own release last. A re-run resumes."""
    token = via.token
    folder = release_dir(path)
    manifest, by_release = release_files(folder)
    if manifest.tag not in (None, tag):
        raise PublishError(f"{folder}/manifest.json was packaged for {manifest.tag}, not {tag}",
                           hint="package again with --tag " + tag)
    if not token and not dry_run:
        raise PublishError("no GitHub token", hint="set GITHUB_TOKEN or GH_TOKEN (contents: write)")
    gh = via.client(repo)
    notes = (folder / "RELEASE_NOTES.md").read_text() if (folder / "RELEASE_NOTES.md").is_file() else ""
    plan = Plan(tag=tag)
    parts = list(manifest.parts)
    bodies: dict[str | None, str] = {None: notes, **{p: _part_body(tag, k + 2, len(parts) + 1)
                                                     for k, p in enumerate(parts)}}
    releases: dict[str | None, dict | None] = {}
    for part in [*parts, None]:  # the linked parts first: the tag's own release (the manifest) is what clients read
        name = part or tag
        found = releases[part] = _find_release(gh, name, plan, dry_run, bodies[part])
        if found is not None and not found.get("draft", True):
            _made_here(gh, found, by_release[part], f"{repo}@{name}", replace)
        _upload_all(gh, found, by_release[part], plan, _Mode(dry_run=dry_run, replace=replace, where=f"{repo}@{name}"))
    drafts = [p for p in [*parts, None] if (releases[p] or {}).get("draft", True)]
    made = {p: r for p, r in releases.items() if r is not None}  # all of them, unless a dry run
    if drafts and not dry_run:
        for p in [*parts, None]:  # nothing leaves draft before every part is whole: each checked once
            _check_complete(gh, made[p], by_release[p])
    for part in drafts:
        name = part or tag
        plan.add(f"publish {name} (leave draft) once all {len(by_release[part])} assets are verified")
        if dry_run:
            continue
        release = made[part]
        if part is not None:
            gh.update_release(release["id"], draft=False, body=bodies[part], name=name, prerelease=True,
                              make_latest="false")
            continue
        pre = is_prerelease(tag)
        latest = is_newest(tag, list(gh.paginate(f"/repos/{repo}/releases")))
        gh.update_release(release["id"], draft=False, body=notes, name=tag, prerelease=pre,
                          make_latest="true" if latest else "false")
        plan.release = f"release {release['id']}: was a draft, now published" + (" as a pre-release" if pre else "") \
            + (f", with {len(parts)} linked part(s): {', '.join(parts)}" if parts else "")
    return plan


def _part_body(tag: str, k: int, total: int) -> str:
    return (f"Part {k} of {total} of release {tag}: the assets GitHub's 1,000 per release leaves no room for. "
            f"The manifest.json of {tag} lists every asset and the release that holds it; `qnn-release fetch`, "
            "qnn-fetch.sh and the Java resolver find them here.")


UPLOADED = "uploaded"  # an asset's state once GitHub holds all of it


def _existing(gh: GitHub, release: dict | None, files: Files, plan: Plan, dry_run: bool) -> dict[str, dict]:
    """The release's assets by name, once what this release does not make is gone from a draft: an empty asset
    GitHub left after a failed upload ("When an upstream failure occurs, you will receive a 502 Bad Gateway status.
    This may leave an empty asset with a state of starter. It can be safely deleted": REST API, "Upload a release
    asset"), and in a draft nobody sees, an asset its manifest does not list (an interrupted publish of other
    content, a --replace's temporary name): a release never goes public with assets its SHA256SUMS does not list."""
    if release is None:
        return {}
    wanted = {name for name, _, _, _ in files}
    existing = {}
    for a in gh.assets(release["id"]):
        stale = a.get("state", UPLOADED) != UPLOADED
        if _leftover(a["name"], wanted):  # an interrupted --replace's: removed once its name is whole again
            existing[a["name"]] = a
            continue
        if stale or (release.get("draft", True) and a["name"] not in wanted):
            plan.add(f"remove {a['name']} from the draft: " + ("an empty asset a failed upload left (state "
                     f"{a.get('state')})" if stale else "not in this release's manifest"))
            if not dry_run:
                gh.delete_asset(a["id"])
            continue
        existing[a["name"]] = a
    return existing


def _leftover(name: str, mine: set[str]) -> bool:
    """A name this publish's own ``--replace`` uses for a moment (``<name>.new-<sha8>``, ``<name>.old-<id>``)."""
    base, sep, tail = name.rpartition(".")
    return bool(sep) and base in mine and re.fullmatch(r"new-[0-9a-f]{8}|old-[0-9]+", tail) is not None


def _made_here(gh: GitHub, release: dict, files: Files, where: str, replace: bool) -> None:
    """A published release is resumed only when everything in it is this release's (a publish of it stopped after
    publishing it: its files, an empty asset a 502 left, the temporary names of an interrupted --replace; without
    ``replace``, its files with the manifest's sha256); anything else was made by someone or something else:
    nothing is uploaded into a public release this publish did not make."""
    mine = {name: digest for name, _, digest, _ in files}
    remote = {a["name"]: a for a in gh.assets(release["id"]) if a.get("state", UPLOADED) == UPLOADED
              and not _leftover(a["name"], set(mine))}
    other = sorted(set(remote) - set(mine))
    changed = [] if replace else [n for n in remote if n in mine and _digest(gh, remote[n]) != mine[n]]
    if other:
        raise PublishError(f"{where} is already published with assets this release did not make ({len(other)} not "
                           f"in its manifest: {clip(', '.join(other), 120)}): publish uploads only into releases it "
                           "made", hint=f"delete that release (gh release delete {where.split('@', 1)[1]} "
                           "--cleanup-tag) if it is a leftover, or package and publish under another tag")
    if changed:  # checked before anything is uploaded into it
        raise PublishError(f"{where}: asset {changed[0]} is already published with other content"
                           + (f" ({len(changed)} assets)" if len(changed) > 1 else ""),
                           hint="a published asset is never silently overwritten: pass --replace")


@dataclass(frozen=True, kw_only=True)
class _Mode:
    """How one release's assets are uploaded: planned only (``dry_run``), changed ones overwritten (``replace``), and
    ``where`` they go (``repo@name``, as messages say it)."""

    dry_run: bool
    replace: bool
    where: str


def _upload_all(gh: GitHub, release: dict | None, files: Files, plan: Plan, mode: _Mode) -> None:
    existing = _existing(gh, release, files, plan, mode.dry_run)
    wanted = {name for name, _, _, _ in files}
    _upload_each(gh, release, files, existing, plan, mode)
    for name, a in existing.items():  # every name whole again: an interrupted --replace's temporary copies go
        if _leftover(name, wanted):
            plan.add(f"remove {name}: left by an interrupted --replace")
            if not mode.dry_run:
                gh.delete_asset(a["id"])


def _upload_each(gh: GitHub, release: dict | None, files: Files, existing: dict[str, dict], plan: Plan,
                 mode: _Mode) -> None:
    dry_run, replace, where = mode.dry_run, mode.replace, mode.where
    live = release or {}  # None only in a dry run, which uploads nothing
    for upload in files:
        name, local, digest, ctype = upload
        if name in existing:
            if _digest(gh, existing[name]) == digest:
                plan.add(f"skip {name} (already there, same sha256)")
                continue
            if not replace:
                raise PublishError(f"{where}: asset {name} is already published with other content",
                                   hint="a published asset is never silently overwritten: pass --replace")
            plan.add(f"replace {name} ({local.stat().st_size} bytes)")
            full = len(existing) >= MAX_ASSETS  # leftovers of an earlier --replace take slots too
            if full and not (release or {}).get("draft", True):
                raise PublishError(f"{where}: --replace {name}: the release is published and holds {len(existing)} "
                                   f"assets, GitHub's limit; a replacement is uploaded before the old version is "
                                   "removed (clients never see neither), which needs a free slot",
                                   hint="delete one asset of that release by hand, or publish the change under a "
                                        "new tag")
            if not dry_run:
                if full:  # a draft nobody sees: the old version goes first to make room
                    gh.delete_asset(existing[name]["id"])
                    _upload(gh, live, name, local, digest, ctype)
                else:
                    _replace(gh, live, existing[name], upload)
            continue
        staged = existing.get(f"{name}.new-{digest[:8]}")
        if staged is not None and _digest(gh, staged) == digest:  # an interrupted --replace: finish its swap
            plan.add(f"rename {staged['name']} to {name} (an interrupted --replace)")
            if not dry_run:
                gh.rename_asset(staged["id"], name)
                existing.pop(staged["name"])
            continue
        plan.add(f"upload {name} ({local.stat().st_size} bytes)" + (f" to {where.split('@', 1)[1]}"
                                                                     if "-part" in where else ""))
        if not dry_run:
            _upload(gh, live, name, local, digest, ctype)


def _upload(gh: GitHub, release: dict, name: str, path: Path, digest: str, ctype: str) -> dict:
    starters = 0
    for _ in range(3):
        r = gh.upload(release, name, path, ctype)
        if r.status_code == 201:
            asset = r.json()
            if asset.get("digest") and asset["digest"] != f"sha256:{digest}":
                raise PublishError(f"{name}: GitHub stored a different sha256 ({asset['digest']})")
            return asset
        # 422: a name clash; a retried upload whose first attempt was stored before the connection dropped, or the
        # empty "starter" asset a 502 left (safe to delete, GitHub says): deleted, and the upload tried again
        stored = next((a for a in gh.assets(release["id"]) if a["name"] == name), None)
        if stored is None or stored.get("state", UPLOADED) == UPLOADED:
            break
        gh.delete_asset(stored["id"])
        starters += 1
    if stored is not None and stored.get("state", UPLOADED) == UPLOADED and _digest(gh, stored) == digest:
        return stored
    if starters == 3:
        raise PublishError(f"upload {name}: GitHub failed the upload and left an empty asset 3 times in a row (each "
                           "deleted)", hint="GitHub is failing uploads: run publish again later, it resumes")
    raise gh.fail(r, f"upload {name}")


def _replace(gh: GitHub, release: dict, old: dict, upload: Upload) -> None:
    """``upload``'s new version first under a temporary name, then swap names with ``old``: one version is always
    there."""
    name, path, digest, ctype = upload
    tmp_name = f"{name}.new-{digest[:8]}"
    stale = next((a for a in gh.assets(release["id"]) if a["name"] == tmp_name), None)
    if stale is not None:
        gh.delete_asset(stale["id"])
    new = _upload(gh, release, tmp_name, path, digest, ctype)
    gh.rename_asset(old["id"], f"{name}.old-{old['id']}")
    gh.rename_asset(new["id"], name)
    gh.delete_asset(old["id"])


def _check_complete(gh: GitHub, release: dict, files: Files) -> None:
    remote = {a["name"]: a for a in gh.assets(release["id"])}
    missing = [n for n, _, _, _ in files if n not in remote]
    wrong = [n for n, _, d, _ in files if n in remote and _digest(gh, remote[n]) != d]
    extra = sorted(set(remote) - {n for n, _, _, _ in files}) if release.get("draft", True) else []
    if missing or wrong or extra:
        raise PublishError(f"release {release['id']} stays a draft: missing {clip(missing, 200)}, different "
                           f"{clip(wrong, 200)}, not in its manifest {clip(extra, 200)}",
                           hint="run publish again: it resumes")
