"""Remove each guard a release toolkit is trusted for, one at a time, and run the tests that must notice.

    python benchmarks/mutants.py [--only NAME] [--keep]

Each mutant copies the repository into a temporary folder, replaces one guard (the exact text must
occur once: a guard that moved is reported, not skipped silently), runs its tests there and counts
the mutant as killed when they fail. Prints a table and the kill rate; exits 1 below 100 %.
Not part of CI (minutes of real compiles); run it before every release.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    also: tuple[tuple[str, str], ...] = ()  # more (find, replace) in the same file: one guard, several sites


MUTANTS = [
    Mutant("ort: binary compiled for the chip asked", "ci_tools/compile/backends/ort.py",
           "if not qnn_ep.proves_chip(info.htp_arch, info.soc_model, job.soc):", "if False:",
           ("tests/test_guards.py::test_ort_refuses_a_binary_compiled_for_another_chip_than_asked",)),
    Mutant("verify: cosine threshold", "ci_tools/compile/verify.py",
           "if th.min_cosine is not None and p.cosine < th.min_cosine:",
           "if th.min_cosine is not None and p.cosine < th.min_cosine - 0.5:",
           ("tests/unit/test_doctor.py::test_each_threshold_at_its_boundary_per_precision",)),
    Mutant("verify: SNR threshold", "ci_tools/compile/verify.py",
           "if th.min_snr_db is not None and p.snr_db < th.min_snr_db:",
           "if th.min_snr_db is not None and p.snr_db < th.min_snr_db - 10:",
           ("tests/unit/test_doctor.py::test_each_threshold_at_its_boundary_per_precision",)),
    Mutant("verify: NaN never passes", "ci_tools/compile/verify.py", "    if p.nan_count:  # before any tolerance",
           "    if False:  # before any tolerance",
           ("tests/unit/test_doctor.py::test_nans_never_pass_on_the_absolute_tolerance",)),
    Mutant("verify: a small output judged on its own", "ci_tools/compile/verify.py", "        if rel > limit:",
           "        if False:",
           ("tests/unit/test_doctor.py::test_a_small_output_that_disagrees_is_not_hidden_by_a_large_one_that_agrees",)),
    Mutant("publish: completeness check before leaving draft", "ci_tools/release/publish.py",
           "            _check_complete(gh, made[p], by_release[p])\n", "            pass\n",
           ("tests/test_guards.py::test_publish_keeps_a_release_a_draft_when_an_asset_is_lost_before_the_final_check",)),
    # extract.py refuses '..' by name and again by resolving each path through the archive's links:
    # each is a guard of its own, with a test of its own
    Mutant("publish: sha256 of every asset before leaving draft", "ci_tools/release/publish.py",
           "    wrong = [n for n, _, d, _ in files if n in remote and _digest(gh, remote[n]) != d]",
           "    wrong = []",
           ("tests/test_guards.py::test_publish_keeps_a_release_a_draft_when_an_asset_changed_before_the_final_check",)),
    Mutant("fetch: our own '..' check (by name)", "ci_tools/release/extract.py",
           "        if \"..\" in parts:", "        if False:",
           ("tests/unit/test_guards.py::test_each_extraction_check_refuses_on_its_own",)),
    Mutant("fetch: a link leaving the tree", "ci_tools/release/extract.py",
           "            if not self.inside(resolved):\n                raise self.refuse(f\"link",
           "            if False:\n                raise self.refuse(f\"link",
           ("tests/unit/test_guards.py::test_each_extraction_check_refuses_on_its_own",)),
    Mutant("fetch: archive sha256", "ci_tools/sources/download.py", "        if got == sha256:", "        if True:",
           ("tests/test_publish_fetch.py::test_fetch_resolves_alias_resumes_and_checks_sha",)),
    Mutant("package: whole SDK version vs qnn-libs", "ci_tools/release/package.py",
           "if libs_ver and version_core(sdk) != version_core(libs_ver):", "if False:",
           ("tests/test_guards.py::test_the_package_gate_compares_whole_versions_and_refuses_an_empty_one",
            "tests/test_package.py::test_gate_refuses_other_sdk_version")),
    Mutant("package: chip read back from each stub", "ci_tools/release/package.py",
           "if not qnn_ep.proves_chip(got[\"htp_arch\"], got[\"soc_model\"], soc):", "if False:",
           ("tests/test_package.py::test_gate_refuses_binary_for_another_chip",)),
    Mutant("package: --require-verified", "ci_tools/release/package.py", "    if unverified:",
           "if False:",
           ("tests/test_guards.py::test_unverified_targets_are_said_so_and_refused_with_require_verified",)),
    Mutant("sources: sha256 pin", "ci_tools/sources/store.py",
           "        if got != sha and not self.pinning:", "        if False:", ("tests/test_sources.py",)),
    Mutant("compile: no CPU fallback", "ci_tools/compile/qnn_ep.py",
           "        so.add_session_config_entry(\"session.disable_cpu_ep_fallback\", \"1\")", "        pass",
           ("tests/test_guards.py::test_a_node_htp_rejects_is_an_error_not_a_silent_cpu_partition",)),
    Mutant("cache: key per chip", "ci_tools/builder/keys.py",
           "\"soc\": [t.soc.name, t.soc.soc_model, t.soc.htp_arch, t.soc.vtcm_mb], ", "",
           ("tests/unit/test_guards.py::test_the_target_key_changes_with_the_chip",),
           also=(("\"target\": [t.id, t.model.name, t.graph]", "\"target\": [t.model.name, t.graph]"),)),
    Mutant("render --check", "ci_tools/cli/app.py", "        if diffs or orphans:", "        if False:",
           ("tests/test_render.py::test_check_fails_with_diff_when_stale",)),
    Mutant("chip gate: fp16 refused on a chip without it", "ci_tools/matrix/schema.py",
           "    if soc.fp16 is False:\n", "    if False:\n", ("tests/test_matrix.py", "tests/test_plan.py")),
    Mutant("sdk: zip member with '..'", "ci_tools/qairt_zip.py", "        if \"..\" in name.split(\"/\"):",
           "        if False:",
           ("tests/test_sdk.py::test_malicious_zip_is_refused_and_leaves_nothing",)),
    Mutant("image: refuses an unpinned SDK", "ci_tools/sdk/image.py", "    if missing:\n        raise ConfigError",
           "    if False:\n        raise ConfigError",
           ("tests/test_pipeline.py::test_image_reference_is_immutable_lower_case_and_needs_pins",)),
    Mutant("qairt: the chip read back from the binary", "ci_tools/compile/backends/qairt.py",
           "if (soc_model, arch) != (job.soc.soc_model, job.soc.htp_arch):", "if False:",
           ("tests/test_qairt.py::test_a_device_config_the_tools_ignore_is_caught",)),
]


def run(m: Mutant, keep: bool) -> tuple[str, float, str]:
    tmp = Path(tempfile.mkdtemp(prefix="mutant-"))
    try:
        root = tmp / "repo"
        shutil.copytree(REPO, root, ignore=shutil.ignore_patterns(".git", ".venv", "dist", "__pycache__",
                                                                 ".pytest_cache", ".ruff_cache"))
        # ../shared is read by some tests: keep the same neighbourhood
        if (REPO.parent / "shared").exists():
            os.symlink(REPO.parent / "shared", tmp / "shared")
        baseline = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests],
                                  cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
        if baseline.returncode != 0:  # the tests must pass on the unmutated code, or nothing is measured
            return "BASELINE FAILS", 0.0, (baseline.stdout.strip().splitlines() or [""])[-1]
        target = root / m.file
        text = target.read_text()
        for find, replace in ((m.find, m.replace), *m.also):
            if text.count(find) != 1:
                return "guard not found", 0.0, f"{m.file}: the guarded text occurs {text.count(find)} times"
            text = text.replace(find, replace)
        target.write_text(text)
        start = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.tests],
                           cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
        seconds = time.monotonic() - start
        last = (r.stdout.strip().splitlines() or [""])[-1]
        # only a test FAILURE kills (exit 1): a collection error or a missing test (2, 4, 5) measures nothing
        outcome = {1: "killed", 0: "SURVIVED"}.get(r.returncode, f"ERROR (exit {r.returncode})")
        return outcome, seconds, last
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run the mutants whose name contains this")
    ap.add_argument("--keep", action="store_true", help="keep the mutated copies")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.only or args.only in m.name]
    killed = 0
    for m in chosen:
        outcome, seconds, detail = run(m, args.keep)
        killed += outcome == "killed"
        print(f"{outcome:15s} {seconds:6.1f}s  {m.name}  ({detail})", flush=True)
    rate = 100.0 * killed / max(1, len(chosen))
    print(f"\nkill rate: {killed}/{len(chosen)} = {rate:.0f} %")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
