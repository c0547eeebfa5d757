"""A compile route for tests that writes part of its output, then fails or is interrupted.

It wraps the real ort route so the targets it lets through are real builds.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ci_tools.compile.backends.ort import OrtBackend
from ci_tools.errors import CompileError


class InterruptingBackend(OrtBackend):
    name = "interrupting"

    def compile(self, job):
        mode = os.environ.get("TEST_BACKEND_MODE", "")
        if job.soc.name in os.environ.get("TEST_BACKEND_SOCS", "").split(","):
            (job.out_dir / f"{job.prepared.graph}_ctx_qnn.bin").write_bytes(b"half a binary")
            if mode == "hang":  # a compile that never ends: the test interrupts it, whatever the machine's load
                Path(os.environ["TEST_BACKEND_MARKER"]).write_text(job.target_id)
                while True:
                    time.sleep(0.05)
            if mode == "native-hang":  # as a native compile: in the helper process, deaf to SIGINT and SIGTERM
                from ci_tools.util import isolated

                isolated.call(native_hang, os.environ["TEST_BACKEND_MARKER"], what=f"compiling {job.target_id}",
                              heartbeat=0.2)
            if mode == "worker-hang":  # deaf to SIGTERM in the worker itself (an emulator run in native code)
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
                Path(os.environ["TEST_BACKEND_MARKER"]).write_text(str(os.getpid()))
                while True:
                    time.sleep(0.05)
            if mode == "interrupt":
                raise KeyboardInterrupt
            raise CompileError(f"{job.target_id}: simulated compiler crash")
        return super().compile(job)


def native_hang(marker: str) -> None:
    """Never returns, and ignores the signals a Python handler would turn into KeyboardInterrupt (native code
    holds the main thread the same way): only SIGKILL ends it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)
