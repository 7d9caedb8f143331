"""The scorer tier: read completed windows from the store's work queue, score them in
the shared micro-batch, write their risk records, acknowledge them, tell listeners.

    worker = ScoringWorker(slot, store, batcher, settings)
    worker.listeners.append(on_scored)   # async def on_scored(windows) -> None
    worker.start()

Delivery is at least once: items a scorer read and did not acknowledge (it died, or
hangs) are claimed by any scorer after ``SCJEPA_CLAIM_TIMEOUT_S``. The effect is exactly
once: a risk record is keyed by (stream, window number) and the first write wins
(:meth:`service.store.Store.put_scored`), and listeners hear of a window when its
record was written by that call, and again when the window was claimed (a scorer's
write may have failed after its records were written and before their
acknowledgement: the record exists, the listeners were never told), so a listener may
hear of a window twice and must ignore a (stream, epoch, window number) it has seen
(the alerter does). Runs in ``scjepa serve --role scorer`` and ``--role
all`` (the default); ``--role api`` has none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from service import metrics
from service.batcher import Batcher
from service.config import Settings
from service.infer_process import InferenceUnavailable
from service.inference import Model, Scores, WindowError
from service.manifest import now_utc
from service.schemas import ChannelShare, ModelRef, RiskRecord
from service.store import (
    Record,
    Store,
    StoreUnavailable,
    Window,
    WorkItem,
    fill_leading,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoredWindow:
    """One window whose risk record was just written (the first write of that window),
    or a claimed window scored again (reported again: listeners ignore a window they
    have seen).

    tenant, stream: whose window. window_n: the stream's reading count that completed
    it (its number, unique per stream). window_end: the timestamp of its last reading.
    risk: calibrated probability; threshold: the model's at the tenant's operating
    point (:meth:`service.inference.Model.manifest_for`); alert: risk >= threshold.
    top_channels: the largest contributors, largest first. model: what scored it.
    epoch: the stream's epoch (:attr:`service.store.WorkItem.epoch`): later when the
    stream started over, its window numbers beginning again. evaluated: what the
    model's evaluation measured at the operating point the tenant is served at
    (:func:`service.manifest.evaluated_note`; empty where it records nothing).
    """

    tenant: str
    stream: str
    window_n: int
    window_end: float
    risk: float
    threshold: float
    alert: bool
    top_channels: tuple[ChannelShare, ...]
    model: ModelRef
    epoch: int = 0
    evaluated: str = ""  # the test split's figures at the tenant's operating point


# Awaited with each batch's newly written windows and claimed ones (any tenants and
# streams, ascending (epoch, window_n) per stream), after the records are durably
# written; one that raises is
# logged and counted (scjepa_listener_errors_total) and scoring goes on.
Listener = Callable[[Sequence[ScoredWindow]], Awaitable[None]]


Scored = list[tuple[str, str, list[int]]]  # (tenant, stream, window numbers)


class _Wait:
    """One ingest call waiting (``?wait=``): its windows not yet known to be scored."""

    def __init__(self, tenant: str, due: dict[str, set[int]]) -> None:
        self.tenant = tenant
        self.streams = list(due)
        self.left = due  # stream -> window numbers; emptied as news comes
        self.done = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), timeout)


class ScoredBus:
    """Who in this process waits for which windows, woken by news of scored windows:
    from this process's scorer directly, and from any scorer through the store
    (:meth:`service.store.Store.listen_scored`; Redis pub/sub, at most once, so the
    waiters also re-read the store now and then)."""

    def __init__(self) -> None:
        self._waits: dict[tuple[str, str], list[_Wait]] = {}
        self.delivered = 0  # news delivered so far: unchanged, no window was reported

    def register(self, tenant: str, due: dict[str, set[int]]) -> _Wait:
        w = _Wait(tenant, due)
        for stream in due:
            self._waits.setdefault((tenant, stream), []).append(w)
        return w

    def unregister(self, w: _Wait) -> None:
        for stream in w.streams:
            waits = self._waits.get((w.tenant, stream))
            if waits and w in waits:
                waits.remove(w)
                if not waits:
                    del self._waits[w.tenant, stream]

    def deliver(self, scored: Scored) -> None:
        self.delivered += 1
        for tenant, stream, ns in scored:
            for w in self._waits.get((tenant, stream), ()):
                left = w.left.get(stream)
                if left is None:
                    continue
                left.difference_update(ns)
                if not left:
                    del w.left[stream]
                if not w.left:
                    w.done.set()


def records_of(
    model: Model,
    top_k: int,
    windows: list[Window],
    scores: Scores,
    tenants: list[str],
) -> list[RiskRecord]:
    """The risk records of a scored batch (row ``j`` of ``scores`` is ``windows[j]``,
    of ``tenants[j]``), named after the model that scored it, each at its tenant's
    threshold, and computed at one time. The batch's arrays are ordered and converted
    once, not per window: the scorer's loop is what bounds a scorer process when the
    model is fast."""
    by = scores.by or model
    m = by.manifest
    at = {t: by.manifest_for(t).threshold for t in set(tenants)}
    ref = ModelRef(name=m.name, version=m.version)
    now = now_utc()
    order = np.argsort(-scores.contrib, axis=1, kind="stable")[:, :top_k]
    shares = np.take_along_axis(scores.contrib, order, axis=1)
    novelty = (
        [None] * len(windows) if scores.novelty is None else scores.novelty.tolist()
    )
    return [
        RiskRecord(
            n=w.n,
            risk=risk,
            threshold=at[t],
            alert=risk >= at[t],
            window_start=w.start_ts,
            window_end=w.end_ts,
            top_channels=[
                ChannelShare(name=m.channels[i], share=round(share, 6))
                for i, share in zip(idx, row, strict=True)
                if share > 0
            ],
            codes=codes,
            novelty=nov,
            model=ref,
            computed_at=now,
        )
        for w, t, risk, idx, row, codes, nov in zip(
            windows,
            tenants,
            scores.risk.tolist(),
            order.tolist(),
            shares.tolist(),
            scores.codes.tolist(),
            novelty,
            strict=True,
        )
    ]


class ScoringWorker:
    def __init__(
        self,
        model: Callable[[], Model],
        store: Store,
        batcher: Batcher,
        settings: Settings,
        bus: ScoredBus | None = None,
    ) -> None:
        self.model = model  # the model in service now (a reload swaps it)
        self.store = store
        self.batcher = batcher
        self.settings = settings
        self.bus = bus  # this process's waiting ingest calls
        self.listeners: list[Listener] = []
        self.name = f"{socket.gethostname()}-{os.getpid()}"
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        self._stopping = False
        n = self.settings.scorer_concurrency
        self._tasks = [
            asyncio.create_task(self._read(f"{self.name}-{k}"), name=f"scorer-{k}")
            for k in range(n)
        ]
        self._tasks.append(asyncio.create_task(self._claim(), name="scorer-claim"))
        self._tasks.append(asyncio.create_task(self._gauges(), name="scorer-gauges"))

    async def stop(self) -> None:
        """Cancel the loops. redis-py may turn a cancellation in a socket read into an
        error the loop survives, so the loops also watch ``_stopping``."""
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for _ in range(3 if tasks else 0):
            for t in tasks:
                t.cancel()
            _, pending = await asyncio.wait(tasks, timeout=1.0)
            if not pending:
                break
            tasks = list(pending)

    @property
    def running(self) -> bool:
        tasks = self._tasks
        return bool(tasks) and all(not t.done() for t in tasks) and self.batcher.running

    async def _read(self, consumer: str) -> None:
        pause = 0.05
        with contextlib.suppress(StoreUnavailable):  # else: on the first NOGROUP
            await self.store.ensure_groups()
        while not self._stopping:
            try:
                items = await self.store.read_work(
                    consumer, self.settings.max_batch, block_s=0.5
                )
                if items:
                    await self.process(items)
                pause = 0.05
            except StoreUnavailable as e:  # Redis down: wait, the items stay pending
                log.warning("scorer: store unavailable: %s", e)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
            except InferenceUnavailable as e:  # the items stay pending: claimed later
                log.warning("scorer: windows left pending: %s", e)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def _claim(self) -> None:
        """Take over what a dead scorer left pending, every half timeout."""
        timeout = self.settings.claim_timeout_s
        while not self._stopping:
            await asyncio.sleep(max(timeout / 2, 0.05))
            try:
                while items := await self.store.claim_work(
                    f"{self.name}-claim", timeout, self.settings.max_batch
                ):
                    metrics.WINDOWS_CLAIMED.inc(len(items))
                    log.info("scorer: claimed %d windows left pending", len(items))
                    await self.process(items, claimed=True)
            except (StoreUnavailable, InferenceUnavailable) as e:
                log.warning("scorer: %s", e)

    async def _gauges(self) -> None:
        while not self._stopping:
            with contextlib.suppress(StoreUnavailable):
                metrics.set_queue(await self.store.queue_stats())
            await asyncio.sleep(1.0)

    async def process(self, items: list[WorkItem], *, claimed: bool = False) -> None:
        """Score ``items``, write their records, acknowledge them, tell listeners:
        of the windows whose record this call wrote, and with ``claimed`` (items
        delivered before, to a scorer that may have written their records and failed
        before acknowledging them) of every window scored.
        Raises StoreUnavailable or InferenceUnavailable (the inference process died
        holding them) with the items not written left pending (claimed later).

        A read may bring more than a batch (COUNT applies per partition): it goes to
        the micro-batcher in batches of ``max_batch``, all submitted at once, each
        written and acknowledged as soon as it is scored, so one batch's records are
        written while the next one runs (one large batch would run slower per window
        and leave the model idle during the writes)."""
        size = self.settings.max_batch
        if len(items) <= size:
            await self._process(items, claimed)
            return
        outcomes = await asyncio.gather(
            *(
                self._process(items[a : a + size], claimed)
                for a in range(0, len(items), size)
            ),
            return_exceptions=True,
        )
        for e in outcomes:  # every batch done or failed: the first failure
            if isinstance(e, BaseException):
                raise e

    async def _process(self, items: list[WorkItem], claimed: bool = False) -> None:
        start = time.perf_counter()
        model = self.model()
        shape = (model.window, model.n_channels)
        layout = self.store.layout  # the model's (a reload keeps it)
        # queued for another layout (a roll-out's old windows): not this model's to
        # score, even of its shape (its channels would be read as others)
        cut_for = await self._layouts(items, shape, layout)
        good = [
            it
            for it, lay in zip(items, cut_for, strict=True)
            if it.window.values.shape == shape and lay in ("", layout)
        ]
        if len(good) < len(items):
            metrics.WINDOWS_SHED.labels(reason="layout").inc(len(items) - len(good))
            log.warning(
                "scorer: %d windows of another layout than %s %s dropped",
                len(items) - len(good),
                layout,
                shape,
            )
        if good:
            x = np.stack([fill_leading(it.window.values) for it in good])
            try:
                scores = await self.batcher.score(x)
            except WindowError as e:  # validated on ingest: should not happen
                metrics.WINDOWS_SHED.labels(reason="invalid").inc(len(good))
                log.error("scorer: %d windows not scorable: %s", len(good), e)
                good = []
            else:  # records, acknowledgements and news: two round trips
                await self._write(model, good, scores, [it.id for it in items], claimed)
                good = items
        if not good:
            await self.store.ack_work([it.id for it in items])
        metrics.SCORER_BATCH.observe(time.perf_counter() - start)

    async def _layouts(
        self, items: list[WorkItem], shape: tuple[int, int], layout: str
    ) -> list[str]:
        """The layout each item was cut for ("": unknown, only its shape checked).
        A window queued by the release before items recorded it carries none: its
        stream's state says (one read, only for such windows of this model's shape),
        else a roll-out to a model of another layout of the same shape scored the
        old readings' channels as the new model's."""
        legacy = sorted(
            {
                (it.tenant, it.stream)
                for it in items
                if not it.layout and it.window.values.shape == shape
            }
        )
        if not legacy or not layout:
            return [it.layout for it in items]
        built = dict(zip(legacy, await self.store.layouts(legacy), strict=True))
        return [it.layout or built.get((it.tenant, it.stream)) or "" for it in items]

    async def _write(
        self,
        model: Model,
        items: list[WorkItem],
        scores: Scores,
        ack: list[str],
        claimed: bool = False,
    ) -> None:
        top_k = self.settings.top_channels
        # per stream and epoch: a stream that started over since some of its windows
        # were cut has their records refused (see Store.put_scored)
        by_stream: dict[tuple[str, str, int], list[RiskRecord]] = {}
        tenants = [it.tenant for it in items]
        recs = records_of(model, top_k, [it.window for it in items], scores, tenants)
        for it, rec in zip(items, recs, strict=True):
            by_stream.setdefault((it.tenant, it.stream, it.epoch), []).append(rec)
        keys = list(by_stream)
        written = await self.store.put_scored(
            [
                (
                    t,
                    s,
                    e,
                    [
                        Record(
                            r.n,
                            r.model_dump_json(),
                            r.risk,
                            r.novelty,
                            (r.window_start, r.window_end),
                            r.alert,
                        )
                        for r in by_stream[t, s, e]
                    ],
                )
                for t, s, e in keys
            ],
            ack=ack,
            publish=True,  # other processes' waiters (this one's: below)
        )
        for t, n in Counter(tenants).items():
            metrics.tenant_child(metrics.WINDOWS_SCORED, t).inc(n)
        served = scores.by or model
        # each risk as a float, as the records compare it with a threshold
        metrics.count_at_points(served.points, tenants, scores.risk.tolist())
        monitor = served.manifest.novelty
        if monitor is not None and scores.novelty is not None:
            # in float64, as the records hold them: the count matches the records
            novelty = scores.novelty.astype(float)
            at_level = (novelty >= monitor.level).tolist()
            unlike = Counter(t for t, u in zip(tenants, at_level, strict=True) if u)
            for t, n in unlike.items():
                metrics.tenant_child(metrics.WINDOWS_UNLIKE_TRAINING, t).inc(n)
            per = {
                t: metrics.tenant_child(metrics.TENANT_NOVELTY, t) for t in set(tenants)
            }
            for t, v in zip(tenants, novelty.tolist(), strict=True):
                metrics.WINDOW_NOVELTY.observe(v)  # mean and spread: a shifted bulk
                per[t].observe(v)
        if self.bus is not None:
            self.bus.deliver(
                [(t, s, [r.n for r in by_stream[t, s, e]]) for t, s, e in keys]
            )
        new = [
            ScoredWindow(
                t,
                s,
                r.n,
                r.window_end,
                r.risk,
                r.threshold,
                r.alert,
                tuple(r.top_channels),
                r.model,
                e,
                served.evaluated_for(t),
            )
            for (t, s, e), flags in zip(keys, written, strict=True)
            for r, ok in zip(by_stream[t, s, e], flags, strict=True)
            if ok or claimed  # claimed: written by a scorer that may not have told
        ]
        new.sort(key=lambda w: (w.tenant, w.stream, w.epoch, w.window_n))
        if new:
            await self._tell(new)

    async def _tell(self, windows: list[ScoredWindow]) -> None:
        for listener in list(self.listeners):
            try:
                await listener(windows)
            except Exception:
                name = getattr(listener, "__qualname__", repr(listener))
                metrics.LISTENER_ERRORS.labels(listener=name).inc()
                log.exception("scorer: listener %s failed", name)
