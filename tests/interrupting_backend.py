"""A compile route for tests that writes part of its output, then fails or is interrupted.

It wraps the real ort route so the targets it lets through are real builds.
"""

from __future__ import annotations

import os
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
            if mode == "interrupt":
                raise KeyboardInterrupt
            raise CompileError(f"{job.target_id}: simulated compiler crash")
        return super().compile(job)
