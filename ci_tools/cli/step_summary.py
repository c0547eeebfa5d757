"""Markdown summaries for GitHub Actions: ``build``, ``package`` and ``publish`` append one to the
file ``$GITHUB_STEP_SUMMARY`` names, when it is set (templates in ``templates/summary/``).

Failures come first, each with its cause; then the rest. Nothing is written outside Actions.
"""

from __future__ import annotations

import os
import sys

from ..compile.records import CACHED, FAILED, BuildReport, verdict_label
from ..release.templating import render

SYMBOL = {"failed": "❌ failed", "ok": "✅ ok", "cached": "✅ cached"}


def append(markdown: str) -> bool:
    """Append to $GITHUB_STEP_SUMMARY; False when it is not set (not in Actions) or cannot be written."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(markdown.rstrip("\n") + "\n\n")
    except OSError as e:
        print(f"qnn-release: warning: cannot write the step summary {path}: {e.strerror or e}", file=sys.stderr)
        return False
    return True


def build(report: BuildReport) -> str:
    """A ``BuildReport``: every target, the failed ones first with their cause."""
    rows = []
    for r in sorted(report.records, key=lambda r: (r.status != FAILED, r.id)):
        parity = r.parity or {}
        rows.append({"id": r.id, "status": SYMBOL.get(r.status, r.status), "failed": r.status == FAILED,
                     "size": r.size, "seconds": r.compile_seconds, "cosine": parity.get("cosine"),
                     "snr": parity.get("snr_db"), "max_abs": r.passed_by == "max_abs",
                     "verified_on": verdict_label(r) if not r.error else "",
                     "emulator_ms": round(r.emulator_seconds * 1000, 3) if r.emulator_seconds else None,
                     "cause": r.error, "exit_code": r.exit_code})
    ok = sum(r.built for r in report.records)
    return render("summary/build.md.j2", rows=rows, ok=ok, total=len(report.records), failed=len(report.failed),
                  cached=sum(r.status == CACHED for r in report.records), seconds=report.seconds,
                  sdk=report.sdk_version, backend=report.backend)


def package(result) -> str:
    models = [a for a in result.assets if a.kind == "model"]
    return render("summary/package.md.j2", manifest=result.manifest, models=models,
                  others=[a for a in result.assets if a.kind != "model"], skipped=result.manifest.skipped,
                  release=result.release)


def publish(plan, repo: str, dry_run: bool) -> str:
    return render("summary/publish.md.j2", plan=plan, repo=repo, dry_run=dry_run)


def failure(command: str, exit_code: int, message: str) -> str:
    return render("summary/failure.md.j2", command=command, exit_code=exit_code, message=message)
