"""Quiet output by default: what libraries print (the QNN banner, onnxsim's and the quantizer's chatter,
``WARNING:root`` lines) goes to a log file kept with the work; ``--verbose`` shows it as well."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path


@contextlib.contextmanager
def redirect_fds(target: int):
    """Point the process's stdout and stderr (C/C++ libraries write there too) at ``target`` for a while."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(target, 1)
    os.dup2(target, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


@contextlib.contextmanager
def captured(path: Path):
    """Native output and Python logging (the root logger's warnings) into ``path`` while the block runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    with open(path, "ab") as f, redirect_fds(f.fileno()):
        handler = logging.StreamHandler(sys.stderr)  # fd 2 is the file now
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        saved = root.handlers[:]
        root.handlers = [handler]
        try:
            yield
        finally:
            handler.flush()
            root.handlers = saved
    if os.environ.get("QNN_RELEASE_VERBOSE"):
        sys.stderr.write(path.read_text(errors="replace"))
