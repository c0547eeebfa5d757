"""The targets' compile + verify jobs, in worker processes (spawned: the QNN EP does not survive fork)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future

from ..compile.records import FAILED, TargetRecord
from ..compile.target_job import TargetSpec, run_target
from ..util.isolated import as_finished, stoppable, worker_pool
from .progress import Progress


def run_all(specs: list[TargetSpec], jobs: int, progress: Progress, isolate: bool = False
            ) -> Iterator[TargetRecord]:
    """Each target's record as its job ends (in the order they end); in worker processes unless one job runs
    in this process (``jobs`` 1 and not ``isolate``)."""
    if not specs:
        return
    if jobs <= 1 and not isolate:
        for s in specs:
            progress.running([s.target_id])
            yield run_target(s)
        return
    # spawned workers (the QNN EP and onnxruntime do not survive fork() with threads running), stopped at once on
    # an interrupt: their finally blocks remove half-written folders
    with worker_pool(min(jobs, len(specs))) as pool:
        pending: dict[Future, TargetSpec] = {pool.submit(stoppable, run_target, s): s for s in specs}

        def tick() -> None:
            progress.running([s.target_id for s in list(pending.values())[:jobs]])

        for s, f in as_finished(pending, tick):
            try:
                yield f.result()
            except Exception as e:  # a worker died (killed, out of memory)
                yield TargetRecord.make(id=s.target_id, model=s.model, graph=s.graph, soc=s.soc.name,
                                        precision=s.precision, status=FAILED, exit_code=70,
                                        error=f"worker process failed: {type(e).__name__}: {e}".splitlines()[0])
