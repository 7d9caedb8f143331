"""In-process store: the embedded default when no Redis URL is configured (one process).

Each method runs without awaiting, so on one event loop it is atomic like the Redis
script. Rows are kept as numpy arrays, filled by :func:`service.store.forward_fill`.
Streams are keyed by (tenant, stream); idle ones are dropped oldest first as calls come
(the touch order is kept, so that costs nothing per live stream), and each tenant's
names are kept sorted for paged listing.
"""

from __future__ import annotations

import bisect
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from service.store import (
    AppendResult,
    Store,
    StreamState,
    Summary,
    Window,
    completed_ends,
    forward_fill,
    gcra,
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
    touched: float = field(default_factory=time.monotonic)


class MemoryStore(Store):
    def __init__(
        self, *, ttl_s: int, history_len: int, dedupe_horizon: int = 10_000
    ) -> None:
        self.ttl_s = ttl_s
        self.history_len = history_len
        self.dedupe_horizon = dedupe_horizon
        self._streams: OrderedDict[Key, _Stream] = OrderedDict()  # oldest touch first
        self._names: dict[str, list[str]] = {}  # tenant -> sorted stream names
        self._buckets: dict[str, float] = {}  # rate-limit bucket -> tat

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
            s = self._streams[key] = _Stream()
            bisect.insort(self._names.setdefault(key[0], []), key[1])
        s.touched = time.monotonic()
        self._streams.move_to_end(key)
        return s

    # -- the interface
    async def register(
        self, tenant: str, streams: list[str], max_streams: int
    ) -> list[str]:
        self._expire(1000)
        refused = []
        for stream in streams:
            known = self._get((tenant, stream)) is not None
            if known or len(self._names.get(tenant, ())) < max_streams:
                self._touch((tenant, stream))
            else:
                refused.append(stream)
        return refused

    async def append(
        self,
        tenant: str,
        stream: str,
        ts: np.ndarray,
        values: np.ndarray,
        *,
        window: int,
        hop: int,
        max_windows: int,
    ) -> AppendResult:
        s = self._touch((tenant, stream))
        n0, dup, late = s.total, 0, 0
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
        held = list(s.buf) + rows  # global reading index of held[0] is s.total-len+1
        base = s.total - len(held) + 1
        windows = []
        for n in ends[-max_windows:]:
            part = held[n - window - base + 1 : n - base + 1]
            windows.append(
                Window(n, part[0][0], part[-1][0], np.stack([v for _, v in part]))
            )
        s.buf = deque(held[-window:])
        return AppendResult(len(rows), dup, late, s.total, len(ends), windows)

    async def state(self, tenant: str, stream: str) -> StreamState | None:
        s = self._get((tenant, stream))
        if s is None or s.total == 0:
            return None
        return StreamState(s.total, len(s.buf), s.last_ts)

    async def put_risks(
        self,
        tenant: str,
        stream: str,
        records: list[tuple[int, str]],
        latest_risk: float,
    ) -> None:
        s = self._get((tenant, stream))
        if s is None:
            return  # expired in between: nothing to attach the records to
        s.latest_risk = latest_risk
        for rec in records:
            bisect.insort(s.risks, rec, key=lambda r: r[0])
        del s.risks[: -self.history_len]

    async def risks(self, tenant: str, stream: str, limit: int) -> list[str]:
        s = self._get((tenant, stream))
        return [] if s is None else [r for _, r in reversed(s.risks[-limit:])]

    async def streams(self, tenant: str, after: str | None, limit: int) -> list[str]:
        self._expire(1000)
        names = self._names.get(tenant, [])
        i = bisect.bisect_right(names, after) if after is not None else 0
        return [n for n in names[i : i + limit] if self._get((tenant, n))]

    async def summary(self, threshold: float) -> Summary:
        self._expire()
        risks = [r for s in self._streams.values() if (r := s.latest_risk) is not None]
        return Summary(
            len(self._streams),
            sum(r >= threshold for r in risks),
            max(risks, default=0.0),
        )

    async def rate(self, bucket: str, rps: float, burst: int) -> float:
        now = time.monotonic()
        tat, wait = gcra(self._buckets.get(bucket, now), now, rps, burst)
        self._buckets[bucket] = tat
        return wait

    async def ping(self) -> None:
        return None
