"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    disable_created_metrics,
    generate_latest,
)

from service import incidents, metrics
from service.auth import DEFAULT_TENANT
from service.deps import OpsKey, errors
from service.schemas import HealthResponse
from service.store import StoreUnavailable

# no `<counter>_created` / `<histogram>_created` series: each would add one sample per
# labelled child (prometheus_client's default), doubling what a scrape carries for the
# counters; Prometheus needs none of them (read at collection, so this applies to every
# scrape of this process)
disable_created_metrics()  # type: ignore[no-untyped-call]

# open unless SCJEPA_OPS_KEY_ROUTES puts a route behind an @ops key
router = APIRouter(tags=["health"], dependencies=[OpsKey], responses=errors(401))


@router.get("/healthz")
async def healthz() -> HealthResponse:
    """The process is up."""
    return HealthResponse(status="ok")


@router.get("/readyz", responses={503: {"model": HealthResponse}})
async def readyz(request: Request) -> JSONResponse:
    """Model loaded and warmed, scoring running (roles all and scorer), store
    reachable AND accepting writes (a Redis at maxmemory refuses them: 503), active
    provider named; else 503."""
    state = request.app.state
    slot = getattr(state, "slot", None)
    model = slot.current if slot is not None else None
    store = getattr(state, "store", None)
    checks: dict[str, object] = {
        "model": model is not None and model.warmed,
        "provider": model.provider if model is not None else None,
        "batcher": _scoring_runs(state),
    }
    try:
        if store is None:
            raise StoreUnavailable("no store")
        await store.ping()  # Redis: a tiny write with a 10 s TTL
        checks["store"] = True
    except StoreUnavailable as e:
        checks["store"] = False
        checks["store_error"] = str(e)
    ok = all(checks[k] for k in ("model", "provider", "batcher", "store"))
    body = HealthResponse(status="ok" if ok else "unavailable", checks=checks)
    code = status.HTTP_200_OK if ok else status.HTTP_503_SERVICE_UNAVAILABLE
    return JSONResponse(body.model_dump(), status_code=code)


def _scoring_runs(state: Any) -> bool:
    """The scoring worker runs (role scorer / all); role api scores nothing: true.
    Without a worker (a process that scores in its ingest calls) its batcher runs."""
    worker = getattr(state, "worker", None)
    if worker is not None:
        return bool(worker.running)
    if getattr(state, "role", "all") == "api":
        return True
    batcher = getattr(getattr(state, "scorer", None), "batcher", None)
    return batcher is not None and bool(batcher.running)


def _top(state: Any) -> int:
    """How many streams scjepa_top_stream_risk and scjepa_top_stream_novelty name:
    none where tenants' keys are set and /metrics is open, as any caller would learn
    other tenants' stream names, which no tenant route tells (SCJEPA_OPS_KEY_ROUTES
    naming /metrics lifts that)."""
    settings = state.settings
    door = getattr(state, "door", None)
    keyed = door is not None and not door.keys.open
    if keyed and "/metrics" not in settings.ops_key_routes:
        return 0
    return int(settings.top_streams)


@router.get("/metrics", response_class=Response)
async def prometheus(request: Request) -> Response:
    """Prometheus exposition format; the stream gauges are refreshed from the store,
    and the work-queue gauges too where no scoring worker refreshes them (role api).
    The streams of highest recent novelty only for a model with the input-drift
    monitor (one reloaded without it leaves recent novelties of the previous model).
    Each tenant's live streams against the stream quota (one read per tenant the keys
    name), its streams in alert and its highest latest risk, and its incidents
    reported in the last 30 days by outcome (one read per tenant)."""
    state = request.app.state
    store = getattr(state, "store", None)
    slot = getattr(state, "slot", None)
    if store is not None and slot is not None:
        try:
            model = slot.current
            manifest = model.manifest
            door = getattr(state, "door", None)
            tenants = door.keys.table.tenants if door is not None else []
            own = {t: model.manifest_for(t).threshold for t in model.tenants}
            s = await store.summary(manifest.threshold, _top(state), tenants, own)
            drift = s.top_novelty if manifest.novelty is not None else ()
            metrics.set_summary(s.streams, s.in_alert, s.max_risk, s.top, drift)
            named = tenants or [DEFAULT_TENANT]  # an open service's one tenant
            since = time.time() - incidents.SPAN_S
            got = await store.incident_outcomes(named, since)
            metrics.set_incidents(named, [incidents.tally(g) for g in got])
            if door is not None:
                live = await store.tenant_streams(tenants)
                quota = state.settings.max_streams_per_tenant
                by, high = dict(s.in_alert_by_tenant), dict(s.max_risk_by_tenant)
                metrics.set_tenant_streams(tenants, live, quota, by, high)
            if getattr(state, "worker", None) is None:
                metrics.set_queue(await store.queue_stats())
        except StoreUnavailable:
            pass  # keep the last values; readyz reports the store
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
