"""Long native work in helper processes: it shows that it is alive, and it stops when asked.

A QNN compile runs in native code for minutes (a 3-layer, 768-unit LSTM: 23 minutes) and Python's signal
handlers only run between bytecodes of the main thread: in-process, SIGTERM (a CI cancel, ``timeout``) and
Ctrl-C waited for the compile to end. Here the native call runs in a spawned helper (the QNN EP does not
survive fork) while this process waits in 1 s slices: a signal is handled within a second, the helper is
killed, and the caller's ``finally`` blocks clean the partial state as they always did. Every ``heartbeat``
seconds a line says the work is alive, with the helper's CPU time and memory, so slow and hung differ.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import CompileError

HEARTBEAT_SECONDS = 30.0
GRACE_SECONDS = 5.0  # after SIGTERM, before SIGKILL

_helper: ProcessPoolExecutor | None = None


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, even by SIGKILL (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


@contextlib.contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Processes started in here are born ignoring SIGINT (an ignored signal stays ignored across exec, and
    Python then installs no KeyboardInterrupt handler): Ctrl-C reaches the whole process group, and a child
    still importing would die of it and look like a failed compile. The parent decides and stops them."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class _Pool(ProcessPoolExecutor):
    """Spawned processes (the QNN EP does not survive fork()) that ignore Ctrl-C from birth."""

    def __init__(self, workers: int, initializer: Callable[[], None]):
        super().__init__(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                         initializer=initializer)

    def submit(self, fn, /, *args, **kwargs):  # processes start on demand, in submit
        with _children_ignore_ctrl_c():
            return super().submit(fn, *args, **kwargs)


def _init_helper() -> None:
    _die_with_parent()


def _init_worker() -> None:
    """A worker runs Python between native calls: SIGTERM from the parent unwinds it as Ctrl-C would, so its
    ``finally`` blocks remove its half-written folders (Ctrl-C itself it ignores: the parent decides)."""
    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one ends it at once
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    _die_with_parent()


def usage(pid: int) -> str:
    """``12 s CPU, 0.4 GB`` for a live process (Linux /proc), else empty."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return ""
    return f"{cpu:.0f} s CPU, {rss / 1e9:.1f} GB"


def _pids(pool: ProcessPoolExecutor) -> list[int]:
    return list(getattr(pool, "_processes", None) or {})


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop every process of ``pool`` now: SIGTERM, then SIGKILL after a grace period; no task runs after."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        with contextlib.suppress(Exception):
            p.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)
    with contextlib.suppress(Exception):
        pool.shutdown(wait=False, cancel_futures=True)


def _discard_helper() -> None:
    global _helper
    if _helper is not None:
        stop_pool(_helper)
    _helper = None


def call(fn: Callable[..., Any], *args: Any, what: str, heartbeat: float = HEARTBEAT_SECONDS,
         say: Callable[[str], None] | None = None) -> Any:
    """``fn(*args)`` in the helper process (one per process, reused): its result, or what it raised.

    ``fn`` and its arguments must pickle. Interrupted (Ctrl-C, or SIGTERM where the CLI turns it into
    KeyboardInterrupt), the helper is killed and KeyboardInterrupt goes on to the caller at once.
    """
    global _helper
    if _helper is None:
        _helper = _Pool(1, _init_helper)
        # before multiprocessing's exit handler joins this process's children (a worker ending would wait for
        # its idle helper for ever): let the helper go first
        from multiprocessing.util import Finalize

        Finalize(None, _helper.shutdown, exitpriority=100)  # above its queues' own (10)
    say = say or _say
    future = _helper.submit(_as_here, os.getcwd(), dict(os.environ), fn, *args)
    start = time.monotonic()
    beat = start + heartbeat
    try:
        while not wait([future], timeout=min(1.0, heartbeat))[0]:
            now = time.monotonic()
            if now >= beat:
                alive = ", ".join(x for x in (usage(p) for p in _pids(_helper)) if x)
                say(f"{what}: still running after {now - start:.0f} s{f' ({alive})' if alive else ''}")
                beat = now + heartbeat
    except BaseException:  # interrupted while it runs: the helper goes with it
        _discard_helper()
        raise
    try:
        return future.result()
    except BrokenProcessPool:
        _discard_helper()
        raise CompileError(f"{what}: the helper process died (out of memory, killed, or it could not start)",
                           hint="see the kernel log (dmesg) for the OOM killer, fewer jobs (-j 1) need less memory; a "
                                "script calling qnn-release's Python API needs `if __name__ == '__main__':` (the "
                                "helper is spawned and imports the script)") from None


def _as_here(cwd: str, env: dict[str, str], fn: Callable[..., Any], *args: Any) -> Any:
    """In the helper: the caller's folder and environment now (the helper is reused: they may have changed)."""
    os.chdir(cwd)
    if env != os.environ:
        os.environ.clear()
        os.environ.update(env)
    return fn(*args)


def _say(text: str) -> None:
    sys.stderr.write(f"qnn-release: {text}\n")
    sys.stderr.flush()


@contextlib.contextmanager
def worker_pool(jobs: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of spawned workers that an interrupt stops at once: its processes are ended (their ``finally``
    blocks run), not waited for as ``with ProcessPoolExecutor()`` would."""
    pool = _Pool(jobs, _init_worker)
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def stoppable(fn: Callable[..., Any], *args: Any) -> Any:
    """Submit this to a ``worker_pool``: a worker stopped by its parent exits once its ``finally`` blocks have
    run, instead of reporting the interrupt and taking the next task."""
    try:
        return fn(*args)
    except KeyboardInterrupt:
        os._exit(130)


def as_finished(pending: dict[Future, Any], tick: Callable[[], None] | None = None) -> Iterator[tuple[Any, Future]]:
    """``(key, future)`` as each future ends; ``tick`` is called about once a second while waiting."""
    while pending:
        if tick is not None:
            tick()
        done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
        for f in done:
            yield pending.pop(f), f


def map_stoppable(fn: Callable[[Any], Any], items: list, jobs: int, isolate: bool = False) -> Iterator[tuple[Any, Any]]:
    """(item, fn(item)) in order: in this process when ``jobs`` is 1 and not ``isolate`` (the Python API, where
    tests patch what ``fn`` calls), else in spawned workers an interrupt stops within seconds (``fn`` must be a
    module-level function: it is pickled)."""
    if not items:
        return
    if jobs <= 1 and not isolate:
        for item in items:
            yield item, fn(item)
        return
    with worker_pool(max(1, min(jobs, len(items)))) as pool:
        yield from zip(items, pool.map(stoppable, itertools.repeat(fn), items))
