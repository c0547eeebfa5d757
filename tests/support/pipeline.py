"""What tests/test_pipeline.py and tests/unit/test_pipeline.py share."""

from __future__ import annotations

import re


def _uploads(job: dict) -> list[str]:
    """Artifact names a job uploads when it succeeds (evidence uploads on failure() do not count)."""
    return [s["with"]["name"] for s in job.get("steps", [])
            if s.get("uses", "").startswith("actions/upload-artifact@") and "failure()" not in str(s.get("if", ""))]


def _downloads(job: dict) -> list[str]:
    return [s["with"].get("name") or s["with"]["pattern"] for s in job.get("steps", [])
            if s.get("uses", "").startswith("actions/download-artifact@")]


def _expand_names(name: str, model: str, includes: list[dict]) -> list[str]:
    """An artifact name of the export workflow for one model and each of its matrix entries."""
    name = re.sub(r"\$\{\{\s*inputs\.model\s*\}\}", model, name)
    return [re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m, e=e: str(e[m[1]]), name) for e in includes]
