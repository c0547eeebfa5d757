"""One way to run another program: every subprocess of the package goes through ``run``.

It finds the executable (on PATH, or on the PATH of the environment given), logs the command when
``QNN_RELEASE_VERBOSE`` is set, applies the timeout, and turns a program that is not there or does not
finish into one line: ``ToolNotFound`` (also a FileNotFoundError) and ``ToolTimeout`` (also a
subprocess.TimeoutExpired), so a caller that handled those still does. The unit tests replace it with a
guard that fails the test (tests/unit/conftest.py): a unit test never builds or downloads by accident.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailable, QnnReleaseError


class ToolNotFound(BackendUnavailable, FileNotFoundError):
    """A program a command needs is not installed here."""


class ToolTimeout(QnnReleaseError, subprocess.TimeoutExpired):
    """A program did not finish within its time."""

    def __init__(self, cmd: Sequence[str], timeout: float, message: str, hint: str | None = None):
        subprocess.TimeoutExpired.__init__(self, list(cmd), timeout)
        self.message, self.hint, self.details, self.rejected = message, hint, None, []

    def __str__(self) -> str:
        return QnnReleaseError.__str__(self)


def which(program: str | os.PathLike, env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None
          ) -> str | None:
    """The executable ``program`` names: a path as it is (relative to ``cwd``, when it exists), else found on
    PATH."""
    program = str(program)
    if os.sep in program:
        return program if (Path(cwd or ".") / program).exists() else None
    return shutil.which(program, path=(env or os.environ).get("PATH"))


def run(argv: Sequence[str | os.PathLike], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
        hint: str | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, ...)`` with the executable resolved first; ``kwargs`` as subprocess.run takes them
    (``capture_output``, ``text``, ``cwd``, ``stdin``, ``stdout``...)."""
    args = [str(a) for a in argv]
    exe = which(args[0], env, kwargs.get("cwd"))
    if exe is None:
        raise ToolNotFound(f"{args[0]}: not found{' on PATH' if os.sep not in args[0] else ''}",
                           hint=hint or f"install {Path(args[0]).name}, or put it on PATH")
    if os.environ.get("QNN_RELEASE_VERBOSE"):
        print(f"$ {shlex.join(args)}", file=sys.stderr)
    try:
        return subprocess.run([exe, *args[1:]], timeout=timeout, env=None if env is None else dict(env), **kwargs)
    except subprocess.TimeoutExpired:
        raise ToolTimeout(args, timeout or 0, f"{Path(args[0]).name}: no answer within {timeout:g} s",
                          hint=hint) from None
