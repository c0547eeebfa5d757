"""``qnn-release pages``: the GitHub Pages site of a repository's releases.

Lists every published release through the GitHub API, copies each release's own page (its
``index.html`` asset) to ``<tag>/index.html`` and writes an index of them all
(``templates/report/releases.html.j2``). The release workflow's ``pages`` job deploys the folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import quote

from ..util.files import replace_dir, write_atomic
from .github import GitHub
from .page import PAGE, page_env


def _get(gh: GitHub, asset: dict) -> bytes:
    r = gh.call("GET", asset["url"], f"download {asset['name']}", headers={"Accept": "application/octet-stream"})
    return r.content


def folder_for(tag: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", tag).strip(".") or "release"


def build_site(repo: str, out: Path, *, token: str | None, api_url: str | None = None, sleep=None) -> list[dict]:
    """Write the site into ``out`` (replaced whole); return one row per published release, newest first."""
    gh = GitHub(repo, token=token, api_url=api_url, **({"sleep": sleep} if sleep else {}))
    server = os.environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    moved = False
    try:
        rows, latest = [], None
        for rel in gh.paginate(f"/repos/{repo}/releases"):
            if rel.get("draft"):
                continue
            assets = {a["name"]: a for a in gh.assets(rel["id"])}
            tag = rel["tag_name"]
            row = {"tag": tag, "url": rel.get("html_url") or f"{server}/{repo}/releases/tag/{quote(tag, safe='')}",
                   "published": (rel.get("published_at") or "")[:10],
                   "prerelease": bool(rel.get("prerelease")), "page": None, "models": [], "chips": [], "sdk": []}
            if latest is None and not row["prerelease"]:
                latest = row["tag"]
            if PAGE in assets:
                folder = folder_for(row["tag"])
                write_atomic(tmp / folder / PAGE, _get(gh, assets[PAGE]))
                row["page"] = f"{folder}/{PAGE}"
            if "manifest.json" in assets:
                try:
                    manifest = json.loads(_get(gh, assets["manifest.json"]))
                    models = [a for a in manifest.get("assets", []) if a.get("kind") == "model"]
                    row.update(models=sorted({a["model"] for a in models}), chips=sorted({a["soc"] for a in models}),
                               sdk=manifest.get("sdk_versions", []))
                except (ValueError, KeyError, TypeError, AttributeError):
                    pass  # not a qnn-release manifest: the row links the release only
            rows.append(row)
        html = page_env().get_template("report/releases.html.j2").render(repo=repo, releases=rows, latest=latest)
        write_atomic(tmp / PAGE, html)
        replace_dir(tmp, out)
        moved = True
        return rows
    finally:
        if not moved:
            shutil.rmtree(tmp, ignore_errors=True)
