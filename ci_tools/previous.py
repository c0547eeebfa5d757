"""The previous release's ``manifest.json``, for the "changes since" part of the release notes.

The previous release is the newest PUBLISHED release of the repository with another tag (drafts
are unfinished releases and are never compared against). A repository without one gets an empty
manifest with ``tag: null``: the notes then say it is the first release.
"""

from __future__ import annotations

import json
from pathlib import Path

from .github import GitHub
from .report import write_json


def previous_manifest(repo: str, tag: str, out: Path, *, token: str | None, api_url: str | None = None) -> str | None:
    """Write the previous release's manifest to ``out``; return its tag (None: there is none)."""
    gh = GitHub(repo, token=token, api_url=api_url)
    for rel in gh.paginate(f"/repos/{repo}/releases"):  # newest first
        if rel.get("draft") or rel.get("tag_name") == tag:
            continue
        asset = next((a for a in rel.get("assets", []) if a["name"] == "manifest.json"), None)
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
