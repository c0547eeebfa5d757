"""A phone on adb, for teams with one on a self-hosted runner: the few adb commands the adb route uses.

Each behaves as the Android Debug Bridge documents it (AOSP ``packages/modules/adb/docs/user/adb.1.md``):
``devices`` lists ``SERIAL<TAB>STATE`` lines under "List of devices attached" (a usable phone's state is
``device``; ``unauthorized`` and ``offline`` are not); ``-s SERIAL`` picks one phone (it overrides
``$ANDROID_SERIAL``), and without it adb refuses when several are attached; ``push LOCAL... REMOTE`` copies
files to the phone, ``pull REMOTE LOCAL`` back; ``shell COMMAND`` runs it on the phone and, with the shell
protocol (adb 1.0.35, Android 7), returns its exit status (``-x`` would disable that). ``getprop ro.soc.model``
names the chip (what ``qnn-release socs --resolve`` takes). Every failure is an ``AdbFault`` with one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from ..util import cmd
from ..util.text import clip

if TYPE_CHECKING:
    from .numbers import Status


class AdbFault(Exception):
    def __init__(self, status: Status, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Adb:
    def __init__(self, serial: str | None = None, exe: str | None = None, log: Path | None = None):
        found = exe or os.environ.get("ADB") or shutil.which("adb")
        if not found:
            raise AdbFault("unavailable", "no adb: install Android platform-tools, or set ADB to its path")
        self.exe: str = found
        self.log = log
        self._pushed: int | None = None  # the HTP arch whose runtime via_adb pushed to the phone
        self.serial = serial or os.environ.get("ANDROID_SERIAL") or self._only_phone()

    def _run(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        argv = [self.exe, *(["-s", self.serial] if getattr(self, "serial", None) else []), *args]
        try:
            r = cmd.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AdbFault("timeout", f"adb {args[0]}: no answer within {timeout:.0f} s") from None
        except OSError as e:
            raise AdbFault("unavailable", f"adb {args[0]}: {type(e).__name__}: {e}") from None
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"$ {' '.join(argv)}\n{r.stdout}{r.stderr}[exit {r.returncode}]\n")
        return r

    def _only_phone(self) -> str:
        r = self._run("devices")
        rows = [ln.split("\t") for ln in r.stdout.splitlines()[1:] if "\t" in ln]
        ready = [s for s, state in rows if state.strip() == "device"]
        if len(ready) == 1:
            return ready[0]
        if not ready:
            others = ", ".join(f"{s} ({st.strip()})" for s, st in rows)
            raise AdbFault("unavailable", "no phone ready on adb" + (f": {others}" if others else "")
                           + " (connect one and accept its debugging prompt)")
        raise AdbFault("unavailable", f"{len(ready)} phones on adb ({', '.join(ready)}): pick one with --serial")

    def getprop(self, name: str) -> str:
        r = self._run("shell", "getprop", name)
        if r.returncode:
            raise AdbFault("unavailable", f"adb shell getprop {name} failed: {_last(r)}")
        return r.stdout.strip()

    def push(self, files: list[Path], remote_dir: str) -> None:
        self.shell(f"mkdir -p {remote_dir}")
        r = self._run("push", *map(str, files), remote_dir + "/")
        if r.returncode:
            raise AdbFault("unavailable", f"adb push to {remote_dir} failed: {_last(r)}")

    def pull(self, remote: str, local: Path) -> None:
        r = self._run("pull", remote, str(local))
        if r.returncode:
            raise AdbFault("failed", f"adb pull {remote} failed: {_last(r)}")

    def shell(self, command: str, timeout: float = 900) -> tuple[int, str]:
        r = self._run("shell", command, timeout=timeout)
        return r.returncode, r.stdout + r.stderr


def _last(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
    return clip(lines[-1], 300) if lines else f"exit {r.returncode}"
