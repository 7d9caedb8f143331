"""In-process store: the embedded default when no Redis URL is configured (one process).

Each method runs without awaiting, so on one event loop it is atomic like the Redis
script. Rows are kept as numpy arrays, filled by :func:`service.store.forward_fill`.
Streams are keyed by (tenant, stream); idle ones are dropped oldest first as calls come
(the touch order is kept, so that costs nothing per live stream), and each tenant's
names are kept sorted for paged listing. The work queue is a deque plus a table of
delivered, unacknowledged items: the same contract as the Redis consumer group.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from service.store import (
    ALERT_LOG_LEN,
    INCIDENTS_KEPT,
    AlertLog,
    AppendResult,
    IncidentRow,
    LayoutChanged,
    QueueStats,
    Ranked,
    Record,
    Store,
    StreamState,
    Summary,
    Window,
    WorkItem,
    completed_ends,
    forward_fill,
    gcra,
    recent_novelty,
)

Key = tuple[str, str]  # (tenant, stream)


@dataclass
class _Stream:
    buf: deque[tuple[float, np.ndarray]] = field(default_factory=deque)
    seen: set[float] = field(default_factory=set)
    seen_order: deque[float] = field(default_factory=deque)
    total: int = 0
    last_ts: float | None = None
    risks: list[tuple[int, str]] = field(default_factory=list)  # ascending n
    latest_risk: float | None = None
    novelty: float | None = None  # recent novelty (service.store.recent_novelty)
    touched: float = field(default_factory=time.monotonic)
    layout: str | None = None
    pending: dict[float, np.ndarray] = field(default_factory=dict)  # held readings
    max_ts: float | None = None  # newest timestamp seen (held ones included)
    epoch: int = 0  # when the stream (re)started (service.store: epochs)
    # its alert log (service.store.AlertLog): (n, start, end, risk) of windows in
    # alert, ascending n; the first scored window's end; the newest one cut off the log
    alerts: list[tuple[int, float, float, float | None]] = field(default_factory=list)
    first_end: float | None = None
    cut: tuple[float, float] | None = None


def _log_alert(
    s: _Stream, n: int, span: tuple[float, float], alert: bool, risk: float
) -> None:
    """Note a record written into the stream's alert log (as the Redis script does)."""
    if s.first_end is None or span[1] < s.first_end:
        s.first_end = span[1]
    if not alert:
        return
    bisect.insort(s.alerts, (n, *span, risk))
    if len(s.alerts) > ALERT_LOG_LEN:
        cut = s.alerts[-ALERT_LOG_LEN - 1]
        s.cut = (cut[1], cut[2])
        del s.alerts[:-ALERT_LOG_LEN]


class MemoryStore(Store):
    def __init__(
        self,
        *,
        ttl_s: int,
        history_len: int,
        dedupe_horizon: int = 10_000,
        layout: str = "",
        on_layout_change: str = "fresh",
        lateness_s: float = 0.0,
    ) -> None:
        self.lateness_s = lateness_s
        self.ttl_s = ttl_s
        self.history_len = history_len
        self.dedupe_horizon = dedupe_horizon
        self.layout = layout
        self.on_layout_change = on_layout_change
        self._streams: OrderedDict[Key, _Stream] = OrderedDict()  # oldest touch first
        self._names: dict[str, list[str]] = {}  # tenant -> sorted stream names
        self._buckets: dict[str, float] = {}  # rate-limit bucket -> tat
        self._incidents: dict[str, dict[str, IncidentRow]] = {}  # tenant -> id -> row
        # the work queue: (item, queued at); delivered: id -> (item, queued, delivered)
        self._queue: deque[tuple[WorkItem, float]] = deque()
        self._delivered: dict[str, tuple[WorkItem, float, float]] = {}
        self._ids = itertools.count(1)
        self._ready: asyncio.Event | None = None
        self._epoch = 0  # the last epoch given: each new one is later

    def _new(self) -> _Stream:
        """A stream's state as it starts (or starts over): a new epoch, the wall clock
        in microseconds, later than any given before."""
        self._epoch = max(self._epoch + 1, time.time_ns() // 1000)
        return _Stream(epoch=self._epoch)

    # -- bookkeeping
    def _expire(self, limit: int | None = None) -> None:
        """Drop streams idle past the TTL, oldest first (at most ``limit``)."""
        cutoff = time.monotonic() - self.ttl_s
        n = 0
        while self._streams and (limit is None or n < limit):
            key, s = next(iter(self._streams.items()))
            if s.touched >= cutoff:
                break
            self._drop(key)
            n += 1

    def _drop(self, key: Key) -> None:
        del self._streams[key]
        names = self._names.get(key[0], [])
        i = bisect.bisect_left(names, key[1])
        if i < len(names) and names[i] == key[1]:
            del names[i]
        if not names:
            self._names.pop(key[0], None)

    def _get(self, key: Key) -> _Stream | None:
        s = self._streams.get(key)
        if s is not None and time.monotonic() - s.touched > self.ttl_s:
            self._drop(key)
            return None
        return s

    def _touch(self, key: Key) -> _Stream:
        s = self._get(key)
        if s is None:
            s = self._streams[key] = self._new()
            bisect.insort(self._names.setdefault(key[0], []), key[1])
        s.touched = time.monotonic()
        self._streams.move_to_end(key)
        return s

    def _event(self) -> asyncio.Event:
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    # -- the interface
    async def register(
        self, tenant: str, streams: list[str], max_streams: int
    ) -> list[str]:
        self._expire(1000)
        refused, count = [], len(self._names.get(tenant, ()))
        for stream in dict.fromkeys(streams):
            if self._get((tenant, stream)) is None:
                if count < max_streams:
                    count += 1
                else:
                    refused.append(stream)
        if not refused:  # all or nothing: a refused request leaves nothing behind
            for stream in streams:
                self._touch((tenant, stream))
        return refused

    async def tenant_streams(self, tenants: Sequence[str]) -> list[int]:
        self._expire(1000)
        return [len(self._names.get(t, ())) for t in tenants]

    def _refused(self, tenant: str, streams: list[str]) -> None:
        if self.on_layout_change != "refuse":
            return
        for stream in streams:
            s = self._get((tenant, stream))
            if s is not None and s.layout is not None and s.layout != self.layout:
                raise LayoutChanged(stream, s.layout, self.layout)

    async def refuse_layouts(self, tenant: str, streams: list[str]) -> None:
        self._refused(tenant, streams)

    async def layouts(self, streams: list[tuple[str, str]]) -> list[str | None]:
        return [s.layout if (s := self._get(key)) else None for key in streams]

    async def append_many(
        self,
        tenant: str,
        items: list[tuple[str, np.ndarray, np.ndarray]],
        *,
        window: int,
        hop: int,
        max_queued: int,
    ) -> list[AppendResult]:
        """Every stream's layout checked before any is stored (no await in between:
        a refused request stores nothing)."""
        self._refused(tenant, [stream for stream, _, _ in items])
        return await super().append_many(
            tenant, items, window=window, hop=hop, max_queued=max_queued
        )

    async def append(
        self,
        tenant: str,
        stream: str,
        ts: np.ndarray,
        values: np.ndarray,
        *,
        window: int,
        hop: int,
        max_queued: int,
    ) -> AppendResult:
        s = self._touch((tenant, stream))
        if s.layout is not None and s.layout != self.layout:
            if self.on_layout_change == "refuse":
                raise LayoutChanged(stream, s.layout, self.layout)
            s = self._streams[(tenant, stream)] = self._new()  # 'fresh': start over
        s.layout = self.layout
        n0, dup, late = s.total, 0, 0
        taken = None
        # with a lateness, or readings held under one (its max_ts) that is now 0:
        # those are released (merged in) by this call
        if self.lateness_s > 0 or s.max_ts is not None:
            ts, values, taken, dup, late = self._hold(s, ts, values)
            if self.lateness_s <= 0:  # all released: none held from here on
                s.max_ts = None
        keep: list[int] = []
        for i, t in enumerate(ts.tolist()):
            if s.last_ts is not None and t <= s.last_ts:
                if t in s.seen:
                    dup += 1
                else:
                    late += 1
                continue
            keep.append(i)
            s.seen.add(t)
            s.seen_order.append(t)
            s.last_ts = t
        x = forward_fill(values[keep], s.buf[-1][1] if s.buf else None)
        rows = [(float(ts[i]), x[j]) for j, i in enumerate(keep)]
        s.total += len(rows)
        while len(s.seen_order) > self.dedupe_horizon:
            s.seen.discard(s.seen_order.popleft())
        ends = completed_ends(n0, s.total, window, hop)
        # back-pressure: past max_queued, only the call's newest window is queued
        depth = len(self._queue) + len(self._delivered)
        n_keep = min(len(ends), max(1, max_queued - depth))
        held = list(s.buf) + rows  # global reading index of held[0] is s.total-len+1
        base = s.total - len(held) + 1
        now = time.monotonic()
        queued = ends[len(ends) - n_keep :]
        for n in queued:
            part = held[n - window - base + 1 : n - base + 1]
            w = Window(n, part[0][0], part[-1][0], np.stack([v for _, v in part]))
            item = WorkItem(
                str(next(self._ids)), tenant, stream, w, s.epoch, self.layout
            )
            self._queue.append((item, now))
        if queued:
            self._event().set()
        s.buf = deque(held[-window:])
        return AppendResult(
            len(rows) if taken is None else taken, dup, late, s.total, len(ends),
            queued, len(ends) - n_keep, len(s.pending),
        )  # fmt: skip

    def _hold(
        self, s: _Stream, ts: np.ndarray, values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int, int, int]:
        """Allowed lateness: hold the readings newer than the watermark (the newest
        timestamp seen minus the lateness) and release, in timestamp order, those the
        watermark has passed. Returns (released ts, values, taken, duplicates, late)."""
        top = s.max_ts if s.max_ts is not None else s.last_ts
        mark = None if top is None else top - self.lateness_s
        taken = dup = late = 0
        for i, t in enumerate(ts.tolist()):
            if s.last_ts is not None and t <= s.last_ts:
                dup, late = (dup + 1, late) if t in s.seen else (dup, late + 1)
            elif mark is not None and t <= mark:
                late += 1
            elif t in s.pending:
                dup += 1
            else:
                s.pending[t] = values[i]
                taken += 1
                top = t if top is None else max(top, t)
        s.max_ts = top
        cut = -np.inf if top is None else top - self.lateness_s
        out = sorted(t for t in s.pending if t <= cut)
        rel_v = [s.pending.pop(t) for t in out]
        shape = (0, values.shape[1])
        x = np.stack(rel_v) if rel_v else np.empty(shape, np.float32)
        return np.array(out, dtype=np.float64), x, taken, dup, late

    async def state(self, tenant: str, stream: str) -> StreamState | None:
        s = self._get((tenant, stream))
        if s is None or (s.total == 0 and not s.pending):
            return None
        return StreamState(s.total, len(s.buf), s.last_ts, s.novelty)

    async def delete(self, tenant: str, stream: str) -> int | None:
        s = self._get((tenant, stream))  # an expired one is unknown already
        if s is None:
            return None
        self._drop((tenant, stream))
        return s.epoch

    async def put_scored(
        self,
        items: list[tuple[str, str, int, list[Record]]],
        *,
        ack: Sequence[str] = (),
        publish: bool = False,
    ) -> list[list[bool]]:
        out = []
        for tenant, stream, epoch, records in items:
            s = self._get((tenant, stream))
            if s is None or s.epoch != epoch:  # expired or started over in between
                out.append([False] * len(records))
                continue
            have = {n for n, _ in s.risks}
            flags = []
            for r in records:
                flags.append(r.n not in have)
                if r.n not in have:
                    bisect.insort(s.risks, (r.n, r.record), key=lambda x: x[0])
                    have.add(r.n)
                    s.novelty = recent_novelty(s.novelty, r.novelty)
                    if r.span is not None:
                        _log_alert(s, r.n, r.span, r.alert, r.risk)
            del s.risks[: -self.history_len]
            newest = max(records, key=lambda r: r[0])
            if s.risks and s.risks[-1][0] == newest[0]:
                s.latest_risk = newest[2]
            out.append(flags)
        await self.ack_work(list(ack))
        return out

    async def alert_log(self, tenant: str, stream: str) -> AlertLog | None:
        s = self._get((tenant, stream))
        if s is None:
            return None
        return AlertLog(list(s.alerts), s.first_end, s.cut, s.last_ts)

    async def put_incident(self, tenant: str, row: IncidentRow) -> None:
        kept = self._incidents.setdefault(tenant, {})
        kept[row.id] = row
        # the oldest reported go (by time, as the Redis store's sorted set has them)
        while len(kept) > INCIDENTS_KEPT:
            del kept[min(kept, key=lambda i: (kept[i].reported_at, i))]

    async def incidents(self, tenant: str, limit: int) -> list[str]:
        rows = self._incidents.get(tenant, {}).values()
        by = sorted(rows, key=lambda r: (r.reported_at, r.id), reverse=True)
        return [r.record for r in by[:limit]]

    async def delete_incident(self, tenant: str, incident: str) -> bool:
        return self._incidents.get(tenant, {}).pop(incident, None) is not None

    async def incident_outcomes(
        self, tenants: Sequence[str], since: float
    ) -> list[list[tuple[str, float | None]]]:
        return [
            [
                (r.outcome, r.lead_s)
                for r in self._incidents.get(t, {}).values()
                if r.reported_at >= since
            ]
            for t in tenants
        ]

    async def scored(
        self, tenant: str, items: list[tuple[str, list[int]]]
    ) -> list[dict[int, str]]:
        out = []
        for stream, ns in items:
            s, want = self._get((tenant, stream)), set(ns)
            out.append({} if s is None else {n: r for n, r in s.risks if n in want})
        return out

    async def risks(self, tenant: str, stream: str, limit: int) -> list[str]:
        s = self._get((tenant, stream))
        return [] if s is None else [r for _, r in reversed(s.risks[-limit:])]

    async def streams(self, tenant: str, after: str | None, limit: int) -> list[str]:
        self._expire(1000)
        names = self._names.get(tenant, [])
        i = bisect.bisect_right(names, after) if after is not None else 0
        # expired names (past the 1,000 expired above) are skipped, not counted: a
        # short page ends the listing
        live = (n for n in names[i:] if self._get((tenant, n)))
        return list(itertools.islice(live, limit))

    async def top_streams(self, tenant: str, limit: int) -> list[tuple[str, float]]:
        scored = []
        for name in self._names.get(tenant, []):
            s = self._get((tenant, name))
            if s is not None and s.latest_risk is not None:
                scored.append((s.latest_risk, f"{tenant}/{name}", tenant, name))
        return [(stream, risk) for _, stream, risk in _ranked(scored, limit)]

    async def summary(
        self,
        threshold: float,
        top: int = 0,
        tenants: Sequence[str] = (),
        own: Mapping[str, float] = MappingProxyType({}),
    ) -> Summary:
        """One pass over the streams (the Redis store reads its indexes instead: this
        store's scrape grows with its streams)."""
        self._expire()
        latest: list[tuple[float, str, str, str]] = []
        novel: list[tuple[float, str, str, str]] = []
        for (tenant, stream), s in self._streams.items():
            if s.latest_risk is not None:
                latest.append((s.latest_risk, f"{tenant}/{stream}", tenant, stream))
            if s.novelty is not None:
                novel.append((s.novelty, f"{tenant}/{stream}", tenant, stream))
        hot = Counter(x[2] for x in latest if x[0] >= own.get(x[2], threshold))
        highest: dict[str, float] = {}
        for risk, _, tenant, _ in latest:
            highest[tenant] = max(risk, highest.get(tenant, 0.0))
        return Summary(
            len(self._streams),
            max((x[0] for x in latest), default=0.0),
            _ranked(latest, top),
            _ranked(novel, top),
            tuple(sorted(hot.items())),
            tuple((t, highest.get(t, 0.0)) for t in tenants),
        )

    async def rate(self, bucket: str, rps: float, burst: int) -> float:
        now = time.monotonic()
        tat, wait = gcra(self._buckets.get(bucket, now), now, rps, burst)
        self._buckets[bucket] = tat
        return wait

    # -- the work queue
    async def read_work(
        self, consumer: str, count: int, block_s: float
    ) -> list[WorkItem]:
        ready = self._event()
        if not self._queue and block_s > 0:
            ready.clear()
            try:
                await asyncio.wait_for(ready.wait(), block_s)
            except TimeoutError:
                return []
        out: list[WorkItem] = []
        now = time.monotonic()
        while self._queue and len(out) < count:
            item, queued = self._queue.popleft()
            self._delivered[item.id] = (item, queued, now)
            out.append(item)
        return out

    async def claim_work(
        self, consumer: str, min_idle_s: float, count: int
    ) -> list[WorkItem]:
        now = time.monotonic()
        out: list[WorkItem] = []
        for item_id, (item, queued, at) in list(self._delivered.items()):
            if len(out) == count:
                break
            if now - at > min_idle_s:
                self._delivered[item_id] = (item, queued, now)
                out.append(item)
        return out

    async def ack_work(self, ids: list[str]) -> None:
        for i in ids:
            self._delivered.pop(i, None)

    async def queue_stats(self) -> QueueStats:
        times = [q for _, q in itertools.islice(self._queue, 1)]
        times += [q for _, q, _ in self._delivered.values()]
        age = time.monotonic() - min(times) if times else 0.0
        return QueueStats(len(self._queue) + len(self._delivered), age)

    async def ping(self) -> None:
        return None


def _ranked(have: list[tuple[float, str, str, str]], top: int) -> Ranked:
    """The ``top`` of (value, member, tenant, stream), highest first, ties by the later
    tenant/stream: Redis' ZREVRANGE order."""
    best = heapq.nlargest(top, have, key=lambda x: (x[0], x[1]))
    return tuple((tenant, stream, v) for v, _, tenant, stream in best)
