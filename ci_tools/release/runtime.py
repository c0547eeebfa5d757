"""Where an Android app gets the QNN runtime a context binary needs, per compile route.

The rule: a context binary loads only on a QNN runtime at least as new as the one that built it, with the
Stub, the Skel and ``libQnnHtp.so`` from one SDK build (Qualcomm's AI Hub maintainer, qualcomm/ai-hub-apps#148:
"your QAIRT version for running is at least as high as the model assets"; ONNX Runtime's QNN EP,
``qnn_cache_compatibility_manager.cc``: the binary's context blob and backend API versions must be <= the
runtime's; a Stub/Skel pair of another build fails with "Stub lib id mismatch", pytorch/executorch#8762).

- ``qairt`` route: the release's ``qnn-libs-<version>.tar.bz2`` (the SDK's ``lib/aarch64-android`` and the
  Skel of each HTP arch), the same build that compiled the binaries.
- ``ort`` route (``onnxruntime-qnn`` from PyPI): the binaries carry the QAIRT that wheel bundles
  (``onnxruntime_qnn/build_and_package_info.py``: 2.7.0 -> qnn_version 2.51.0), never the matrix's pin. On
  Android, Qualcomm publishes the same EP as ``com.qualcomm.qti:onnxruntime-android-qnn`` (since 2.3.0; the
  EP alone, onnxruntime/onnxruntime-qnn PR #196), used with ONNX Runtime's ``onnxruntime-android`` and
  ``com.qualcomm.qti:qnn-runtime`` (the QNN libraries with every Stub/Skel); the app sets
  ``ADSP_LIBRARY_PATH`` to its native library folder and declares ``libcdsprpc.so``
  (``java/src/test/android/README.md`` of onnxruntime-qnn). Microsoft's older
  ``com.microsoft.onnxruntime:onnxruntime-android-qnn`` 1.x bundles QNN 2.28-2.42 (1.20: 2.28.0, 1.22: 2.33.0,
  1.23: 2.37.1): too old for a binary of 2.51.
"""

from __future__ import annotations

import re

# onnxruntime-qnn (PyPI; the same numbers on Qualcomm's Maven package) -> (ONNX Runtime it was built with, QAIRT):
# its release notes, docs/release-notes.md of onnxruntime/onnxruntime-qnn and each GitHub release page
ORT_QNN = {
    "2.0.0": ("1.24.1", "2.42.0"), "2.1.0": ("1.24.4", "2.45.40"), "2.1.1": ("1.24.4", "2.45.41"),
    "2.2.0": ("1.24.4", "2.46.0"), "2.3.0": ("1.24.4", "2.47.0"), "2.4.0": ("1.26.0", "2.48.40"),
    "2.5.0": ("1.26.0", "2.49.40"), "2.6.0": ("1.27.0", "2.50.40"), "2.7.0": ("1.29.0", "2.51.0"),
}
FIRST_ANDROID = (2, 3, 0)  # the first onnxruntime-qnn with an Android package (com.qualcomm.qti)


def runtime_needed(qnn_version: str | None) -> str | None:
    """The oldest QNN runtime that loads a binary built with ``qnn_version``: its major.minor.patch (the rule
    ``tests/test_runtime_rule.py`` measures with two real SDKs: newer loads older, older refuses newer)."""
    from ..util.qnn_version import triple

    t = triple(qnn_version)
    return ".".join(map(str, t)) if t else None


def loads_on(needed: str | None, runtime: str) -> bool:
    """Whether a binary that needs ``needed`` loads on the app's ``runtime`` (major.minor.patch, or less)."""
    from ..util.qnn_version import numbers

    need, have = numbers(needed), numbers(runtime)
    return not need or need <= have + (0,) * (len(need) - len(have))


def runtime_advice(route: str, tool: str, qnn_version: str, htp_arch: str, libs: str | None) -> list[str]:
    """Markdown lines: the runtime an app ships with these binaries, for their route."""
    core = ".".join(re.findall(r"\d+", qnn_version)[:3])
    v = "V" + htp_arch[1:]  # v79 -> V79, v<arch> -> V<arch>
    rule = (f"A binary built with QNN {core} loads only on a QNN runtime **{core} or newer**, with `libQnnHtp.so`, "
            f"`libQnnHtp{v}Stub.so` and `libQnnHtp{v}Skel.so` from one SDK build.")
    if route == "qairt":
        where = (f"Ship the libraries of `{libs}` (a release asset: the SDK build that compiled them)." if libs else
                 f"Take them from QAIRT {core}: `lib/aarch64-android/` and `lib/hexagon-{htp_arch}/unsigned/`.")
        return [rule, where, "Set `ADSP_LIBRARY_PATH` to the folder that holds the Skel (an app: its native "
                "library folder) before the HTP backend opens."]
    m = re.search(r"onnxruntime-qnn (\d+\.\d+\.\d+)", tool)
    ep = m[1] if m else None
    ort_version = ORT_QNN.get(ep or "", (None, None))[0]
    lines = [rule, f"These were compiled by ONNX Runtime's QNN execution provider (`onnxruntime-qnn` {ep or '?'}, "
             f"QNN {core}), not by the QAIRT SDK the matrix pins: the QNN libraries must be {core} or newer."]
    if ep and tuple(int(x) for x in ep.split(".")) >= FIRST_ANDROID:
        lines.append(f"On Android: `com.qualcomm.qti:onnxruntime-android-qnn:{ep}` (the QNN EP) with "
                     f"`com.microsoft.onnxruntime:onnxruntime-android`{f' {ort_version}' if ort_version else ''} "
                     f"and `com.qualcomm.qti:qnn-runtime` {core} or newer (the QNN libraries, every Stub/Skel; its "
                     "Maven versions follow QAIRT's, and whether this one is published yet was not confirmed); set "
                     "`ADSP_LIBRARY_PATH` to the app's native library folder and declare `libcdsprpc.so` "
                     "(`<uses-native-library android:required=\"false\"/>`).")
    lines.append("Microsoft's `com.microsoft.onnxruntime:onnxruntime-android-qnn` 1.x bundles QNN 2.28-2.42: too old "
                 f"for a binary of {core}. Or ship `libQnnHtp.so`, `libQnnSystem.so` and the {htp_arch} Stub/Skel of "
                 f"QAIRT {core} beside ONNX Runtime built with the QNN EP.")
    return lines
