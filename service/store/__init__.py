"""Per-stream state: reading buffers, dedupe, completed windows and risk records.

Two implementations behind one interface: :class:`RedisStore` (production; any replica
can answer) and :class:`MemoryStore` (the embedded default, one process). Both apply the
same rules, once per ingest call and stream, atomically:

- a reading whose timestamp was already accepted is a *duplicate*: counted, not stored;
- a reading older than the newest accepted one is *late*: counted, not stored;
- a missing value (None/NaN) is forward-filled from the stream's last accepted value of
  that channel (:func:`forward_fill`); a channel never observed stays missing, filled
  when the window is cut (:func:`fill_leading`);
- the stream's N-th accepted reading completes a window of the last ``window`` readings
  when ``N >= window`` and ``(N - window) % hop == 0`` (:func:`completed_ends`); if one
  call completes several, the latest ``max_windows`` are returned (oldest first) and
  the others only counted.

The fill rule is defined here, in numpy, and the memory store calls it. The Redis
append script applies the same forward fill itself: the previous row it fills from must
be read in the same atomic step that dedupes and appends (racing retries), and a script
that stored raw rows would need the same per-value merge when it trims rows off the
head, to keep the carry-over. So the script is rendered from this package's row layout
(:data:`TS`, :data:`VALUE`) and a test holds both stores to identical windows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np


class StoreUnavailable(RuntimeError):
    """The backing store cannot be reached; requests get 503 and nothing is lost."""


@dataclass(frozen=True)
class Window:
    n: int  # the stream's reading count that completed it (1-based)
    start_ts: float
    end_ts: float
    values: np.ndarray  # (window, V) float32, NaN only for never-observed channels


@dataclass(frozen=True)
class AppendResult:
    accepted: int
    duplicates: int
    late: int
    total: int  # readings accepted by the stream so far
    completed: int  # windows completed by this call (>= len(windows))
    windows: list[Window]


@dataclass(frozen=True)
class Summary:
    """Over the live streams (not idle longer than the TTL), whatever replica fed them."""

    streams: int
    in_alert: int  # latest risk >= threshold
    max_risk: float  # 0.0 when nothing was scored yet


@dataclass(frozen=True)
class StreamState:
    total: int
    buffered: int
    last_ts: float | None


TS = np.dtype("<f8")  # a stored row: its timestamp, then one VALUE per channel
VALUE = np.dtype("<f4")  # NaN = missing


def row_dtype(n_channels: int) -> np.dtype[np.void]:
    return np.dtype([("ts", TS), ("v", VALUE, (n_channels,))])


def completed_ends(n0: int, total: int, window: int, hop: int) -> list[int]:
    """Reading counts in (n0, total] that complete a window, ascending."""
    first = max(n0 + 1, window)
    first = window + -(-(first - window) // hop) * hop  # the next end at or past it
    return list(range(first, total + 1, hop))


def forward_fill(rows: np.ndarray, prev: np.ndarray | None) -> np.ndarray:
    """``rows`` (R, V) with each missing value taken from the latest earlier row that has
    the channel, ``prev`` (the stream's last stored row, itself filled) before the first.
    A channel observed in none of them stays NaN. Returns a new float32 array."""
    x = np.asarray(rows, dtype=np.float32)
    if prev is not None:
        x = np.concatenate([np.asarray(prev, dtype=x.dtype)[None], x])
    observed = ~np.isnan(x)
    if observed.all():
        return x[1:] if prev is not None else x.copy()
    # per cell, the index of the latest row at or before it that observed the channel
    last = np.where(observed, np.arange(len(x))[:, None], 0)
    np.maximum.accumulate(last, axis=0, out=last)
    out = x[last, np.arange(x.shape[1])]
    return out[1:] if prev is not None else out


def fill_leading(values: np.ndarray) -> np.ndarray:
    """Fill a window's remaining NaNs (a channel not yet observed when its readings came).

    As training does for a series' leading gap: the channel's first observed value in the
    window, or 0 when the window never observed it (training masks such channels).
    """
    missing = np.isnan(values)
    if not missing.any():
        return values
    out = values.copy()
    for v in np.flatnonzero(missing.any(axis=0)):
        seen = np.flatnonzero(~missing[:, v])
        out[missing[:, v], v] = values[seen[0], v] if len(seen) else 0.0
    return out


class Store(ABC):
    """The operations the service needs; every method is one round trip or script.

    Every stream belongs to a tenant: its state is keyed by (tenant, stream), so one
    tenant's calls never reach another's streams, whatever the names.
    """

    @abstractmethod
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
        """Apply the rules above to readings with strictly increasing ``ts`` (R,)
        float64; ``values`` (R, V) float32, NaN for a missing value."""

    async def append_many(
        self,
        tenant: str,
        items: list[tuple[str, np.ndarray, np.ndarray]],
        *,
        window: int,
        hop: int,
        max_windows: int,
    ) -> list[AppendResult]:
        """:meth:`append` for several streams (stream, ts, values), in order. Stores
        with round trips override it to make one, whatever the number of streams
        (one request's streams must not take every pooled connection)."""
        return [
            await self.append(
                tenant, s, ts, v, window=window, hop=hop, max_windows=max_windows
            )
            for s, ts, v in items
        ]

    async def put_risks_many(
        self, tenant: str, items: list[tuple[str, list[tuple[int, str]], float]]
    ) -> None:
        """:meth:`put_risks` for several streams (stream, records, latest risk)."""
        for stream, records, latest_risk in items:
            await self.put_risks(tenant, stream, records, latest_risk)

    @abstractmethod
    async def register(
        self, tenant: str, streams: list[str], max_streams: int
    ) -> list[str]:
        """Note the streams as live (the idle TTL starts again) and return those
        refused because the tenant already has ``max_streams`` live streams (only new
        streams are refused). Called before :meth:`append`."""

    @abstractmethod
    async def state(self, tenant: str, stream: str) -> StreamState | None:
        """Reading counts of a known stream, None for an unknown (or expired) one."""

    @abstractmethod
    async def put_risks(
        self,
        tenant: str,
        stream: str,
        records: list[tuple[int, str]],
        latest_risk: float,
    ) -> None:
        """Add (window count n, JSON record) pairs to the stream's capped history and
        note ``latest_risk`` (of the newest record) for :meth:`summary`."""

    @abstractmethod
    async def risks(self, tenant: str, stream: str, limit: int) -> list[str]:
        """The latest ``limit`` risk records (JSON), newest first."""

    async def latest(
        self, tenant: str, stream: str
    ) -> tuple[StreamState | None, str | None]:
        """:meth:`state` and the newest risk record (JSON) together: what GET /risk
        reads. Stores with round trips override it to make one."""
        state = await self.state(tenant, stream)
        recs = await self.risks(tenant, stream, 1)
        return state, recs[0] if recs else None

    @abstractmethod
    async def streams(self, tenant: str, after: str | None, limit: int) -> list[str]:
        """The tenant's streams not idle for longer than the TTL, sorted by name: the
        first ``limit`` after ``after`` (a page; cost bounded by ``limit``)."""

    @abstractmethod
    async def summary(self, threshold: float) -> Summary:
        """Counts for the gauges, over every tenant: live streams, streams in alert,
        highest latest risk (cost independent of the number of streams)."""

    @abstractmethod
    async def rate(self, bucket: str, rps: float, burst: int) -> float:
        """Take one request from the token bucket ``bucket`` (``rps`` a second, up to
        ``burst`` at once): 0.0 when allowed, else the seconds until it would be."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` when the store cannot be reached."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def gcra(tat: float, now: float, rps: float, burst: int) -> tuple[float, float]:
    """Generic cell rate algorithm (a token bucket in one number): from the bucket's
    theoretical arrival time ``tat``, (new tat, 0.0) when a request at ``now`` is
    allowed, else (tat unchanged, seconds to wait). The Redis script mirrors it."""
    period = 1.0 / rps
    new = max(tat, now) + period
    wait = new - burst * period - now
    return (tat, wait) if wait > 0 else (new, 0.0)


def make_store(
    redis_url: str | None,
    *,
    prefix: str = "scjepa",
    ttl_s: int = 7 * 24 * 3600,
    history_len: int = 500,
    dedupe_horizon: int = 10_000,
    timeout_s: float = 1.0,
    max_connections: int = 64,
) -> Store:
    """RedisStore when a URL is given, else the in-process MemoryStore."""
    if redis_url:
        from service.store.redis_store import RedisStore

        return RedisStore(
            redis_url,
            prefix=prefix,
            ttl_s=ttl_s,
            history_len=history_len,
            dedupe_horizon=dedupe_horizon,
            timeout_s=timeout_s,
            max_connections=max_connections,
        )
    from service.store.memory import MemoryStore

    return MemoryStore(
        ttl_s=ttl_s, history_len=history_len, dedupe_horizon=dedupe_horizon
    )


__all__ = [
    "TS",
    "VALUE",
    "AppendResult",
    "Store",
    "StoreUnavailable",
    "StreamState",
    "Summary",
    "Window",
    "completed_ends",
    "fill_leading",
    "forward_fill",
    "gcra",
    "make_store",
    "row_dtype",
]
