"""Progress of a build: a live line in a terminal, plain lines in logs, ::group:: folds in GitHub Actions."""

from __future__ import annotations

import os
import sys
import time

from ..compile.records import TargetRecord
from ..util.text import clip


def _escape(text: str, prop: bool = False) -> str:
    """Workflow-command escaping (as @actions/core does): a message cannot end the command or start another."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


class Progress:
    def __init__(self, total: int, stream=None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.actions = os.environ.get("GITHUB_ACTIONS") == "true"
        self.live = self.stream.isatty() and not self.actions and os.environ.get("TERM") != "dumb"
        self.start = time.monotonic()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def info(self, text: str) -> None:
        self._clear()
        self._write(text + "\n")

    def running(self, ids: list[str]) -> None:
        if self.live and ids:
            elapsed = time.monotonic() - self.start
            self._write(f"\r\033[K[{self.done}/{self.total}] {elapsed:5.0f}s compiling {clip(', '.join(ids), 100)}")

    def finished(self, record: TargetRecord) -> None:
        self.done += 1
        status = record.status
        if status == "failed":
            line = f"[{self.done}/{self.total}] {record.id} FAILED: {record.error}"
        else:
            cos = (record.parity or {}).get("cosine")
            extra = f" cos {cos:.6f}" if cos is not None else ""
            line = (f"[{self.done}/{self.total}] {record.id} {status} "
                    f"{(record.size or 0) / 1e6:.2f} MB {record.seconds or 0:.1f}s{extra}")
        self._clear()
        if self.actions:
            self._write(f"::group::{line}\n")
            for w in record.warnings or []:
                self._write(f"  warning: {w}\n")
            if record.traceback:
                self._write(record.traceback)
            self._write("::endgroup::\n")
            if status == "failed":
                self._write(f"::error title={_escape(record.id, prop=True)}::{_escape(str(record.error))}\n")
        else:
            self._write(line + "\n")

    def _clear(self) -> None:
        if self.live:
            self._write("\r\033[K")
