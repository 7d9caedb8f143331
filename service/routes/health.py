"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service import metrics
from service.deps import OpsKey, errors
from service.schemas import HealthResponse
from service.store import StoreUnavailable

# open unless SCJEPA_OPS_KEY_ROUTES puts a route behind an @ops key
router = APIRouter(tags=["health"], dependencies=[OpsKey], responses=errors(401))


@router.get("/healthz")
async def healthz() -> HealthResponse:
    """The process is up."""
    return HealthResponse(status="ok")


@router.get("/readyz", responses={503: {"model": HealthResponse}})
async def readyz(request: Request) -> JSONResponse:
    """Model loaded and warmed, batcher running, store reachable, active provider
    named; else 503."""
    slot = getattr(request.app.state, "slot", None)
    model = slot.current if slot is not None else None
    store = getattr(request.app.state, "store", None)
    scorer = getattr(request.app.state, "scorer", None)
    checks: dict[str, object] = {
        "model": model is not None and model.warmed,
        "provider": model.provider if model is not None else None,
        "batcher": scorer is not None and scorer.batcher.running,
    }
    try:
        if store is None:
            raise StoreUnavailable("no store")
        await store.ping()
        checks["store"] = True
    except StoreUnavailable as e:
        checks["store"] = False
        checks["store_error"] = str(e)
    ok = all(checks[k] for k in ("model", "provider", "batcher", "store"))
    body = HealthResponse(status="ok" if ok else "unavailable", checks=checks)
    code = status.HTTP_200_OK if ok else status.HTTP_503_SERVICE_UNAVAILABLE
    return JSONResponse(body.model_dump(), status_code=code)


@router.get("/metrics", response_class=Response)
async def prometheus(request: Request) -> Response:
    """Prometheus exposition format; the stream gauges are refreshed from the store."""
    store = getattr(request.app.state, "store", None)
    slot = getattr(request.app.state, "slot", None)
    if store is not None and slot is not None:
        try:
            s = await store.summary(slot.current.manifest.threshold)
            metrics.set_summary(s.streams, s.in_alert, s.max_risk)
        except StoreUnavailable:
            pass  # keep the last values; readyz reports the store
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
