"""A fake QAIRT SDK tree, standing in for Qualcomm's proprietary SDK (which cannot be downloaded here).

It follows the contract of ``qairt/<version>/`` as Qualcomm's own code and docs show it (each rule
in ``tools.py`` cites its source: the QAIRT 2.25 SDK's converter Python and docs, Qualcomm's
qairt-dev wheel, sherpa-onnx's workflows, onnxruntime-qnn's EPContext generator):

- ``qnn-onnx-converter`` (needs ``$QNN_SDK_ROOT/lib/python`` on PYTHONPATH) -> ``<out>.cpp``,
  ``<out>_net.json`` and, when the graph has weights, ``<out>.bin``; the graph is named after the
  sanitised output stem; 4-D/3-D I/O become channel-last unless ``--preserve_io layout``; float I/O
  becomes FLOAT_16 with ``--float_bitwidth 16`` and UFIXED_POINT_8/16 when quantized, unless
  ``--preserve_io datatype``
- ``qnn-model-lib-generator`` -> ``<o>/<target>/lib<name>.so`` (aarch64-android needs ``ndk-build``)
- ``qnn-context-binary-generator`` -> ``<output_dir>/<binary_file>.bin``; the device config's
  ``soc_model`` and ``dsp_arch``, graph options only for the graph named as the converter named it
- ``qnn-context-binary-utility`` -> ``{"info": {"buildId", "socModel", "contextMetadata": {"info":
  {"dspArch"}}, "graphs": [{"info": {"graphName", "graphInputs", "graphOutputs"}}]}}``
- ``qnn-net-run`` -> ``<output_dir>/Result_<i>/<sanitised tensor>.raw`` (float32), inputs in the
  binary's dtype and layout; ``bin/aarch64-android/qnn-net-run`` on a phone (the fake adb runs it) opens
  ``--backend libQnnHtp.so``, the Stub and the Skel by ``LD_LIBRARY_PATH`` / ``ADSP_LIBRARY_PATH``, all of one
  build at least the binary's; ``--profiling_level`` writes ``qnn-profiling-data_0.log``
- ``qnn-profile-viewer --input_log`` -> the "Init Stats" / "Execute Stats (Average|Min|Max)" text

Each tool fails like the real one with a message on stderr and a non-zero exit code. What is fake:
the binaries carry the ONNX graph instead of Hexagon code, and ``qnn-net-run`` stands in for the
HTP simulator by running that graph with ONNX Runtime on CPU, rounded to the precision compiled for.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

TOOLS = ("qnn-onnx-converter", "qnn-model-lib-generator", "qnn-context-binary-generator",
         "qnn-context-binary-utility", "qnn-net-run", "qnn-profile-viewer")
ARCHS = (68, 69, 73, 75, 79, 81)


def make_fake_sdk(parent: Path, version: str = "2.40.0.251030", *, omit: tuple[str, ...] = ()) -> Path:
    """Create ``<parent>/qairt/<version>`` and return it (the QNN_SDK_ROOT). ``omit``: library paths to leave out."""
    root = parent / "qairt" / version
    tools = Path(__file__).with_name("tools.py").read_text()
    bindir = root / "bin" / "x86_64-linux-clang"
    bindir.mkdir(parents=True, exist_ok=True)
    for name in TOOLS:
        p = bindir / name
        p.write_text(f"#!{sys.executable}\n" + tools)
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    # the phone's qnn-net-run (bin/aarch64-android, pushed to the phone by the adb route); the fake adb runs it here
    phone = root / "bin" / "aarch64-android" / "qnn-net-run"
    phone.parent.mkdir(parents=True, exist_ok=True)
    phone.write_text(f"#!{sys.executable}\n" + tools)
    phone.chmod(phone.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    # what the real bin/envsetup.sh exports (QAIRT 2.25 bin/envsetup.sh:23-51)
    (root / "bin" / "envsetup.sh").write_text(
        'AISW_SDK_ROOT="$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/..")"\n'
        'export PYTHONPATH="${AISW_SDK_ROOT}/lib/python/${PYTHONPATH:+:$PYTHONPATH}"\n'
        'export PATH="${AISW_SDK_ROOT}/bin/x86_64-linux-clang:$PATH"\n'
        'export LD_LIBRARY_PATH="${AISW_SDK_ROOT}/lib/x86_64-linux-clang${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n'
        'export QNN_SDK_ROOT="${AISW_SDK_ROOT}"\n')
    # the converters' Python package (qti.aisw.converters), imported from $QNN_SDK_ROOT/lib/python
    pkg = root / "lib" / "python" / "qti" / "aisw" / "converters"
    pkg.mkdir(parents=True, exist_ok=True)
    for d in (pkg.parent.parent, pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    libs = ["lib/x86_64-linux-clang/libQnnHtp.so", "lib/x86_64-linux-clang/libQnnHtpNetRunExtensions.so",
            "lib/x86_64-linux-clang/libQnnSystem.so", "lib/x86_64-linux-clang/libQnnHtpPrepare.so",
            "lib/aarch64-android/libQnnHtp.so", "lib/aarch64-android/libQnnSystem.so",
            "lib/aarch64-android/libQnnHtpPrepare.so"]
    for a in ARCHS:
        libs += [f"lib/aarch64-android/libQnnHtpV{a}Stub.so", f"lib/hexagon-v{a}/unsigned/libQnnHtpV{a}Skel.so"]
    for rel in libs:
        if rel in omit:
            continue
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        # ELF magic + the path, so every library is a distinct, recognisable file
        p.write_bytes(b"\x7fELF" + f"\0fake QAIRT {version} {rel}\0".encode() + os.urandom(0) + b"\0" * 256)
    inc = root / "include" / "QNN"
    inc.mkdir(parents=True, exist_ok=True)
    for h in ("QnnInterface.h", "QnnContext.h", "QnnGraph.h", "QnnTypes.h", "HTP/QnnHtpDevice.h"):
        (inc / h).parent.mkdir(parents=True, exist_ok=True)
        (inc / h).write_text(f"/* fake QAIRT {version} header {h} */\n#pragma once\n")
    (root / "QNN_README.txt").write_text(f"Fake QAIRT SDK {version} for tests\n")
    return root
