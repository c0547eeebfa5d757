"""A fake QAIRT SDK tree, standing in for Qualcomm's proprietary SDK (which cannot be downloaded here).

It follows the documented contract of ``qairt/<version>/`` (REFERENCE.md section 3): the same
folder layout, library names, tool names and flags, and the same output files:

- ``qnn-onnx-converter`` -> ``<out>.cpp``, ``<out>.bin`` (a tar of weights), ``<out>_net.json``
- ``qnn-model-lib-generator`` -> ``model_libs/x86_64-linux-clang/lib<m>.so``, ``.../aarch64-android/lib<m>.so``
- ``qnn-context-binary-generator`` -> ``<output_dir>/<binary_file>.bin``
- ``qnn-context-binary-utility`` -> the JSON ``{"info": {"buildId", "graphs": [{"info": {"graphName",
  "graphInputs", "graphOutputs"}}]}}`` that onnxruntime's gen_qnn_ctx_onnx_model.py reads
- ``qnn-net-run`` -> ``<output_dir>/Result_<i>/<tensor>.raw``

Each tool checks its flags like the real one and fails with a message on stderr and a non-zero
exit code. What is fake: the binaries carry the ONNX graph instead of Hexagon code, and
``qnn-net-run`` stands in for the HTP simulator by running that graph with ONNX Runtime on CPU
and rounding the outputs to the precision compiled for.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

TOOLS = ("qnn-onnx-converter", "qnn-model-lib-generator", "qnn-context-binary-generator",
         "qnn-context-binary-utility", "qnn-net-run")
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
    (root / "bin" / "envsetup.sh").write_text(
        f'export QNN_SDK_ROOT="{root}"\nexport PATH="$QNN_SDK_ROOT/bin/x86_64-linux-clang:$PATH"\n')
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
