"""The previous release's ``manifest.json``, for the "changes since" part of the release notes.

The previous release is the PUBLISHED release (drafts are unfinished and never compared against) with
the highest version below this tag's: for a final release, the highest final release below it (v1.1.0
compares with v1.0.x, not with its own v1.1.0-rc1); for a pre-release, any release below it. Tags that
are not versions fall back to the newest published release. A repository without one gets an empty
manifest with ``tag: null``: the notes then say it is the first release.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..util.files import write_json
from .github import GitHub


def previous_manifest(repo: str, tag: str, out: Path, *, token: str | None, api_url: str | None = None) -> str | None:
    """Write the previous release's manifest to ``out``; return its tag (None: there is none)."""
    from .publish import is_prerelease, tag_version

    gh = GitHub(repo, token=token, api_url=api_url)
    mine, final = tag_version(tag), not is_prerelease(tag)
    releases = [r for r in gh.paginate(f"/repos/{repo}/releases")  # newest first
                if not r.get("draft") and r.get("tag_name") != tag]
    if mine is not None:
        releases = sorted((r for r in releases if (v := tag_version(r["tag_name"])) is not None and v < mine
                           and not (final and r.get("prerelease"))),
                          key=lambda r: tag_version(r["tag_name"]), reverse=True)
    for rel in releases:
        asset = next((a for a in rel.get("assets", []) if a["name"] == "manifest.json"), None)
        if asset is None:  # a release listing may carry only some assets (a catalogue has ~1,000): page them
            asset = next((a for a in gh.assets(rel["id"]) if a["name"] == "manifest.json"), None)
        if asset is None:
            continue
        r = gh.call("GET", asset["url"], f"download manifest.json of {rel['tag_name']}",
                    headers={"Accept": "application/octet-stream"})
        try:
            manifest = json.loads(r.content)
        except ValueError:
            continue  # not ours: look further back
        if not isinstance(manifest, dict) or not isinstance(manifest.get("assets"), list):
            continue
        write_json(out, {**manifest, "tag": manifest.get("tag") or rel["tag_name"]})
        return rel["tag_name"]
    write_json(out, {"manifest_version": 1, "tag": None, "assets": []})
    return None
