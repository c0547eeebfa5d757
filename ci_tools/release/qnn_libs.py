"""``qnn-libs-<version>.tar.bz2`` and ``qnn-include-<version>.tar.bz2`` from a QAIRT SDK tree.

The Android aarch64 runtime, and one Stub + Skel per HTP arch the release targets (a device needs
the pair of its own arch; the Skel runs on the DSP, found via ADSP_LIBRARY_PATH). Laid out as
their users unpack them (sherpa-onnx scripts/apk/build-apk-qnn-asr.sh.in): every library flat in
``qnn-libs-<v>/`` (``cp qnn-libs-<v>/*.so app/src/main/jniLibs/arm64-v8a/``), and the headers
as an SDK root, ``qnn-include-<v>/include/QNN/QnnInterface.h`` (``QNN_SDK_ROOT=$PWD/qnn-include-<v>``).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PackageError
from .archive import make_tar_bz2

RUNTIME = ("libQnnHtp.so", "libQnnSystem.so", "libQnnHtpPrepare.so")


def sdk_version(root: Path) -> str:
    return root.name.lstrip("v")


def lib_members(root: Path, archs: list[int]) -> list[tuple[str, Path]]:
    wanted = [Path("lib/aarch64-android") / n for n in RUNTIME]
    for a in sorted(set(archs)):
        wanted.append(Path("lib/aarch64-android") / f"libQnnHtpV{a}Stub.so")
        wanted.append(Path(f"lib/hexagon-v{a}/unsigned") / f"libQnnHtpV{a}Skel.so")
    missing = [str(p) for p in wanted if not (root / p).is_file()]
    if missing:
        raise PackageError(f"QAIRT SDK {root}: missing {', '.join(missing)}",
                           hint="is this a complete qairt/<version> tree for the release's HTP arches?")
    return [(str(p), root / p) for p in wanted]


def build_qnn_libs(root: Path, archs: list[int], dest_dir: Path) -> tuple[Path, Path]:
    version = sdk_version(root)
    top = f"qnn-libs-{version}"
    libs = make_tar_bz2(dest_dir / f"{top}.tar.bz2",
                        [(f"{top}/{Path(n).name}", p) for n, p in lib_members(root, archs)])
    inc_root = root / "include" / "QNN"
    headers = sorted(p for p in inc_root.rglob("*") if p.is_file()) if inc_root.is_dir() else []
    if not headers:
        raise PackageError(f"QAIRT SDK {root}: no headers under include/QNN")
    itop = f"qnn-include-{version}"
    inc = make_tar_bz2(dest_dir / f"{itop}.tar.bz2",
                       [(f"{itop}/{p.relative_to(root)}", p) for p in headers])
    return libs, inc
