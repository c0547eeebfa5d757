"""HTP's special values, probed on the emulator: the table in ci_tools/compile/htp_quirks.py is what the hints and
prepare's rewrites rest on, so a QNN release that changes one of them must fail here, naming the probe."""

from __future__ import annotations

import pytest

from ci_tools.compile.htp_quirks import LAYER_PROBES, PROBES, run_layer_probe, run_probe, same

pytest.importorskip("onnxruntime_qnn")


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_htp_gives_what_the_table_says(probe):
    from ci_tools.compile import qnn_ep

    got = run_probe(probe, soc_model=69, htp_arch=79)  # SM8750
    assert same(got, probe.htp), (f"{probe.describe()}: QNN {qnn_ep.qnn_version()} gives {got!r} (seen on "
                                  f"{probe.seen_on}): update the table and what rests on it")


LIBFFI_CHILD = """
import sys
import numpy as np
from ci_tools.compile.htp_quirks import PROBES, run_probe
from ci_tools.sources.audio import read_audio
run_probe(PROBES[0], soc_model=69, htp_arch=79)  # libQnnHtp.so is now in this process
x, rate, channels = read_audio(sys.argv[1])  # through a child process: must not crash
assert rate == 16000 and channels == 1 and abs(float(x[100]) - float(np.sin(100 / 7) * 0.5)) < 1e-3, x[:4]
print("read", flush=True)
if sys.argv[2] == "in-process":
    import soundfile
    soundfile.read(sys.argv[1])
    print("in-process read survived", flush=True)
"""


def test_audio_is_read_after_the_qnn_library_is_loaded(tmp_path):
    """libQnnHtp.so carries its own libffi symbols; once it is loaded, cffi calls (soundfile's) bind to them and
    crash. audio.read_audio decodes FLAC in a child process; the in-process crash is kept as a recorded quirk,
    so a QNN release that fixes it is noticed."""
    import subprocess
    import sys

    from ci_tools.compile import qnn_ep

    flac = tmp_path / "speech.flac"  # written by a fresh process: this one may hold libQnnHtp.so already
    subprocess.run([sys.executable, "-c", "import sys, numpy as np, soundfile; soundfile.write(sys.argv[1], "
                    "(np.sin(np.arange(4000) / 7) * 0.5).astype('float32'), 16000)", str(flac)], check=True)
    r = subprocess.run([sys.executable, "-c", LIBFFI_CHILD, str(flac), "child"], capture_output=True, text=True)
    assert r.returncode == 0 and "read" in r.stdout, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-c", LIBFFI_CHILD, str(flac), "in-process"], capture_output=True, text=True)
    assert "read" in r.stdout and r.returncode != 0 and "survived" not in r.stdout, (
        f"QNN {qnn_ep.qnn_version()}: soundfile now works in a process that loaded libQnnHtp.so (seen crashing on "
        "2.51.0): ci_tools/sources/audio.py may read FLAC in-process again")


def test_the_probe_table_is_a_command():
    from tests.conftest import run_cli

    r = run_cli("probes")
    assert r.returncode == 0 and all(p.name in r.stdout for p in PROBES)
    assert "Pow(-0.0, 2.0): HTP -4.000000476837158, IEEE 0.0" in r.stdout and "[seen on QNN 2.51.0]" in r.stdout


@pytest.mark.parametrize("probe", LAYER_PROBES, ids=[p.name for p in LAYER_PROBES])
def test_a_layer_htp_computes_wrongly_and_its_declared_fix(probe):
    """The layer is still wrong on HTP (a QNN that fixes it is noticed) and the graph its declared fix writes
    agrees with CPU on the emulator."""
    from ci_tools.compile import qnn_ep

    wrong = run_layer_probe(probe, soc_model=69, htp_arch=79)
    fixed = run_layer_probe(probe, soc_model=69, htp_arch=79, fixed=True)
    assert wrong < 0.5, f"QNN {qnn_ep.qnn_version()} now computes {probe.name} right (cosine {wrong}): update the table"
    assert fixed > 0.9999, f"{probe.fix}: cosine {fixed} on HTP"
