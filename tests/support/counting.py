"""The CLI run as a user runs it, in a child process, counting what it starts: every ONNX Runtime session (a model
run on CPU or through the QNN EP) and every process, by whatever module starts them (#45: package and
device-numbers copy what the build kept and compute nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

COUNTING = """
import json, subprocess, sys
from pathlib import Path

import onnxruntime

seen = {"sessions": [], "subprocesses": []}
session_init, popen_init = onnxruntime.InferenceSession.__init__, subprocess.Popen.__init__


def counted_session(self, model, *a, **k):
    seen["sessions"].append(model if isinstance(model, str) else type(model).__name__)
    return session_init(self, model, *a, **k)


def counted_popen(self, argv, *a, **k):
    seen["subprocesses"].append([str(x) for x in ([argv] if isinstance(argv, (str, bytes)) else argv)[:3]])
    return popen_init(self, argv, *a, **k)


onnxruntime.InferenceSession.__init__, subprocess.Popen.__init__ = counted_session, counted_popen
from ci_tools.cli.app import main

code = 1
try:
    code = main(sys.argv[2:])
finally:
    Path(sys.argv[1]).write_text(json.dumps(seen))
sys.exit(code)
"""


def counted_cli(record: Path, *args: str, env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    """``qnn-release ARGS`` in a child process; (its result, what it started: ``sessions``, ``subprocesses``)."""
    r = subprocess.run([sys.executable, "-c", COUNTING, str(record), *args], capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=900)
    seen = json.loads(record.read_text()) if record.is_file() else {"sessions": None, "subprocesses": None}
    return r, seen


def tools(seen: dict) -> list[str]:
    """The programs it started, by name."""
    return [Path(argv[0]).name for argv in seen["subprocesses"]]
