"""Micro-batching: windows from many streams and requests go to onnxruntime together.

Callers ``await batcher.score(windows)``; one worker task takes every submission queued
(up to ``max_batch`` windows), runs the model once in a worker thread (the event loop
keeps serving) and hands each caller its slice of the result. While one batch runs the
next one fills, so batches grow with load and a lone request waits for nothing;
``max_wait_s > 0`` additionally holds a batch that long for more windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from service import metrics, sched
from service.inference import Scores

Job = tuple[np.ndarray, asyncio.Future[Scores]]


def inference_executor(nice: int = 0) -> ThreadPoolExecutor:
    """The one thread that runs onnxruntime, ``nice`` steps below the event loop's CPU
    priority (Linux: per thread; elsewhere ignored), on the kernel's default CPU slice.

    Niced, it yields the core whenever the event loop has work, so a GET /risk does not
    wait behind a batch, and it takes every cycle the loop leaves idle. The slice is set
    because a thread inherits its creator's, here the loop's short one (service.sched).
    Create the session from this thread (``run_in_executor``) so onnxruntime's own pool
    threads (intra-op > 1) inherit both.
    """

    def init() -> None:
        if nice and sys.platform == "linux":
            # relative: the thread starts at its creator's niceness (a niced parent
            # process included) and goes ``nice`` steps below it, 19 at most
            tid = threading.get_native_id()
            with contextlib.suppress(OSError):
                now = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, min(19, now + nice))
        sched.set_slice_us(0)

    return ThreadPoolExecutor(1, thread_name_prefix="scjepa-infer", initializer=init)


class Batcher:
    def __init__(
        self,
        score: Callable[[np.ndarray], Scores],
        *,
        max_batch: int,
        max_wait_s: float,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        self._score = score
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._executor = executor or inference_executor()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="scjepa-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=True)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def score(self, windows: np.ndarray) -> Scores:
        """Score (k, window, V) windows as part of the next micro-batch."""
        if not self.running:
            raise RuntimeError("batcher is not running")
        fut: asyncio.Future[Scores] = asyncio.get_running_loop().create_future()
        await self._queue.put((windows, fut))
        return await fut

    async def _collect(self) -> list[Job]:
        jobs = [await self._queue.get()]
        size = len(jobs[0][0])
        deadline = time.monotonic() + self.max_wait_s
        while size < self.max_batch:
            timeout = deadline - time.monotonic()
            try:
                job = (
                    self._queue.get_nowait()
                    if timeout <= 0
                    else await asyncio.wait_for(self._queue.get(), timeout)
                )
            except (TimeoutError, asyncio.QueueEmpty):
                break
            jobs.append(job)
            size += len(job[0])
        return jobs

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect()
            start = time.perf_counter()
            try:
                batch = np.concatenate([w for w, _ in jobs])
                out = await loop.run_in_executor(self._executor, self._score, batch)
            except Exception as e:  # hand the failure to every waiting caller
                for _, fut in jobs:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            metrics.INFERENCE_LATENCY.observe(time.perf_counter() - start)
            metrics.BATCH_SIZE.observe(len(batch))
            i = 0
            for w, fut in jobs:
                k = len(w)
                if not fut.done():
                    fut.set_result(out.rows(i, i + k))
                i += k
