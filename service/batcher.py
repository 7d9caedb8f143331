"""Micro-batching: windows from many streams and requests go to onnxruntime together.

Callers ``await batcher.score(windows)``; one worker task takes every submission queued
(up to ``max_batch`` windows), has the model score them once and hands each caller its
slice of the result. ``infer`` sends the batch to the model (service.reload.ModelSlot:
its inference thread or its child process, service/infer_process.py), so the event loop
keeps serving. While ``in_flight`` batches run the next one
fills, so batches grow with load and a lone request waits for nothing; ``max_wait_s >
0`` additionally holds a batch that long for more windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
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
        infer: Callable[[np.ndarray], Awaitable[Scores]],
        *,
        max_batch: int,
        max_wait_s: float,
        in_flight: int = 1,
    ) -> None:
        """``infer`` scores one batch (service.reload.ModelSlot.score: on the inference
        thread or in the child process), awaited ``in_flight`` batches at a time (> 1:
        the next batch is queued on the model while the last one's results are handed
        out)."""
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.in_flight = in_flight
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._infer = infer
        self._task: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="scjepa-batcher")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._batches) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

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
        free = asyncio.Semaphore(self.in_flight)
        while True:
            await free.acquire()
            try:
                jobs = await self._collect()
            except BaseException:
                free.release()
                raise
            task = asyncio.create_task(self._batch(jobs))
            self._batches.add(task)

            def done(t: asyncio.Task[None]) -> None:
                self._batches.discard(t)
                free.release()

            task.add_done_callback(done)

    async def _batch(self, jobs: list[Job]) -> None:
        try:
            batch = np.concatenate([w for w, _ in jobs])
            out = await self._infer(batch)
        except Exception as e:  # hand the failure to every waiting caller
            for _, fut in jobs:
                if not fut.done():
                    fut.set_exception(e)
            return
        except asyncio.CancelledError:
            for _, fut in jobs:
                fut.cancel()
            raise
        metrics.BATCH_SIZE.observe(len(batch))
        i = 0
        for w, fut in jobs:
            k = len(w)
            if not fut.done():
                fut.set_result(out.rows(i, i + k))
            i += k
