"""What an ingest call does: store readings and queue the windows they complete (one
atomic store step), optionally wait for those windows' scores; and what GET /risk reads.
Knows the store and the model's layout; no HTTP. Scoring itself is the scorer tier's
(service/worker.py), in this process (role all) or another (role scorer).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from pydantic_core import from_json, to_json

from service import metrics
from service.batcher import Batcher
from service.config import Settings
from service.inference import Model
from service.ingest_body import StreamBody
from service.schemas import (
    ModelRef,
    RiskHistory,
    RiskRecord,
    StreamIngestResult,
)
from service.store import AppendResult, Store, StoreUnavailable
from service.worker import ScoredBus

if TYPE_CHECKING:
    from service.reload import ModelSlot

FLOAT32_MAX = float(np.finfo(np.float32).max)
RECHECK_S = 0.5  # a waiting ingest call re-reads the store at least this often
# what GET /risk copies from the newest risk record, in RiskResponse's field order
# (recent_novelty, the stream's, from its state: in its place, set afterwards)
RISK_FIELDS = (
    "risk",
    "threshold",
    "alert",
    "window_start",
    "window_end",
    "top_channels",
    "novelty",
    "recent_novelty",
    "model",
    "computed_at",
)


_SHED = metrics.WINDOWS_SHED.labels(reason="backpressure")


class Readings(NamedTuple):
    """One stream's readings of a request: ts (R,) float64, values (R, V) float32 with
    NaN for a missing value."""

    ts: np.ndarray
    values: np.ndarray


def _error(loc: list[str | int], msg: str, type_: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": type_}


class StreamQuotaExceeded(Exception):
    """New streams of a tenant that already has its quota of live streams."""

    def __init__(self, tenant: str, streams: list[str], limit: int) -> None:
        super().__init__(
            f"new stream(s) {streams[:5]} would take tenant {tenant!r} past its limit "
            f"of {limit} live streams (SCJEPA_MAX_STREAMS_PER_TENANT): refused; a "
            "stream idle for SCJEPA_STREAM_TTL_S frees its place"
        )
        self.streams = streams


class Scorer:
    def __init__(
        self,
        slot: ModelSlot,
        store: Store,
        settings: Settings,
        batcher: Batcher | None = None,
        bus: ScoredBus | None = None,
    ) -> None:
        self.slot = slot
        self.store = store
        self.settings = settings
        self.batcher = batcher  # this process's scorer's (None: role api)
        self.bus = bus or ScoredBus()  # wakes ?wait= calls when windows are scored

    @property
    def model(self) -> Model:
        """The model in service now (a reload swaps it; window and channels stay)."""
        return self.slot.current

    @property
    def window(self) -> int:
        return self.model.window

    @property
    def hop(self) -> int:
        return self.settings.hop or self.model.manifest.hop

    @property
    def ref(self) -> ModelRef:
        return ModelRef(
            name=self.model.manifest.name, version=self.model.manifest.version
        )

    # -- validation that needs the model (the schema did the rest)
    def prepare(
        self, items: list[StreamBody], batch_form: bool
    ) -> tuple[list[Readings], list[dict[str, Any]]]:
        """Each stream's readings as arrays, and FastAPI-style error entries (one per
        stream at most) for a wrong channel count or a value the model cannot take.

        Vectorised: one numpy conversion per stream, not a Python loop per value.
        """
        arrays, errors = [], []
        v = self.model.n_channels
        horizon = time.time() + self.settings.max_future_s
        for k, item in enumerate(items):
            base: list[str | int] = ["body", "streams", k] if batch_form else ["body"]
            rows = item.rows
            columns = isinstance(rows, np.ndarray)  # MessagePack: ts and values arrays
            at = [*base] if columns else [*base, "readings"]
            if isinstance(rows, np.ndarray):
                got, where = rows.shape[1], [*at, "values"]
            elif set(map(len, rows)) != {v}:
                bad = next(i for i, r in enumerate(rows) if len(r) != v)
                got, where = len(rows[bad]), [*at, bad, "values"]
            else:
                got = v
            if got != v:
                errors.append(
                    _error(
                        where,
                        f"expected {v} values{' per reading' if columns else ''} (the model's "
                        f"input channels), got {got}",
                        "channel_count",
                    )
                )
                continue
            # None (JSON) -> NaN: missing; float32 arrays as they came
            x = rows if isinstance(rows, np.ndarray) else np.array(rows, np.float64)
            over = np.abs(x) > FLOAT32_MAX  # NaN compares False
            if over.any():
                i, j = (int(a) for a in np.argwhere(over)[0])
                what = (
                    f"is {x[i, j]}: infinite values are refused"
                    if np.isinf(x[i, j])
                    else f"= {x[i, j]:g} overflows float32 (the model's type)"
                )
                loc = [*at, "values", i, j] if columns else [*at, i, "values", j]
                errors.append(_error(loc, f"values[{j}] {what}", "value_error"))
                continue
            ts = np.array(item.ts, dtype=np.float64)
            if ts[-1] > horizon:  # increasing: the last is the latest
                i = int(np.argmax(ts > horizon))
                errors.append(
                    _error(
                        [*at, "ts", i] if columns else [*at, i, "ts"],
                        f"ts = {ts[i]:.17g} is more than "
                        f"{self.settings.max_future_s:g} s ahead of the service's "
                        "clock (SCJEPA_MAX_FUTURE_S): it would make every later "
                        "reading of the stream late",
                        "ts_in_future",
                    )
                )
                continue
            arrays.append(Readings(ts, x.astype(np.float32, copy=False)))
        return arrays, errors

    # -- ingest
    async def ingest(
        self, tenant: str, streams: list[str], arrays: list[Readings], wait: float = 0.0
    ) -> list[StreamIngestResult]:
        """Store the readings and queue the windows they complete; with ``wait`` > 0,
        wait up to that many seconds for those windows' risk records. Raises
        :class:`StreamQuotaExceeded` (nothing stored, no stream registered) when a
        new stream would take the tenant past its quota, LayoutChanged (nothing
        stored) when a stream was built for another model layout and the policy
        refuses: a request of several streams has them all checked first (one
        read), so that none of them is stored or registered. A stream deleted through
        another replica since this one registered it (its memo) is registered again
        once its append has found it gone and stored nothing; refused then, the
        request's other streams are stored already."""
        if len(streams) > 1:  # one stream: its append script refuses it atomically
            await self.store.refuse_layouts(tenant, streams)
        limit = self.settings.max_streams_per_tenant
        refused = await self.store.register(tenant, streams, limit)
        if refused:
            metrics.REFUSED.labels(reason="stream_quota", tenant=tenant).inc()
            raise StreamQuotaExceeded(tenant, refused, limit)
        news = self.bus.delivered  # news from here on may be of these windows
        items = [(s, x.ts, x.values) for s, x in zip(streams, arrays, strict=True)]
        appended = await self._append(tenant, items)
        redo = [i for i, res in enumerate(appended) if res.unregistered]
        if redo:  # deleted through another replica since this one registered them
            names = [streams[i] for i in redo]
            refused = await self.store.register(tenant, names, limit)
            if refused:  # the request's other streams are stored already
                metrics.REFUSED.labels(reason="stream_quota", tenant=tenant).inc()
                raise StreamQuotaExceeded(tenant, refused, limit)
            again = await self._append(tenant, [items[i] for i in redo])
            for i, res in zip(redo, again, strict=True):
                appended[i] = res
        for res in appended:
            self._count(tenant, res)
        records: dict[str, dict[int, str]] = {}
        scored: dict[str, int] = {}
        if wait > 0:
            due = {s: r.queued for s, r in zip(streams, appended, strict=True)}
            records, scored = await self._wait(
                tenant, {s: q for s, q in due.items() if q}, wait, news
            )
        results = []
        for stream, res in zip(streams, appended, strict=True):
            recs = records.get(stream, {})
            newest = from_json(recs[max(recs)]) if recs else None
            results.append(
                StreamIngestResult(
                    stream=stream,
                    accepted=res.accepted,
                    duplicates=res.duplicates,
                    rejected=res.late,
                    rejected_reason=self._late_reason() if res.late else None,
                    held=res.held,
                    readings_total=res.total,
                    windows_completed=res.completed,
                    windows_queued=len(res.queued),
                    windows_shed=res.shed,
                    windows_scored=scored.get(stream, 0),
                    risk=newest["risk"] if newest else None,
                    alert=newest["alert"] if newest else None,
                    window_n=newest["n"] if newest else None,
                    window_end=newest["window_end"] if newest else None,
                    model=ModelRef(**newest["model"]) if newest else None,
                )
            )
        return results

    async def _append(
        self, tenant: str, items: list[tuple[str, np.ndarray, np.ndarray]]
    ) -> list[AppendResult]:
        """The store's append of ``items`` with this scorer's windows and queue cap."""
        return await self.store.append_many(
            tenant,
            items,
            window=self.window,
            hop=self.hop,
            max_queued=self.settings.max_queued_windows,
        )

    async def _wait(
        self, tenant: str, due: dict[str, list[int]], wait: float, news: int
    ) -> tuple[dict[str, dict[int, str]], dict[str, int]]:
        """The risk records of the ``due`` windows (stream -> numbers), and per stream
        how many of them are known scored: read, or reported by news of scored windows
        (whose record the history cap, SCJEPA_HISTORY_LEN, may already have trimmed).
        Returns when each window is known scored, or when ``wait`` seconds have passed
        (or the store fails: the readings are stored and the windows queued, so the
        answer stands). Woken by the news (this process's scorer, or any through the
        store), and re-reads the store every RECHECK_S in case news was lost. ``news``:
        the bus's delivery count before the windows were queued; when no news came
        since, none of them can be scored unreported (the waiter is registered before
        the next news is delivered, on this loop), so the first read is skipped: a
        round trip fewer for most calls."""
        got: dict[str, dict[int, str]] = {s: {} for s in due}
        unread = {s: set(ns) for s, ns in due.items()}  # no record read yet
        deadline = time.monotonic() + wait
        # w.left: not known scored yet (neither read nor reported; the news empties it)
        w = self.bus.register(tenant, {s: set(ns) for s, ns in due.items()})
        try:
            if unread and self.bus.delivered == news:  # none scored yet: news first
                await w.wait(min(wait, RECHECK_S))
                w.done.clear()
            while unread:
                try:
                    found = await self.store.scored(
                        tenant, [(s, sorted(ns)) for s, ns in unread.items()]
                    )
                except StoreUnavailable:
                    break
                for (stream, ns), recs in zip(list(unread.items()), found, strict=True):
                    got[stream].update(recs)
                    ns.difference_update(recs)
                    if not ns:
                        del unread[stream]
                    left = w.left.get(stream)
                    if left is not None:
                        left.difference_update(recs)
                        if not left:
                            del w.left[stream]
                remaining = deadline - time.monotonic()
                if not w.left or remaining <= 0:
                    break
                await w.wait(min(remaining, RECHECK_S))
                w.done.clear()
        finally:
            self.bus.unregister(w)
        return got, {s: len(ns) - len(w.left.get(s, ())) for s, ns in due.items()}

    def _late_reason(self) -> str:
        lateness = self.settings.allowed_lateness_s
        return (
            f"late: older than the stream's newest reading by more than {lateness:g} s "
            "(SCJEPA_ALLOWED_LATENESS_S), and not a duplicate"
        )

    def _count(self, tenant: str, res: AppendResult) -> None:
        counts = (res.accepted, res.duplicates, res.late, res.shed)
        children = (*metrics.tenant_readings(tenant), _SHED)
        for child, n in zip(children, counts, strict=True):
            if n:
                child.inc(n)

    # -- reads
    async def risk(self, tenant: str, stream: str) -> bytes | None:
        """GET /risk's body (a :class:`RiskResponse`, as JSON), None for an unknown
        stream. One store round trip; the stored record is re-keyed as plain JSON,
        no pydantic models on this path (it is the one polled most)."""
        state, latest = await self.store.latest(tenant, stream)
        if state is None and latest is None:
            return None
        total = state.total if state else 0
        buffered = state.buffered if state else 0
        out: dict[str, Any] = {"stream": stream}
        if latest is None:
            out |= {
                "status": "warming_up",
                "readings_total": total,
                "readings_buffered": buffered,
                "progress": round(min(buffered / self.window, 1.0), 4),
                "risk": None,
                "threshold": self.model.manifest_for(tenant).threshold,
                "alert": None,
                "window_start": None,
                "window_end": None,
                "top_channels": [],
                "novelty": None,
                "recent_novelty": None,
                "model": self.ref.model_dump(),
                "computed_at": None,
            }
        else:
            rec = from_json(latest)
            out |= {
                "status": "ok",
                "readings_total": max(total, rec["n"]),
                "readings_buffered": buffered,
                "progress": 1.0,
            }
            # .get: a record written before a field existed (novelty) reads null
            out |= {k: rec.get(k) for k in RISK_FIELDS}
            # a state written before it was kept, or by a model without the
            # monitor, has none: null
            out["recent_novelty"] = state.novelty if state else None
        return to_json(out)

    async def history(self, tenant: str, stream: str, limit: int) -> RiskHistory | None:
        raw = await self.store.risks(tenant, stream, limit)
        if not raw and await self.store.state(tenant, stream) is None:
            return None
        return RiskHistory(
            stream=stream, items=[RiskRecord.model_validate_json(r) for r in raw]
        )
