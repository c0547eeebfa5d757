"""``qnn-release device-numbers``: every built target measured on a real device of its chip."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..device.measure import VIAS
from ..errors import UsageError, VerifyError


def cmd_device_numbers(args: argparse.Namespace) -> int:
    from ..device.common import Settings, parity_failures
    from ..device.measure import device_numbers
    from ..device.numbers import FILE, summary_line
    from ..matrix.schema import load_matrix

    if args.budget_minutes <= 0 or args.max_inputs < 1:
        raise UsageError("--budget-minutes must be > 0 and --max-inputs >= 1")
    settings = Settings(budget_seconds=args.budget_minutes * 60.0, max_entries=args.max_inputs, qairt=args.qairt,
                        cpu=not args.no_cpu, poll_seconds=args.poll_seconds, serial=args.serial,
                        qnn_sdk=args.qnn_sdk)
    numbers = device_numbers(args.dist, via=args.via, soc=args.soc, model=args.model, settings=settings)
    if numbers.note:  # said once for every target
        print(numbers.note)
    else:
        for tid, run in sorted(numbers.targets.items()):
            print(summary_line(tid, run))
    measured = sum(r.measured_ok for r in numbers.targets.values())
    print(f"{measured} of {len(numbers.targets)} targets measured on a device; {args.dist / FILE}")
    failed = parity_failures(load_matrix(_matrix_of(args.dist)), numbers)
    if failed:
        raise VerifyError(f"{len(failed)} target(s) disagree with CPU on the device: {failed[0]}",
                          hint="options.device_parity: record in the matrix keeps the numbers without failing")
    return 0


def _matrix_of(dist: Path):
    from ..compile.records import REPORT, BuildReport

    return BuildReport.read(dist / REPORT).matrix


def register(sub) -> None:
    p = sub.add_parser("device-numbers", help="run every built target on a real device of its chip (Qualcomm AI "
                       "Hub): latency, memory, placement, parity vs CPU, speedup vs the device's CPU")
    p.add_argument("dist", type=Path, nargs="?", default=Path("dist"), help="the build folder (build-report.json)")
    p.add_argument("--via", choices=list(VIAS), default="ai-hub",
                   help="Qualcomm AI Hub (QAI_HUB_API_TOKEN), or the phone on adb (a self-hosted runner's)")
    p.add_argument("--serial", help="adb: the phone (default: $ANDROID_SERIAL, or the only one attached)")
    p.add_argument("--qnn-sdk", type=Path, help="adb: the QAIRT tree whose qnn-net-run and runtime libraries go "
                   "to the phone (default: $QNN_SDK_ROOT); at least the version that built the binaries")
    p.add_argument("--soc", action="append", help="only these chips (repeat)")
    p.add_argument("--model", action="append", help="only these models (repeat)")
    p.add_argument("--budget-minutes", type=float, default=60.0,
                   help="every job is submitted first; what has not finished within this is recorded as timed out")
    p.add_argument("--max-inputs", type=int, default=64, help="inputs per graph the device runs (real samples, "
                   "spread evenly)")
    p.add_argument("--qairt", help="the QAIRT runtime to ask for (default: the smallest offered >= the build's)")
    p.add_argument("--no-cpu", action="store_true", help="skip the same graph on the device's CPU (no speedup)")
    p.add_argument("--poll-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_device_numbers)
