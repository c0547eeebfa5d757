"""The targets' compile + verify jobs, in worker processes (spawned: the QNN EP does not survive fork)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from ..compile.records import FAILED, TargetRecord
from ..compile.target_job import TargetSpec, run_target
from .progress import Progress


def run_all(specs: list[TargetSpec], jobs: int, progress: Progress) -> Iterator[TargetRecord]:
    """Each target's record as its job ends (in the order they end)."""
    if not specs:
        return
    if jobs <= 1:
        for s in specs:
            progress.running([s.target_id])
            yield run_target(s)
        return
    # spawn: the QNN EP and onnxruntime do not survive fork() with threads running
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(specs)), mp_context=ctx) as pool:
        pending: dict[Future, TargetSpec] = {pool.submit(run_target, s): s for s in specs}
        try:
            while pending:
                progress.running([s.target_id for s in list(pending.values())[:jobs]])
                done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for f in done:
                    s = pending.pop(f)
                    try:
                        yield f.result()
                    except Exception as e:  # a worker died (killed, out of memory)
                        yield TargetRecord.make(id=s.target_id, model=s.model, graph=s.graph, soc=s.soc.name,
                                                precision=s.precision, status=FAILED, exit_code=70,
                                                error=f"worker process failed: {type(e).__name__}: {e}".splitlines()[0])
        except KeyboardInterrupt:
            # stop the workers now (they are in our process group for Ctrl-C, not for a SIGTERM to us)
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
