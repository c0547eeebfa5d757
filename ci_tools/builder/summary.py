"""The table ``qnn-release build`` ends with: every target, its verdict, then the failures and refusals."""

from __future__ import annotations

from ..compile.records import CACHED, FAILED, GENERATED, NOT_VERIFIED, BuildReport, verdict, verdict_label
from ..util.table import table


def summary(report: BuildReport) -> str:
    rows = []
    for r in report.records:
        cos = (r.parity or {}).get("cosine")
        mark = "*" if r.passed_by == "max_abs" else ""
        status = r.status + (", unverified" if r.built and not r.verified else "")
        on = verdict_label(r) if verdict(r) != NOT_VERIFIED else ""
        rows.append((r.id, status, f"{r.size / 1e6:.2f} MB" if r.size else "",
                     f"{r.seconds or 0:.1f}" if r.status != CACHED else "-",
                     f"{cos:.6f}{mark}" if cos is not None else "", on if r.status != FAILED else ""))
    text = table(["target", "status", "size", "seconds", "cosine", "verified on"], rows)
    ok = sum(r.built for r in report.records)
    cached = sum(r.status == CACHED for r in report.records)
    text += (f"\n\n{ok}/{len(report.records)} targets ok ({cached} cached), {len(report.failed)} failed, "
             f"{report.seconds:.1f}s; SDK {report.sdk_version}; report: {report.path}")
    if any(r.passed_by == "max_abs" for r in report.records):
        text += ("\n* passed on the absolute tolerance (max_abs), not on cosine")
    for r in report.records:
        for rule in r.rules or []:
            text += f"\nrule {r.id}: {rule}"
    if any(r.built and not r.verified for r in report.records):
        text += ("\nnote: unverified targets were never run on the HTP emulator (this route has none here): "
                 "`package --require-verified` refuses them")
    generated = sorted({r.model for r in report.records if r.built and verdict(r) == GENERATED})
    if generated:
        text += (f"\nnote: verified on generated inputs only: {', '.join(generated)} (give the model real samples "
                 "with `samples:` in the matrix; `package --require-verified` refuses it otherwise)")
    for r in report.failed:
        text += f"\nFAILED {r.id}: {r.error}"
    for refused in report.refused:
        text += (f"\nREFUSED {refused['model']} {refused['precision']} for {refused['soc']}: "
                 f"{refused['reason']}")
    return text
