"""``qnn-release changed``: which models a push has to build again, so main.yaml's cost follows the edit, not the
catalogue.

A model is built again when its own matrix entry changed (or it is new), when a file its ``path`` source or samples
read changed, or when something every model is made from changed: the ``sdk`` block, the ``tool:`` pin, the chip
catalog, and in qnn-release's own repository its source (``ci_tools/``, ``templates/``, the Dockerfile, the
constraints). An unknown base (a new branch, a shallow history that lacks it, an unreadable old matrix) rebuilds
every model and says why: never fewer than needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import yaml

from ..util.git import git_out

# qnn-release's own sources: a change here can change every model's binaries (the prepare code, the templates)
EVERYTHING = ("ci_tools/", "templates/", "Dockerfile-2.40", "pyproject.toml", "constraints.txt", "matrix/socs.yaml")


@dataclass(frozen=True)
class Changes:
    models: list[str]  # sorted
    why: str  # one line: what made them


def _entries(text: str | None) -> tuple[dict | None, dict[str, dict]]:
    """(the matrix without its models, model name -> entry), or (None, {}) when it is not a matrix."""
    try:
        data = yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError:
        return None, {}
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        return None, {}
    # release settings make no binary; an included file's models are compared one by one
    rest = {k: v for k, v in data.items() if k not in ("models", "release", "include")}
    # (a model without a name, which the matrix's schema refuses, would key None here)
    return rest, {cast(str, m.get("name")): m for m in data["models"] if isinstance(m, dict)}


def _with_included(rel: str, read) -> tuple[dict | None, dict[str, dict]]:
    """As ``_entries``, with the models of the matrix's ``include`` files (``read``: repository path -> text)."""
    text = read(rel)
    rest, models = _entries(text)
    includes = yaml.safe_load(text).get("include") if rest is not None else None
    for name in includes if isinstance(includes, list) else []:
        models = {**models, **_entries(read(str(Path(rel).parent / str(name))))[1]}  # their sdk is this one's
    return rest, models


def _reads(entry: dict, root: Path) -> list[str]:
    """The repository paths a model entry reads: any value, or word of a command, naming a file or folder of the
    repository (its ``path`` sources, samples, ``calibration.path``, an export script, a verify sentences file)."""
    out: list[str] = []
    stack: list[object] = [entry]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str) and len(item) < 4096:
            for word in item.split():
                word = word.strip("'\"").rstrip("/")
                if word and not word.startswith(("/", "-", "..")) and "://" not in word and (root / word).exists():
                    out.append(word)
    return out


def changed_models(root: Path, matrix: Path, base: str | None) -> Changes:
    """The models a push from ``base`` to HEAD builds again (``root``: the repository; ``matrix``: its matrix)."""
    rel = matrix.resolve().relative_to(root.resolve()).as_posix()

    def here(path: str) -> str | None:
        return (root / path).read_text() if (root / path).is_file() else None

    rest, now = _with_included(rel, here)
    everyone = sorted(now)
    if not base or set(base) == {"0"}:
        return Changes(everyone, "no earlier commit to compare with (a new branch): every model")
    paths = git_out(root, "diff", "--name-only", base, "HEAD")
    old_rest, old = _with_included(rel, lambda path: git_out(root, "show", f"{base}:{path}"))
    if paths is None or old_rest is None:
        return Changes(everyone, f"commit {base[:12]} or its {rel} cannot be read here (fetch it): every model")
    changed = [p for p in paths.splitlines() if p]
    if rest != old_rest:
        return Changes(everyone, f"{rel}: the sdk or tool pin changed: every model")
    own = (root / "ci_tools").is_dir()  # qnn-release's own repository: its source makes every model
    hit = next((p for p in changed if own and p.startswith(EVERYTHING)), None)
    if hit:
        return Changes(everyone, f"{hit} changed (qnn-release's own source): every model")
    picked = [name for name, entry in now.items() if old.get(name) != entry
              or any(p == r or p.startswith(r + "/") for r in _reads(entry, root) for p in changed)]
    return Changes(sorted(picked), f"{len(picked)} of {len(now)} model(s) changed since {base[:12]}"
                   + (f": {', '.join(sorted(picked)[:5])}{' ...' if len(picked) > 5 else ''}" if picked else ""))


def github_output(changes: Changes, shards: int, per_shard: int) -> str:
    """``models1`` ... ``models<shards>``: the changed models as JSON lists of at most ``per_shard`` each (what
    main.yaml's export matrices read; an empty list skips its job), and ``count``."""
    import json

    lists = [changes.models[i * per_shard:(i + 1) * per_shard] for i in range(shards)]
    if sum(map(len, lists)) != len(changes.models):
        raise ValueError(f"{len(changes.models)} models do not fit {shards} matrices of {per_shard}")
    return "".join(f"models{i + 1}={json.dumps(x)}\n" for i, x in enumerate(lists)) + f"count={len(changes.models)}\n"


def last_success(repo: str, workflow: str, branch: str, via) -> str | None:
    """The commit of the newest successful run of ``workflow`` on ``branch`` (REST API, "List workflow runs for a
    workflow": status=success), or None. A push's own ``before`` is not enough: GitHub cancels a pending run when a
    newer one of its concurrency group queues, and that push's models would never be built."""
    gh = via.client(repo)
    r = gh.request("GET", f"/repos/{repo}/actions/workflows/{workflow}/runs",
                   params={"branch": branch, "status": "success", "per_page": 1})
    if r.status_code != 200:
        return None
    runs = r.json().get("workflow_runs") or []
    sha = runs[0].get("head_sha") if runs and isinstance(runs[0], dict) else None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{40}", sha) else None
