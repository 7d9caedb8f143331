"""Per-stream state: reading buffers, dedupe, completed windows and risk records.

Two implementations behind one interface: :class:`RedisStore` (production; any replica
can answer) and :class:`MemoryStore` (the embedded default, one process). Both apply the
same rules, once per ingest call and stream, atomically:

- a reading whose timestamp was already accepted is a *duplicate*: counted, not stored;
- a reading older than the newest accepted one is *late*: counted, not stored; with an
  allowed lateness L > 0, readings wait until the watermark (the newest timestamp
  seen, minus L) passes them and are then merged in timestamp order, so only a
  reading at or below the watermark is late; readings still held when the lateness
  is set to 0 are all released (merged in) by the stream's next call, which is
  applied with L = 0 as a lateness (a reading at or below the newest held one is
  late);
- a missing value (None/NaN) is forward-filled from the stream's last accepted value of
  that channel (:func:`forward_fill`); a channel never observed stays missing, filled
  when the window is cut (:func:`fill_leading`);
- the stream's N-th accepted reading completes a window of the last ``window`` readings
  when ``N >= window`` and ``(N - window) % hop == 0`` (:func:`completed_ends`); every
  completed window is queued as a :class:`WorkItem` for the scorers in the same atomic
  step (its readings travel in the item), unless the work queue's partition already
  holds ``max_queued`` items: then only the call's newest window is queued and the
  others are *shed* (counted; the readings are kept) - the back-pressure policy.

A stream's state carries an *epoch*: a number given when the state is created (the
wall clock in microseconds, later than the stream's previous epoch), so a stream that
starts over (a model of another layout under SCJEPA_LAYOUT_CHANGE=fresh, or forgotten
after the TTL or deleted, and sending again) has a later one, and its windows, numbered from the
first again, are told from the old ones by (epoch, n): each :class:`WorkItem` carries
it (the alerts use it). A Redis stream stored before epochs were kept has epoch 0.

The work queue gives at-least-once delivery: a scorer reads items (:meth:`Store.
read_work`), writes their risk records (:meth:`Store.put_scored`, keyed by the window
number, so a window scored twice is recorded once) and acknowledges them
(:meth:`Store.ack_work`); items a dead scorer left unacknowledged are claimed by
another after a timeout (:meth:`Store.claim_work`).

The fill rule is defined here, in numpy, and the memory store calls it. The Redis
append script applies the same forward fill itself: the previous row it fills from must
be read in the same atomic step that dedupes and appends (racing retries), and a script
that stored raw rows would need the same per-value merge when it trims rows off the
head, to keep the carry-over. So the script is rendered from this package's row layout
(:data:`TS`, :data:`VALUE`) and a test holds both stores to identical windows.
"""

from __future__ import annotations

import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np


class StoreUnavailable(RuntimeError):
    """The backing store cannot be reached; requests get 503 and nothing is lost."""


class LayoutChanged(Exception):
    """A stream's state was built for another model layout and the policy
    (SCJEPA_LAYOUT_CHANGE=refuse) keeps it: the request is refused (409)."""

    def __init__(self, stream: str, built: str, layout: str) -> None:
        super().__init__(
            f"stream {stream!r} holds readings for another model layout ({built}; "
            f"the model in service reads {layout}); SCJEPA_LAYOUT_CHANGE=refuse keeps "
            "them: set it to 'fresh' to start such streams over"
        )
        self.stream = stream


def layout_of(channels: list[str], window: int) -> str:
    """What a stream's stored readings are laid out for: window length, channel count
    and a digest of the channel names (in order). Recorded in the stream's state."""
    digest = hashlib.sha256("\x1f".join(channels).encode()).hexdigest()[:12]
    return f"w{window}/v{len(channels)}/{digest}"


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
    completed: int  # windows completed by this call (= len(queued) + shed)
    queued: list[int]  # numbers (n) of the windows queued for scoring, ascending
    shed: int = 0  # completed windows not queued (back-pressure)
    held: int = 0  # the stream's readings waiting for the watermark (lateness > 0)
    # nothing stored: a new stream (no state) that the store's registry memo took for
    # registered (deleted through another replica since): register it, append again
    unregistered: bool = False


@dataclass(frozen=True)
class WorkItem:
    """One completed window waiting for a scorer. ``id`` is the store's handle for
    :meth:`Store.ack_work`; the same window may be delivered again (a claim after a
    scorer died), never with other values."""

    id: str
    tenant: str
    stream: str
    window: Window
    epoch: int = 0  # the stream's epoch when the window was cut (see above)
    # the layout (:func:`layout_of`) its rows were stored for: a scorer of another
    # model scores none (the same shape with other channels would read them wrong);
    # "" for an item queued before items recorded it (then its stream state's, read by
    # the scorer: :meth:`Store.layouts`)
    layout: str = ""


@dataclass(frozen=True)
class QueueStats:
    """The work queue over every partition: items queued or delivered and not yet
    acknowledged, and the age of the oldest (0.0 when empty)."""

    depth: int
    oldest_age_s: float


Ranked = tuple[tuple[str, str, float], ...]  # (tenant, stream, value), highest first


@dataclass(frozen=True)
class Summary:
    """Over the live streams (not idle longer than the TTL), whatever replica fed them."""

    streams: int
    max_risk: float  # 0.0 when nothing was scored yet
    # (tenant, stream, latest risk) of the ``top`` streams of highest latest risk,
    # highest first (ties: the later tenant/stream name first, as Redis orders them)
    top: Ranked = ()
    # the same for their recent novelty (:func:`recent_novelty`): the ``top`` streams
    # least like the training data (none scored by a model with the monitor: empty)
    top_novelty: Ranked = ()
    # (tenant, streams whose latest risk >= its threshold), tenants with none left out
    in_alert_by_tenant: tuple[tuple[str, int], ...] = ()
    # (tenant, highest latest risk of its streams; 0.0 when none was scored) of each
    # tenant asked for, in the order asked
    max_risk_by_tenant: tuple[tuple[str, float], ...] = ()

    @property
    def in_alert(self) -> int:
        """Streams whose latest risk is at or above the threshold."""
        return sum(n for _, n in self.in_alert_by_tenant)


@dataclass(frozen=True)
class StreamState:
    total: int
    buffered: int
    last_ts: float | None
    novelty: float | None = None  # its recent novelty (:func:`recent_novelty`)


class Record(NamedTuple):
    """A risk record as the scorer writes it (:meth:`Store.put_scored`)."""

    n: int  # the window number (the stream's reading count at its end)
    record: str  # the record, JSON
    risk: float
    novelty: float | None  # None: a model without the input-drift monitor
    # the window's first and last readings' timestamps, and whether it is in alert:
    # the stream's alert log (:class:`AlertLog`) keeps them (None: not logged)
    span: tuple[float, float] | None = None
    alert: bool = False


# A stream's alert log keeps its last ALERT_LOG_LEN windows in alert; a tenant keeps
# its last INCIDENTS_KEPT incidents reported (service.incidents).
ALERT_LOG_LEN = 2000
INCIDENTS_KEPT = 10_000


@dataclass(frozen=True)
class AlertLog:
    """When a stream (its current life) was in alert, as its records said: what an
    incident reported on it is judged by (:mod:`service.incidents`)."""

    # (n, window start, window end, risk) of its windows in alert, ascending n: the
    # last ALERT_LOG_LEN of them (risk None: logged before the log kept risks)
    alerting: list[tuple[int, float, float, float | None]]
    first_end: float | None  # the end of the first window scored (None: none yet)
    # the span of the newest window in alert dropped past ALERT_LOG_LEN (None: none)
    cut: tuple[float, float] | None
    last_ts: float | None  # the stream's newest reading

    @functools.cached_property
    def ends(self) -> list[float]:
        """Its windows' ends, ascending (as their numbers are)."""
        return [w[2] for w in self.alerting]

    @functools.cached_property
    def widest(self) -> float:
        """The longest of its windows (last reading's timestamp minus first's)."""
        return max((w[2] - w[1] for w in self.alerting), default=0.0)

    def at(self, threshold: float) -> AlertLog:
        """The log as an operating point of ``threshold`` would have left it: its
        windows of risk at or above it (those logged without a risk kept). Exact for
        a threshold at or above the one the windows were scored at; under it, windows
        that were not in alert then are missing (not logged)."""
        kept = [w for w in self.alerting if w[3] is None or w[3] >= threshold]
        return AlertLog(kept, self.first_end, self.cut, self.last_ts)


@dataclass(frozen=True)
class IncidentRow:
    """An incident as a tenant's store keeps it: its id, when it was reported (Unix
    seconds), its record (JSON: service.schemas.Incident), and what the gauges count
    of it, kept apart so that a scrape reads no record: its outcome and lead
    (seconds; None unless warned)."""

    id: str
    reported_at: float
    record: str
    outcome: str
    lead_s: float | None = None


# A stream's recent novelty: an exponentially weighted mean of its scored windows'
# novelty over a span of NOVELTY_SPAN windows (weight 2 / (span + 1) on the newest),
# starting from NOVELTY_PRIOR, the mean novelty of data like the calibration windows
# (a rank among them), so that a new stream must show it for a while to rank high.
# One window's novelty is noisy (1 % of normal windows reach 0.99 by design) and
# windows a hop apart share most of their readings (at hop 5, 20 of them are one
# window's worth of data): 60 windows are 300 readings at hop 5, three windows' worth.
# On the benchmarks' validation streams (the calibration windows' own data, incidents
# included) the 99th percentile of the recent novelty is 0.81-0.99 at a span of 60,
# and a stream that turns wholly unlike the training data passes it after 29-109
# windows; at 30 it is 0.90-1.00 (only a stream near 1 throughout stands out), at
# 120 0.70-0.97 but passed after 31-169 windows (docs/notebook/results-notes.md,
# 2026-12-01). The Redis record script mirrors the update.
NOVELTY_SPAN = 60
NOVELTY_PRIOR = 0.5
NOVELTY_WEIGHT = 2 / (NOVELTY_SPAN + 1)


def recent_novelty(recent: float | None, novelty: float | None) -> float | None:
    """A stream's recent novelty after a window of ``novelty`` was recorded; None for
    a window without one (a model without the monitor: no figure to keep)."""
    if novelty is None:
        return None
    prev = NOVELTY_PRIOR if recent is None else recent
    return prev + NOVELTY_WEIGHT * (novelty - prev)


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

    # the layout (:func:`layout_of`) of the model this process serves: what its
    # streams are stored for and its queued windows cut for ("": not checked)
    layout: str = ""

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
        max_queued: int,
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
        max_queued: int,
    ) -> list[AppendResult]:
        """:meth:`append` for several streams (stream, ts, values), in order. Stores
        with round trips override it to make one, whatever the number of streams
        (one request's streams must not take every pooled connection)."""
        return [
            await self.append(
                tenant, s, ts, v, window=window, hop=hop, max_queued=max_queued
            )
            for s, ts, v in items
        ]

    @abstractmethod
    async def put_scored(
        self,
        items: list[tuple[str, str, int, list[Record]]],
        *,
        ack: Sequence[str] = (),
        publish: bool = False,
    ) -> list[list[bool]]:
        """Write risk records: per (tenant, stream, epoch, [:data:`Record`]), add each
        record unless the stream already has one for window ``n`` (the first write
        wins: a window scored twice is recorded once) or is no longer in the epoch its
        windows were cut in (started over or forgotten since: the record would take
        the new life's window ``n``), cap the history, fold each record written into
        the stream's recent novelty (:func:`recent_novelty`, in the order given; kept
        in its state, so it goes with it), and note the risk of the stream's newest
        record and its recent novelty for :meth:`summary`. Returns, per item and
        record, whether it was written now. Then, once the records are written (so
        that a failure leaves the items pending), acknowledge the work items ``ack``
        (:meth:`ack_work`) and, with ``publish``, tell every process that these
        windows were just scored (their waiting ingest calls wake; at most once; a
        store of one process has no one to tell): the scorer's whole write."""

    @abstractmethod
    async def scored(
        self, tenant: str, items: list[tuple[str, list[int]]]
    ) -> list[dict[int, str]]:
        """Per (stream, window numbers): the risk records (JSON) of those windows that
        exist, by n. One round trip."""

    # -- the work queue
    async def ensure_groups(self) -> None:  # noqa: B027 - optional hook
        """Make the work queue readable (Redis: the consumer group on every
        partition); the append script also creates a partition's when it is missing."""

    @abstractmethod
    async def read_work(
        self, consumer: str, count: int, block_s: float
    ) -> list[WorkItem]:
        """Up to ``count`` items never delivered before, waiting up to ``block_s`` for
        one; each stays pending for ``consumer`` until :meth:`ack_work`."""

    @abstractmethod
    async def claim_work(
        self, consumer: str, min_idle_s: float, count: int
    ) -> list[WorkItem]:
        """Up to ``count`` items delivered to some consumer more than ``min_idle_s``
        ago and not acknowledged (a scorer died, or hangs): now ``consumer``'s."""

    @abstractmethod
    async def ack_work(self, ids: list[str]) -> None:
        """Done with these items: they leave the queue."""

    async def listen_scored(
        self, deliver: Callable[[list[tuple[str, str, list[int]]]], None]
    ) -> None:
        """Hand news of windows scored (:meth:`put_scored` with ``publish``) to
        ``deliver`` until cancelled (at most once: a waiter also re-reads the records).
        Returns at once where there is none (one process, or a Redis Cluster: waiters
        poll)."""
        return None

    @abstractmethod
    async def queue_stats(self) -> QueueStats:
        """Depth and oldest age of the work queue (cost bounded by the partitions)."""

    @abstractmethod
    async def register(
        self, tenant: str, streams: list[str], max_streams: int
    ) -> list[str]:
        """Note the streams as live (the idle TTL starts again) and return those
        refused because the tenant already has ``max_streams`` live streams (only new
        streams are refused). All or nothing: when any is refused, none is noted (a
        refused request leaves nothing behind). Called before :meth:`append`."""

    @abstractmethod
    async def tenant_streams(self, tenants: Sequence[str]) -> list[int]:
        """Each tenant's live streams (sent readings within the idle TTL): what its
        stream quota counts (:meth:`register`). One read per tenant, whatever the
        number of streams."""

    async def refuse_layouts(self, tenant: str, streams: list[str]) -> None:
        """Raise :class:`LayoutChanged` for the first of the streams stored for
        another model layout when the policy refuses them (SCJEPA_LAYOUT_CHANGE=
        refuse); else nothing. Read-only: called before :meth:`register` for a
        request of several streams, so that a refused request stores none of them
        (:meth:`append` refuses too, atomically, per stream)."""
        return None

    async def layouts(self, streams: list[tuple[str, str]]) -> list[str | None]:
        """The layout each (tenant, stream)'s state was built for; None without a
        state (or one stored before layouts were kept). What a window queued by a
        release before items recorded their layout was cut for, as long as the
        stream has not started over since (then its record is refused anyway)."""
        return [None] * len(streams)

    @abstractmethod
    async def state(self, tenant: str, stream: str) -> StreamState | None:
        """Reading counts of a known stream, None for an unknown (or expired) one."""

    @abstractmethod
    async def delete(self, tenant: str, stream: str) -> int | None:
        """Forget the stream at once, as the idle TTL would: its rows, held readings,
        dedupe horizon, state, risk records, its place in the tenant's names (GET
        /streams, the quota) and in the gauges. Returns the epoch of the life deleted
        (what its alert state is closed for; where that is gone with the life's keys,
        a later one of the same clock that no new life's precedes), None when nothing
        was stored for it.
        Windows already queued are scored as any, and their records refused (no state,
        or a later epoch once it sends again: :meth:`put_scored`), so they leave the
        queue without bringing it back."""

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
    async def top_streams(self, tenant: str, limit: int) -> list[tuple[str, float]]:
        """The tenant's ``limit`` live streams of highest latest risk, with it, highest
        first (ties: the later name first, as Redis orders them); streams not scored
        yet are not listed (cost bounded by ``limit`` and the entries of streams gone
        it meets, which it forgets)."""

    @abstractmethod
    async def summary(
        self,
        threshold: float,
        top: int = 0,
        tenants: Sequence[str] = (),
        own: Mapping[str, float] = MappingProxyType({}),
    ) -> Summary:
        """Counts for the gauges, over every tenant: live streams, streams in alert
        (in all and by tenant: at or above ``threshold``, or a tenant's ``own``
        threshold where it has one), highest latest risk (in all and of each of
        ``tenants``), and the ``top`` streams of highest latest risk and of highest
        recent novelty (cost independent of the number of streams: bounded by
        ``top``, the streams at or above the lowest threshold, ``own`` and
        ``tenants``)."""

    @abstractmethod
    async def alert_log(self, tenant: str, stream: str) -> AlertLog | None:
        """The stream's :class:`AlertLog`; None for a stream the store does not have.
        The log goes with the stream (delete, idle TTL, a fresh start)."""

    @abstractmethod
    async def put_incident(self, tenant: str, row: IncidentRow) -> None:
        """Keep the tenant's incident ``row`` (replacing one of the same id), then
        only its last :data:`INCIDENTS_KEPT` reported."""

    @abstractmethod
    async def incidents(self, tenant: str, limit: int) -> list[str]:
        """The tenant's last ``limit`` incidents reported (JSON), newest first."""

    @abstractmethod
    async def delete_incident(self, tenant: str, incident: str) -> bool:
        """Forget one of the tenant's incidents; False when it has none of that id."""

    @abstractmethod
    async def incident_outcomes(
        self, tenants: Sequence[str], since: float
    ) -> list[list[tuple[str, float | None]]]:
        """Per tenant, the (outcome, lead) of its incidents reported at or after
        ``since`` (Unix seconds): what the gauges count."""

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
    partitions: int = 16,
    layout: str = "",
    on_layout_change: str = "fresh",
    lateness_s: float = 0.0,
) -> Store:
    """RedisStore when a URL is given (``redis+cluster://`` for a Redis Cluster), else
    the in-process MemoryStore."""
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
            partitions=partitions,
            layout=layout,
            on_layout_change=on_layout_change,
            lateness_s=lateness_s,
        )
    from service.store.memory import MemoryStore

    return MemoryStore(
        ttl_s=ttl_s,
        history_len=history_len,
        dedupe_horizon=dedupe_horizon,
        layout=layout,
        on_layout_change=on_layout_change,
        lateness_s=lateness_s,
    )


__all__ = [
    "ALERT_LOG_LEN",
    "INCIDENTS_KEPT",
    "NOVELTY_PRIOR",
    "NOVELTY_SPAN",
    "NOVELTY_WEIGHT",
    "TS",
    "VALUE",
    "AlertLog",
    "AppendResult",
    "IncidentRow",
    "LayoutChanged",
    "QueueStats",
    "Ranked",
    "Record",
    "Store",
    "StoreUnavailable",
    "StreamState",
    "Summary",
    "Window",
    "WorkItem",
    "completed_ends",
    "fill_leading",
    "forward_fill",
    "gcra",
    "layout_of",
    "make_store",
    "recent_novelty",
    "row_dtype",
]
