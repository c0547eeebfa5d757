"""``qnn-release device-numbers --via adb``: every target of the phone's chip run on a phone on adb.

What runs is what a QAIRT user runs on a phone (Qualcomm's flow, e.g. LiteRT's ``LITERT_QNN_NATIVE_RUN.md``):
the SDK's ``bin/aarch64-android/qnn-net-run`` with ``libQnnHtp.so``, ``libQnnSystem.so`` and the Stub of the
chip's HTP arch (``LD_LIBRARY_PATH``) and its Skel (``ADSP_LIBRARY_PATH``, semicolon-separated, the system's
DSP folders kept), the same files a release's ``qnn-libs`` holds, from the QAIRT tree given by
``--qnn-sdk`` (``QNN_SDK_ROOT``), which must be at least the version that built the binary. Inputs are
written as the binary takes them (``--use_native_input_files``, its dtype and layout, read from it by the
host's ``qnn-context-binary-utility``), outputs come back float32 in ``out/Result_<i>/<tensor>.raw``.
``--profiling_level basic`` writes ``qnn-profiling-data_0.log``, which the host's ``qnn-profile-viewer``
prints as "Init Stats" and "Execute Stats (Average|Min|Max)" blocks of ``NetRun: <n> us`` lines (the form
third-party parsers of it read, e.g. the QNN tutorials' profile output): the first load and the mean, min
and max inference time. The chip comes from ``ro.soc.model``: a binary for another chip is refused.
There is no CPU baseline on this route (no ONNX Runtime on the phone).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from ..catalog.socs import Soc
from ..compile.backends.qairt import BIN, QairtBackend, tensor_io
from ..compile.records import TargetRecord
from ..errors import QnnReleaseError
from ..matrix.schema import LoadedMatrix
from ..util import cmd
from ..util.text import clip
from .adb import Adb, AdbFault
from .common import Build, Settings, judge, log_path, major_minor, now, prepared_for, status_of
from .inputs import device_inputs
from .numbers import Device, DeviceRun, Latency, Status

REMOTE = "/data/local/tmp/qnn-release"
SYSTEM_DSP = "/vendor/lib/rfsa/adsp;/vendor/dsp/cdsp;/system/lib/rfsa/adsp;/dsp"  # where the phone's own DSP libs live


def measure(build: Build, records: list[TargetRecord], settings: Settings, env: Mapping[str, str],
            runs: dict[str, DeviceRun]) -> tuple[str | None, list[str]]:
    """Every target (``records``, of ``build``) of the phone's chip, into ``runs``: (a note for the whole run, the
    runtime used)."""
    try:
        adb = Adb(settings.serial, log=log_path(build.out))
        prop, chip = _chip(adb, build.loaded)
        product = adb.getprop("ro.product.model") or "phone"
        backend = _sdk(settings, env)
    except (AdbFault, QnnReleaseError) as f:
        reason = f.reason if isinstance(f, AdbFault) else str(f)
        for r in records:
            runs[r.id] = DeviceRun(via="adb", status="unavailable", reason=reason)
        return f"no device numbers: {reason}", []
    device = Device(name=f"{product} (adb {adb.serial})", chipset=prop or None,
                    hexagon=chip.arch if chip else None, soc_model=chip.soc_model if chip else None)
    version = backend.sdk_version()
    phone = _Phone(adb=adb, backend=backend, chip=chip, device=device)
    for r in records:
        runs[r.id] = _target(build, r, phone, settings)
    try:
        adb.shell(f"rm -rf {REMOTE}")
    except AdbFault:
        pass  # the numbers stand; the phone keeps a folder in /data/local/tmp
    return None, [f"{version} ({backend.root})"]


def _chip(adb: Adb, loaded: LoadedMatrix) -> tuple[str, Soc | None]:
    """The phone's chip: ``ro.soc.model`` (Android 12+), else the kernel's ``/sys/devices/soc0/soc_id`` as the
    catalog knows it (``soc_id:<n>``); None when the catalog knows neither."""
    prop = adb.getprop("ro.soc.model")
    spellings = [prop] if prop else []
    if not prop:
        rc, text = adb.shell("cat /sys/devices/soc0/soc_id")
        if rc == 0 and text.strip().isdigit():
            prop = f"soc_id:{text.strip()}"
            spellings.append(prop)
    for s in spellings:
        try:
            return prop, loaded.catalog.target(loaded.catalog.resolve(s))
        except QnnReleaseError:
            continue
    return prop, None


def _sdk(settings: Settings, env: Mapping[str, str]) -> QairtBackend:
    root = settings.qnn_sdk or env.get("QNN_SDK_ROOT")
    if not root:
        raise QnnReleaseError("the adb route needs a QAIRT SDK tree for qnn-net-run and the runtime libraries: "
                              "--qnn-sdk or QNN_SDK_ROOT")
    backend = QairtBackend(Path(root))
    if not (backend.root / "bin" / "aarch64-android" / "qnn-net-run").is_file():
        raise QnnReleaseError(f"{backend.root}: no bin/aarch64-android/qnn-net-run (is it a QAIRT tree?)")
    return backend


@dataclass(frozen=True, kw_only=True)
class _Phone:
    """The phone of this run: its adb, the QAIRT tree whose runtime goes to it, its chip (None: unknown)."""

    adb: Adb
    backend: QairtBackend
    chip: Soc | None
    device: Device


def _target(build: Build, r: TargetRecord, phone: _Phone, settings: Settings) -> DeviceRun:
    adb, backend, chip, device = phone.adb, phone.backend, phone.chip, phone.device

    def said(status: Status, reason: str) -> DeviceRun:
        return DeviceRun(via="adb", status=status, reason=reason, device=device)

    if chip is None or chip.name != r.soc:
        seen = chip.name if chip else "not a chip in matrix/socs.yaml"
        return said("skipped", f"refused: the phone on adb ({adb.serial}) reports ro.soc.model {device.chipset!r} "
                    f"({seen}); this binary is for {r.soc}")
    version = backend.sdk_version()
    if (major_minor(version) or (0, 0)) < (major_minor(r.sdk_version) or (0, 0)):
        return said("skipped", f"QAIRT {version} at {backend.root} is older than QNN {r.sdk_version}, which built "
                    "the binary (a runtime older than the build cannot load it)")
    try:
        return _run(build, r, phone, chip, settings)
    except AdbFault as f:
        return said(f.status, f.reason)
    except QnnReleaseError as e:
        return said("failed", str(e))


def _run(build: Build, r: TargetRecord, phone: _Phone, chip: Soc, settings: Settings) -> DeviceRun:
    """One target of ``build`` on the phone (``chip``: the phone's, the target's own)."""
    adb, backend, device = phone.adb, phone.backend, phone.device
    out, loaded, report = build.out, build.loaded, build.report
    prep = prepared_for(report, r)
    inp = device_inputs(report, loaded.matrix.model(r.model), prep, max_entries=settings.max_entries)
    binary = out / r.id / cast("list[str]", r.binaries)[0]  # a built target's
    lib = f"{REMOTE}/lib"
    _push_runtime(adb, backend.root, chip.htp_arch, lib)
    remote = f"{REMOTE}/{r.id}"
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        info = backend.binary_info(binary, tmp_path)
        ins, outs = tensor_io(info, prep, out / r.id / "logs" / f"{prep.graph}_net.json", r.id)
        files, lines = [], []
        for i, feed in enumerate(inp.feeds):
            for t in ins:
                files.append(tmp_path / f"in{i}_{t.qnn}.raw")
                t.to_binary(feed[t.onnx]).tofile(files[-1])
            # relative to the folder qnn-net-run runs in (the `cd` below), as the SDK tutorials' input lists are
            lines.append(" ".join(f"{t.qnn}:=in{i}_{t.qnn}.raw" for t in ins))
        (tmp_path / "input_list.txt").write_text("\n".join(lines) + "\n")
        adb.push([binary, *files, tmp_path / "input_list.txt"], remote)
        rc, text = adb.shell(
            f"cd {remote} && LD_LIBRARY_PATH={lib} ADSP_LIBRARY_PATH=\"{lib};{SYSTEM_DSP}\" {lib}/qnn-net-run "
            f"--backend libQnnHtp.so --retrieve_context {remote}/{binary.name} --input_list {remote}/input_list.txt "
            f"--use_native_input_files --output_dir {remote}/out --profiling_level basic",
            timeout=settings.budget_seconds)
        if rc:
            last = [ln for ln in text.splitlines() if ln.strip()][-1:] or [f"exit {rc}"]
            raise AdbFault("failed", f"qnn-net-run on the phone failed (exit {rc}): {clip(last[0], 300)}")
        adb.pull(f"{remote}/out", tmp_path / "out")
        outputs = _outputs(tmp_path / "out", outs, len(inp.feeds), r.id)
        init_ms, lat = _profile(backend.root, tmp_path / "out" / "qnn-profiling-data_0.log", len(inp.feeds))
    par = judge(loaded, r, inp, {}, outputs)
    status, reason = status_of(par)
    return DeviceRun(via="adb", status=status, reason=reason, device=device, qairt_runtime=backend.sdk_version(),
                     latency=lat, first_load_ms=init_ms, parity=par if not isinstance(par, str) else None,
                     measured=now())


def _push_runtime(adb: Adb, root: Path, arch: int, lib: str) -> None:
    """qnn-net-run and the runtime of one HTP arch, once per run (the files of a release's qnn-libs)."""
    if getattr(adb, "_pushed", None) == arch:
        return
    files = [root / "bin" / "aarch64-android" / "qnn-net-run",
             *(root / "lib" / "aarch64-android" / n for n in ("libQnnHtp.so", "libQnnSystem.so",
                                                              f"libQnnHtpV{arch}Stub.so")),
             root / "lib" / f"hexagon-v{arch}" / "unsigned" / f"libQnnHtpV{arch}Skel.so"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise AdbFault("unavailable", f"the QAIRT tree has no {', '.join(missing)}")
    adb.push(files, lib)
    rc, text = adb.shell(f"chmod 755 {lib}/qnn-net-run")
    if rc:
        raise AdbFault("unavailable", f"chmod on the phone failed: {clip(text, 200)}")
    adb._pushed = arch


def _outputs(folder: Path, outs, entries: int, target: str) -> dict[str, list[np.ndarray]]:
    got: dict[str, list[np.ndarray]] = {t.onnx: [] for t in outs}
    for i in range(entries):
        for t in outs:
            f = folder / f"Result_{i}" / f"{t.qnn}.raw"
            if not f.is_file():
                raise QnnReleaseError(f"{target}: qnn-net-run on the phone wrote no {f.name} for input {i}")
            got[t.onnx].append(t.from_binary_float(np.fromfile(f, dtype=np.float32)))
    return got


def _profile(root: Path, log: Path, runs: int) -> tuple[float | None, Latency | None]:
    """(first load ms, inference latency) from qnn-profile-viewer's text."""
    viewer = root / BIN / "qnn-profile-viewer"
    if not log.is_file() or not viewer.is_file():
        return None, None
    try:
        text = cmd.run([str(viewer), "--input_log", str(log)], capture_output=True, text=True,
                              timeout=300).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None, None  # the outputs and their parity stand without timings

    def netrun(section: str) -> float | None:
        m = re.search(re.escape(section) + r"(.*?)(?=\n\S[^\n]*Stats|\Z)", text, re.DOTALL)
        n = re.search(r"NetRun:\s+(\d+)\s*us", m[1]) if m else None
        return round(int(n[1]) / 1000.0, 3) if n else None

    init, mean, low, high = (netrun(s) for s in ("Init Stats:", "Execute Stats (Average):", "Execute Stats (Min):",
                                                 "Execute Stats (Max):"))
    if mean is None:
        return init, None
    return init, Latency(median_ms=mean, min_ms=low or mean, max_ms=high or mean, runs=runs, statistic="mean")
