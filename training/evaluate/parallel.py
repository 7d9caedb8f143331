"""Independent fits in worker processes: the cross-validation that chooses the served
model (:func:`training.evaluate.select.cross_fit`) is most of `scjepa evaluate`'s wall
time on large tables, and its fits (one per held-out block and seed, each seeded by
itself) share nothing but their inputs.

The workers are forked, so they read the parent's windows, features and models without
copying them, and each runs on **one thread**: a forked child that starts a second
OpenMP thread after its parent used OpenMP's pool hangs (seen here with torch and
scikit-learn, both built on GNU OpenMP). One thread per fit is also what makes the
results equal, to the bit, to the same fits run one after another on one thread
(tests/training/evaluate/test_parallel.py). On two quiet cores the workers are as fast
as two intra-op threads; beside another job the threads wait on each other and took
longer than one thread, the workers did not (`scjepa bench cv`;
docs/notebook/benchmarks.md, 2026-11-30).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

# the task of the pool being run: set before the workers fork, so they inherit it
# (a closure over the parent's arrays; nothing but an index crosses the pipe)
_TASK: Callable[[int], Any] | None = None


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def jobs_for(threads: int) -> int:
    """Worker processes for ``--threads N``: N (0: every usable core)."""
    return threads if threads > 0 else usable_cores()


def _one_thread() -> None:
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)


def _call(i: int) -> Any:
    assert _TASK is not None
    return _TASK(i)


def fork_map(task: Callable[[int], T], n: int, jobs: int) -> list[T]:
    """``[task(0), ..., task(n - 1)]``, in ``min(jobs, n)`` forked worker processes of
    one thread each; here, in order, when that is one process or fork is not available.
    A worker's exception is raised here; a worker killed (out of memory, say) raises
    ``BrokenProcessPool`` instead of leaving the call waiting."""
    global _TASK
    jobs = min(jobs, n)
    if jobs <= 1 or "fork" not in mp.get_all_start_methods():
        return [task(i) for i in range(n)]
    _TASK = task
    try:
        with ProcessPoolExecutor(
            jobs, mp_context=mp.get_context("fork"), initializer=_one_thread
        ) as pool:
            return list(pool.map(_call, range(n)))
    finally:
        _TASK = None
