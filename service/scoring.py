"""What an ingest call does: store readings, cut completed windows, score them in the
shared micro-batch, keep the risk records. Knows the store, batcher and model; no HTTP.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from service import metrics
from service.batcher import Batcher
from service.config import Settings
from service.inference import Model, Scores
from service.manifest import now_utc
from service.schemas import (
    ChannelShare,
    ModelRef,
    RiskHistory,
    RiskRecord,
    RiskResponse,
    StreamIngestResult,
    StreamReadings,
)
from service.store import AppendResult, Store, Window, fill_leading


class Scorer:
    def __init__(
        self, model: Model, store: Store, batcher: Batcher, settings: Settings
    ) -> None:
        self.model = model
        self.store = store
        self.batcher = batcher
        self.settings = settings
        self.window = model.window
        self.hop = settings.hop or model.manifest.hop
        m = model.manifest
        self.ref = ModelRef(name=m.name, version=m.version)

    # -- validation that needs the model (pydantic did the rest)
    def problems(
        self, items: list[StreamReadings], batch_form: bool
    ) -> list[dict[str, Any]]:
        """FastAPI-style error entries for readings whose channel count is wrong."""
        errors = []
        for k, item in enumerate(items):
            base: list[str | int] = ["body", "streams", k] if batch_form else ["body"]
            for i, r in enumerate(item.readings):
                if len(r.values) != self.model.n_channels:
                    errors.append(
                        {
                            "loc": [*base, "readings", i, "values"],
                            "msg": f"expected {self.model.n_channels} values (the "
                            f"model's input channels), got {len(r.values)}",
                            "type": "channel_count",
                        }
                    )
                    break  # one error per stream is enough
        return errors

    # -- ingest
    async def ingest(self, items: list[StreamReadings]) -> list[StreamIngestResult]:
        appended = await asyncio.gather(*(self._append(item) for item in items))
        windows = [
            (item.stream, w)
            for item, res in zip(items, appended, strict=True)
            for w in res.windows
        ]
        records: dict[str, list[RiskRecord]] = {}
        if windows:
            x = np.stack([fill_leading(w.values) for _, w in windows])
            scores = await self.batcher.score(x)
            for j, (stream, w) in enumerate(windows):
                records.setdefault(stream, []).append(self._record(w, scores, j))
            await asyncio.gather(
                *(
                    self.store.put_risks(
                        s, [(r.n, r.model_dump_json()) for r in recs], recs[-1].risk
                    )
                    for s, recs in records.items()
                )
            )
        results = []
        for item, res in zip(items, appended, strict=True):
            recs = records.get(item.stream, [])
            results.append(
                StreamIngestResult(
                    stream=item.stream,
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
                )
            )
        return results

    async def _append(self, item: StreamReadings) -> AppendResult:
        res = await self.store.append(
            item.stream,
            [r.ts for r in item.readings],
            [r.values for r in item.readings],
            window=self.window,
            hop=self.hop,
            max_windows=self.settings.max_windows_per_ingest,
        )
        metrics.READINGS.labels(outcome="accepted").inc(res.accepted)
        metrics.READINGS.labels(outcome="duplicate").inc(res.duplicates)
        metrics.READINGS.labels(outcome="rejected").inc(res.late)
        metrics.WINDOWS_SKIPPED.inc(res.completed - len(res.windows))
        return res

    def _record(self, w: Window, scores: Scores, j: int) -> RiskRecord:
        """The risk record of window ``w``, row ``j`` of the batch ``scores``."""
        m = self.model.manifest
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
            model=self.ref,
            computed_at=now_utc(),
        )

    # -- reads
    async def risk(self, stream: str) -> RiskResponse | None:
        state, latest = await asyncio.gather(
            self.store.state(stream), self.store.risks(stream, 1)
        )
        if state is None and not latest:
            return None
        total = state.total if state else 0
        buffered = state.buffered if state else 0
        threshold = self.model.manifest.threshold
        if not latest:
            return RiskResponse(
                stream=stream,
                status="warming_up",
                readings_total=total,
                readings_buffered=buffered,
                progress=round(min(buffered / self.window, 1.0), 4),
                threshold=threshold,
                model=self.ref,
            )
        rec = RiskRecord.model_validate_json(latest[0])
        return RiskResponse(
            stream=stream,
            status="ok",
            readings_total=max(total, rec.n),
            readings_buffered=buffered,
            progress=1.0,
            risk=rec.risk,
            threshold=rec.threshold,
            alert=rec.alert,
            window_start=rec.window_start,
            window_end=rec.window_end,
            top_channels=rec.top_channels,
            model=rec.model,
            computed_at=rec.computed_at,
        )

    async def history(self, stream: str, limit: int) -> RiskHistory | None:
        raw = await self.store.risks(stream, limit)
        if not raw and await self.store.state(stream) is None:
            return None
        return RiskHistory(
            stream=stream, items=[RiskRecord.model_validate_json(r) for r in raw]
        )
