"""Thin layer over the ONNX Runtime QNN execution provider (PyPI ``onnxruntime-qnn``).

The EP is a plugin: it must be registered, then attached per session through its
device objects. The old ``providers=["QNNExecutionProvider"]`` silently runs on CPU.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailable, CompileError, PackageError
from ..util import isolated
from ..util.quiet import redirect_fds
from ..util.text import clip
from .ep_log import log_errors, qnn_error_hint, unsupported_from_log

EP_NAME = "QNNExecutionProvider"
COMPAT_KEY = f"ep_compatibility_info.{EP_NAME}"


def _severity() -> int:
    return 2 if os.environ.get("QNN_RELEASE_VERBOSE") else 4


@functools.lru_cache(maxsize=1)
def _ort():
    try:
        import onnxruntime as ort
        import onnxruntime_qnn
    except ImportError as e:
        raise BackendUnavailable(
            f"the ort route needs onnxruntime-qnn: {e}",
            hint="pip install 'qnn-release[ort]' (Python >= 3.11), or use --backend qairt") from None
    # The EP warns about Windows-only features on every session; errors we report ourselves.
    ort.set_default_logger_severity(_severity())
    with quiet_native():  # the QNN library's "# LIBNATIVE" banner
        ort.register_execution_provider_library(EP_NAME, onnxruntime_qnn.get_library_path())
        ort.get_ep_devices()
    return ort, onnxruntime_qnn


@contextlib.contextmanager
def quiet_native():
    if os.environ.get("QNN_RELEASE_VERBOSE"):
        yield
        return
    with open(os.devnull, "wb") as null, redirect_fds(null.fileno()):
        yield


def qnn_version() -> str:
    _, oq = _ort()
    return str(oq.build_and_package_info.qnn_version)


def ep_package_version() -> str:
    from importlib.metadata import version

    return version("onnxruntime-qnn")


def _devices():
    ort, _ = _ort()
    devs = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    if not devs:
        raise BackendUnavailable("onnxruntime-qnn is installed but offers no QNN device",
                                 hint="check that onnxruntime and onnxruntime-qnn versions match")
    return devs


def htp_options(soc_model: str | int | None, htp_arch: int | None, fp16: bool, extra: dict | None = None) -> dict:
    opts = {"backend_type": "htp"}
    if soc_model is not None:
        opts["soc_model"] = str(soc_model)
    if htp_arch is not None:
        opts["htp_arch"] = str(htp_arch)
    if fp16:
        opts["enable_htp_fp16_precision"] = "1"
    opts.update(extra or {})
    return opts


def session_options(*, allow_cpu_fallback: bool, options: dict, context_path: Path | None = None):
    ort, _ = _ort()
    so = ort.SessionOptions()
    so.log_severity_level = _severity()
    if context_path is not None:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", str(context_path))
    if not allow_cpu_fallback:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(_devices(), options)
    return so


@contextlib.contextmanager
def native_log(path: Path | None):
    """Send what onnxruntime and the QNN libraries print on stderr (their banner, the EP's warnings and
    errors) to ``path``: quiet output by default, the evidence kept in the target's log. The EP's
    own messages are asked for at warning level while this is on."""
    if path is None:
        yield
        return
    ort, _ = _ort()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f, redirect_fds(f.fileno()):
        ort.set_default_logger_severity(2)
        try:
            yield
        finally:
            ort.set_default_logger_severity(_severity())
    if os.environ.get("QNN_RELEASE_VERBOSE"):
        sys.stderr.write(path.read_text(errors="replace"))


@dataclass(frozen=True, kw_only=True)
class ContextFiles:
    """Where a compile writes its context: ``<out_dir>/<stem>_ctx.onnx`` (the stub) and the binary beside it."""

    out_dir: Path
    stem: str


def compile_context(model: Path, into: ContextFiles, options: dict, allow_cpu_fallback: bool = False,
                    log: Path | None = None, label: str | None = None) -> tuple[Path, Path]:
    """Compile ``model`` into ``<into.out_dir>/<into.stem>_ctx.onnx`` + ``<into.stem>_ctx_qnn.bin``.

    The EP refuses to write over an existing file, and a crash half-way must not leave a
    file that looks finished: compile into a fresh folder next to ``out_dir``, then move.
    With ``log``, the EP's messages go there and a failure names their cause: the nodes the EP
    calls unsupported (``CompileError.rejected``) or its first error line.
    """
    out_dir, stem = into.out_dir, into.stem
    _ort()  # BackendUnavailable here, in one line, not in the helper
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{stem}.", dir=out_dir))
    try:
        # in the helper process: minutes of native work that SIGTERM/Ctrl-C must be able to stop
        failure = isolated.call(_compile_here, str(model), options, str(scratch / f"{stem}_ctx.onnx"),
                                allow_cpu_fallback, str(log) if log is not None else None,
                                # the heartbeat names the target (model.graph.soc.precision), not graph.onnx
                                what=f"compiling {label or model.name} for soc_model "
                                     f"{options.get('soc_model', '?')}")
        if failure is not None:
            err = CompileError(failure)
            if log is not None and log.is_file():
                text = log.read_text(errors="replace")
                err.rejected = unsupported_from_log(text)
                causes = [x for x in log_errors(text) if "fallback to CPU EP has been explicitly disabled" not in x
                          and "Unsupported nodes" not in x and x not in err.message]
                if causes and not err.rejected:
                    err.message = f"{err.message.rstrip(':. ')}; QNN EP: {clip('; '.join(causes[:2]), 500)}"
            err.hint = err.hint or qnn_error_hint(err.message)
            raise err
        ctx, bins = scratch / f"{stem}_ctx.onnx", sorted(scratch.glob("*.bin"))
        if not ctx.exists() or not bins:
            raise CompileError(f"the QNN EP wrote no context binary for {model.name}")
        final_bin = out_dir / bins[0].name
        os.replace(bins[0], final_bin)
        os.replace(ctx, out_dir / ctx.name)
        return out_dir / ctx.name, final_bin
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _compile_here(model: str, options: dict, context_path: str, allow_cpu_fallback: bool,
                  log: str | None) -> str | None:
    """The compile itself (run in the helper process): None, or the first line of what onnxruntime raised."""
    ort, _ = _ort()
    so = session_options(allow_cpu_fallback=allow_cpu_fallback, options=options, context_path=Path(context_path))
    if log is not None:
        so.log_severity_level = 2
    try:
        with native_log(Path(log) if log is not None else None):
            ort.InferenceSession(model, sess_options=so)
    except Exception as e:  # onnxruntime raises its own untyped errors
        return _first_line(e)
    return None


def compile_and_run(model: Path, folder: Path, options: dict, feed: dict) -> dict:
    """``model`` compiled for the chip in ``options`` into ``folder`` and run once on the HTP emulator: its outputs by
    the stub's names (the probes, bisect; the logs stay in ``folder``)."""
    ort, _ = _ort()
    ctx, _ = compile_context(model, ContextFiles(out_dir=folder, stem="probe"), options, log=folder / "compile.log")
    so = session_options(allow_cpu_fallback=False, options=options)
    with native_log(folder / "emulator.log"):
        sess = ort.InferenceSession(str(ctx), sess_options=so)
        names = [o.name for o in sess.get_outputs()]
        got = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs() if i.name in feed})
    return dict(zip(names, got))


def cpu_nodes_when_falling_back(model: Path, options: dict) -> list[tuple[str, str]]:
    """Compile once more with CPU fallback allowed: every non-EPContext node stayed on CPU.

    With fallback disabled the EP only says "nodes are assigned to the CPU EP", without names.
    """
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        try:
            ctx, _ = compile_context(model, ContextFiles(out_dir=Path(tmp), stem="probe"), options,
                                     allow_cpu_fallback=True, log=Path(tmp) / "probe.log")
        except CompileError:
            return []
        graph = onnx.load(str(ctx), load_external_data=False).graph
        return [(n.op_type, n.name or "(unnamed)") for n in graph.node if n.op_type != "EPContext"]


@dataclass(frozen=True)
class CompatInfo:
    """What a context stub says it was compiled for (``ep_compatibility_info``)."""

    raw: str
    qnn_version: str
    htp_arch: int
    soc_model: int
    sdk_version: str | None  # ep_sdk_version of the EPContext node, with build id


def proves_chip(htp_arch: int, soc_model: int, soc) -> bool:
    """Whether what a stub says it was compiled for is ``soc``. onnxruntime-qnn 2.6.0 (QNN 2.50.40) records the arch
    as 0 for some chips (measured for SM8750: v2:6:2.50.40:5.50.0:0:69:0:0, where 2.7.0 writes
    v2:6:2.51.0:5.51.0:79:69:8:0): the chip is then proved by its soc_model alone."""
    return soc_model == soc.soc_model and htp_arch in (soc.htp_arch, 0)


def read_compat(ctx_onnx: Path) -> CompatInfo:
    import onnx

    m = onnx.load(str(ctx_onnx), load_external_data=False)
    meta = {p.key: p.value for p in m.metadata_props}
    raw = meta.get(COMPAT_KEY)
    if raw is None:
        raise CompileError(f"{ctx_onnx}: no {COMPAT_KEY} metadata: not a QNN EPContext model")
    # v2:6:<qnn>:<api>:<htp_arch>:<soc_model>:...
    parts = raw.split(":")
    try:
        qnn, arch, soc = parts[2], int(parts[4]), int(parts[5])
    except (IndexError, ValueError):
        raise CompileError(f"{ctx_onnx}: cannot parse {COMPAT_KEY}={raw!r}") from None
    sdk = None
    for node in m.graph.node:
        if node.op_type == "EPContext":
            for a in node.attribute:
                if a.name == "ep_sdk_version":
                    sdk = a.s.decode()
    return CompatInfo(raw=raw, qnn_version=qnn, htp_arch=arch, soc_model=soc, sdk_version=sdk)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        if line.strip():
            return clip(line, 500)
    return type(e).__name__


def stub_io_names(ctx: Path, prep) -> dict[str, str]:
    """ONNX name -> the stub's name for every graph input and output (the same unless the stub says)."""
    import onnx

    props = {p.key: p.value for p in onnx.load(str(ctx), load_external_data=False).metadata_props}
    names = json.loads(props.get("qnn_release.io_names", "{}"))
    return {t.name: names.get(t.name, t.name) for t in [*prep.inputs, *prep.outputs]}


def compiled_for(ctx: Path) -> dict:
    """What a stub says its binary was compiled for: route, SDK version, HTP arch, soc_model."""
    import onnx

    m = onnx.load(str(ctx), load_external_data=False)
    props = {p.key: p.value for p in m.metadata_props}
    sdk = next((a.s.decode() for n in m.graph.node if n.op_type == "EPContext"
                for a in n.attribute if a.name == "ep_sdk_version"), "")
    if COMPAT_KEY in props:
        info = read_compat(ctx)
        return {"route": "ort", "sdk": (info.sdk_version or info.qnn_version).lstrip("v"),
                "htp_arch": info.htp_arch, "soc_model": info.soc_model}
    if "qnn_release.route" in props:
        return {"route": props["qnn_release.route"], "sdk": sdk.lstrip("v"),
                "htp_arch": int(props["qnn_release.htp_arch"]), "soc_model": int(props["qnn_release.soc_model"])}
    raise PackageError(f"{ctx}: not an EPContext stub written by qnn-release")
