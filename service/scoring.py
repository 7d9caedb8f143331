"""What an ingest call does: store readings, cut completed windows, score them in the
shared micro-batch, keep the risk records. Knows the store, batcher and model; no HTTP.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from pydantic_core import from_json, to_json

from service import metrics
from service.batcher import Batcher
from service.config import Settings
from service.inference import Model, Scores
from service.ingest_body import StreamBody
from service.manifest import now_utc
from service.schemas import (
    ChannelShare,
    ModelRef,
    RiskHistory,
    RiskRecord,
    StreamIngestResult,
)
from service.store import AppendResult, Store, Window, fill_leading

if TYPE_CHECKING:
    from service.reload import ModelSlot

FLOAT32_MAX = float(np.finfo(np.float32).max)
# what GET /risk copies from the newest risk record, in RiskResponse's field order
RISK_FIELDS = (
    "risk",
    "threshold",
    "alert",
    "window_start",
    "window_end",
    "top_channels",
    "model",
    "computed_at",
)


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
            f"tenant {tenant!r} already has {limit} live streams, the limit "
            f"(SCJEPA_MAX_STREAMS_PER_TENANT); new stream(s) {streams[:5]} refused: "
            "a stream idle for SCJEPA_STREAM_TTL_S frees its place"
        )
        self.streams = streams


class Scorer:
    def __init__(
        self,
        slot: ModelSlot,
        store: Store,
        batcher: Batcher,
        settings: Settings,
    ) -> None:
        self.slot = slot
        self.store = store
        self.batcher = batcher
        self.settings = settings

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
            bad = next((i for i, r in enumerate(rows) if len(r) != v), None)
            if bad is not None:
                errors.append(
                    _error(
                        [*base, "readings", bad, "values"],
                        f"expected {v} values (the model's input channels), got "
                        f"{len(rows[bad])}",
                        "channel_count",
                    )
                )
                continue
            x = np.array(rows, dtype=np.float64)  # None -> NaN (missing)
            over = np.abs(x) > FLOAT32_MAX  # NaN compares False
            if over.any():
                i, j = (int(a) for a in np.argwhere(over)[0])
                what = (
                    f"is {x[i, j]}: infinite values are refused"
                    if np.isinf(x[i, j])
                    else f"= {x[i, j]:g} overflows float32 (the model's type)"
                )
                errors.append(
                    _error(
                        [*base, "readings", i, "values", j],
                        f"values[{j}] {what}",
                        "value_error",
                    )
                )
                continue
            ts = np.array(item.ts, dtype=np.float64)
            if ts[-1] > horizon:  # increasing: the last is the latest
                i = int(np.argmax(ts > horizon))
                errors.append(
                    _error(
                        [*base, "readings", i, "ts"],
                        f"ts = {ts[i]:.17g} is more than "
                        f"{self.settings.max_future_s:g} s ahead of the service's "
                        "clock (SCJEPA_MAX_FUTURE_S): it would make every later "
                        "reading of the stream late",
                        "ts_in_future",
                    )
                )
                continue
            arrays.append(Readings(ts, x.astype(np.float32)))
        return arrays, errors

    # -- ingest
    async def ingest(
        self, tenant: str, streams: list[str], arrays: list[Readings]
    ) -> list[StreamIngestResult]:
        """Raises :class:`StreamQuotaExceeded` (nothing stored) when a new stream
        would take the tenant past its quota."""
        limit = self.settings.max_streams_per_tenant
        refused = await self.store.register(tenant, streams, limit)
        if refused:
            metrics.REFUSED.labels(reason="stream_quota").inc()
            raise StreamQuotaExceeded(tenant, refused, limit)
        appended = await self.store.append_many(
            tenant,
            [(s, x.ts, x.values) for s, x in zip(streams, arrays, strict=True)],
            window=self.window,
            hop=self.hop,
            max_windows=self.settings.max_windows_per_ingest,
        )
        for res in appended:
            self._count(res)
        windows = [
            (s, w)
            for s, res in zip(streams, appended, strict=True)
            for w in res.windows
        ]
        records: dict[str, list[RiskRecord]] = {}
        if windows:
            x = np.stack([fill_leading(w.values) for _, w in windows])
            scores = await self.batcher.score(x)
            for j, (stream, w) in enumerate(windows):
                records.setdefault(stream, []).append(self._record(w, scores, j))
            await self.store.put_risks_many(
                tenant,
                [
                    (s, [(r.n, r.model_dump_json()) for r in recs], recs[-1].risk)
                    for s, recs in records.items()
                ],
            )
        results = []
        for stream, res in zip(streams, appended, strict=True):
            recs = records.get(stream, [])
            results.append(
                StreamIngestResult(
                    stream=stream,
                    accepted=res.accepted,
                    duplicates=res.duplicates,
                    rejected=res.late,
                    readings_total=res.total,
                    windows_completed=res.completed,
                    windows_scored=len(recs),
                    risk=recs[-1].risk if recs else None,
                    alert=recs[-1].alert if recs else None,
                    window_n=recs[-1].n if recs else None,
                    window_end=recs[-1].window_end if recs else None,
                    model=recs[-1].model if recs else None,
                )
            )
        return results

    def _count(self, res: AppendResult) -> None:
        metrics.READINGS.labels(outcome="accepted").inc(res.accepted)
        metrics.READINGS.labels(outcome="duplicate").inc(res.duplicates)
        metrics.READINGS.labels(outcome="rejected").inc(res.late)
        metrics.WINDOWS_SKIPPED.inc(res.completed - len(res.windows))

    def _record(self, w: Window, scores: Scores, j: int) -> RiskRecord:
        """The risk record of window ``w``, row ``j`` of the batch ``scores``, named
        after the model that scored it."""
        by = scores.by or self.model
        m = by.manifest
        risk, contrib = float(scores.risk[j]), scores.contrib[j]
        order = np.argsort(-contrib, kind="stable")[: self.settings.top_channels]
        top = [
            ChannelShare(name=m.channels[i], share=round(float(contrib[i]), 6))
            for i in order
            if contrib[i] > 0
        ]
        metrics.WINDOWS_SCORED.inc()
        return RiskRecord(
            n=w.n,
            risk=risk,
            threshold=m.threshold,
            alert=risk >= m.threshold,
            window_start=w.start_ts,
            window_end=w.end_ts,
            top_channels=top,
            codes=[int(c) for c in scores.codes[j]],
            model=ModelRef(name=m.name, version=m.version),
            computed_at=now_utc(),
        )

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
                "threshold": self.model.manifest.threshold,
                "alert": None,
                "window_start": None,
                "window_end": None,
                "top_channels": [],
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
            out |= {k: rec[k] for k in RISK_FIELDS}
        return to_json(out)

    async def history(self, tenant: str, stream: str, limit: int) -> RiskHistory | None:
        raw = await self.store.risks(tenant, stream, limit)
        if not raw and await self.store.state(tenant, stream) is None:
            return None
        return RiskHistory(
            stream=stream, items=[RiskRecord.model_validate_json(r) for r in raw]
        )
