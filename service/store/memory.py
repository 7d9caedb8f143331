"""In-process store: the embedded default when no Redis URL is configured (one process).

Each method runs without awaiting, so on one event loop it is atomic like the Redis
script. Rows are kept as numpy arrays, filled by :func:`service.store.forward_fill`.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
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
)


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
        self._streams: dict[str, _Stream] = {}

    def _get(self, stream: str) -> _Stream | None:
        s = self._streams.get(stream)
        if s is not None and time.monotonic() - s.touched > self.ttl_s:
            del self._streams[stream]
            return None
        return s

    async def append(
        self,
        stream: str,
        ts: np.ndarray,
        values: np.ndarray,
        *,
        window: int,
        hop: int,
        max_windows: int,
    ) -> AppendResult:
        s = self._get(stream) or self._streams.setdefault(stream, _Stream())
        s.touched = time.monotonic()
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

    async def state(self, stream: str) -> StreamState | None:
        s = self._get(stream)
        if s is None:
            return None
        return StreamState(s.total, len(s.buf), s.last_ts)

    async def put_risks(
        self, stream: str, records: list[tuple[int, str]], latest_risk: float
    ) -> None:
        s = self._get(stream) or self._streams.setdefault(stream, _Stream())
        s.latest_risk = latest_risk
        for rec in records:
            bisect.insort(s.risks, rec, key=lambda r: r[0])
        del s.risks[: -self.history_len]

    async def risks(self, stream: str, limit: int) -> list[str]:
        s = self._get(stream)
        return [] if s is None else [r for _, r in reversed(s.risks[-limit:])]

    async def streams(self) -> list[str]:
        return sorted(name for name in list(self._streams) if self._get(name))

    async def summary(self, threshold: float) -> Summary:
        live = [s for name in list(self._streams) if (s := self._get(name))]
        risks = [s.latest_risk for s in live if s.latest_risk is not None]
        return Summary(
            len(live), sum(r >= threshold for r in risks), max(risks, default=0.0)
        )

    async def ping(self) -> None:
        return None
