"""The runtime rule the clients apply, measured with both real SDK lines the package registry holds (#41 item 2):
onnxruntime-qnn 2.6.0 (QNN 2.50.40) and 2.7.0 (QNN 2.51.0), each in its own venv, each compiling the same model,
each binary loaded by each runtime on the HTP emulator. The clients refuse exactly what this shows refused
(``release.runtime.loads_on``); a future SDK that changes it fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci_tools.release.runtime import loads_on, runtime_needed
from tests.conftest import sdk_line_python
from tests.support import models

PROBE = Path(__file__).parent / "scripts" / "qnn_runtime_probe.py"
OLDER = "2.6.0"  # onnxruntime-qnn: QNN 2.50.40; the venv's own is the matrix's pin (2.7.0: QNN 2.51.0)

pytestmark = pytest.mark.emulator


def _probe(python: Path, *args: str) -> str:
    r = subprocess.run([str(python), str(PROBE), *args], capture_output=True, text=True, timeout=600)
    return (r.stdout.strip().splitlines() or [r.stderr.strip()])[-1]


def test_a_binary_loads_on_its_own_runtime_and_newer_never_older(tmp_path):
    pytest.importorskip("onnxruntime_qnn")
    model = models.mlp(tmp_path / "m.onnx", dynamic_batch=False)
    pythons = {"older": sdk_line_python(OLDER), "pinned": Path(sys.executable)}
    built = {}
    for name, python in pythons.items():
        (tmp_path / name).mkdir()
        built[name] = _probe(python, "compile", str(model), str(tmp_path / name), "69", "79")  # SM8750
    assert built["older"] != built["pinned"], built  # two SDK lines, or this measures nothing
    seen, predicted = {}, {}
    for binary, qnn in built.items():
        for runtime, python in pythons.items():
            got = _probe(python, "load", str(tmp_path / binary / "main_ctx.onnx"))
            seen[(qnn, built[runtime])] = got == "loaded"
            predicted[(qnn, built[runtime])] = loads_on(runtime_needed(qnn), built[runtime])
            if got != "loaded":  # the runtime's own words for it: what an app meets without the client's check
                assert "QNN_CONTEXT_ERROR_INVALID_ARGUMENT" in got or "context" in got.lower(), got
    assert seen == predicted, f"measured {seen}, the clients' rule says {predicted}"
    assert not all(seen.values())  # the newer binary is refused by the older runtime
