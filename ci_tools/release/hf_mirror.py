"""Mirror a packaged release to a Hugging Face repo, in one commit (``<tag>/<asset>``): every file of every
linked part too, in the one folder (a Hub repo has no 1,000-asset limit; the manifest's names stay unique)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import PublishError
from ..util.text import clip
from .publish import release_dir, release_files


def mirror(dist: Path, repo: str, tag: str, *, dry_run: bool = False, api=None) -> str:
    folder = release_dir(dist)
    _, by_release = release_files(folder)
    files = [f for part in by_release.values() for f in part]
    if dry_run:
        return f"would commit {len(files)} files to huggingface.co/{repo} under {tag}/"
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = api or HfApi(token=os.environ.get("HF_TOKEN") or None)
    ops = [CommitOperationAdd(path_in_repo=f"{tag}/{name}", path_or_fileobj=str(path)) for name, path, _, _ in files]
    try:
        info = api.create_commit(repo_id=repo, operations=ops, commit_message=f"qnn-release {tag}")
    except HfHubHTTPError as e:
        raise PublishError(f"Hugging Face mirror {repo}: {clip(str(e), 200)}",
                           hint="check HF_TOKEN (write access) and the repo id") from None
    except (OSError, ValueError) as e:  # connection errors, unexpected answers
        raise PublishError(f"Hugging Face mirror {repo}: {type(e).__name__}: {clip(str(e), 200)}",
                           hint="check HF_ENDPOINT and the network") from None
    return f"mirrored {len(files)} files to {repo} in one commit {getattr(info, 'oid', '')}"
