"""The FastAPI app: ``create_app(settings)``; the lifespan loads and warms the model,
opens the store and starts the micro-batcher.

    scjepa serve --artifact artifacts/msl            # or:
    uvicorn service.main:create_app --factory --port 8000
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import metrics
from service.batcher import Batcher
from service.config import Settings
from service.inference import WindowError, load_model
from service.routes import health, ingest, models, risk
from service.scoring import Scorer
from service.store import StoreUnavailable, make_store

log = logging.getLogger(__name__)


class TimingAndLimits:
    """ASGI middleware: request latency by route template; 413 for oversized bodies."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        code = 500
        length = dict(scope["headers"]).get(b"content-length")
        if (
            length is not None
            and length.isdigit()
            and int(length) > self.max_body_bytes
        ):
            code = 413
            body = JSONResponse(
                {
                    "detail": f"body over {self.max_body_bytes} bytes (SCJEPA_MAX_BODY_BYTES)"
                },
                status_code=413,
            )
            await body(scope, receive, send)
        else:

            async def send_status(message: Message) -> None:
                nonlocal code
                if message["type"] == "http.response.start":
                    code = message["status"]
                await send(message)

            try:
                await self.app(scope, receive, send_status)
            finally:
                route = scope.get("route")
                metrics.REQUEST_LATENCY.labels(
                    method=scope["method"],
                    route=getattr(route, "path", "unmatched"),
                    status=str(code),
                ).observe(time.perf_counter() - start)
        if code == 413:
            metrics.REQUEST_LATENCY.labels(
                method=scope["method"], route="unmatched", status="413"
            ).observe(time.perf_counter() - start)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        model = load_model(
            settings.artifact,
            provider=settings.provider,
            precision=settings.precision,
            intra_op_threads=settings.intra_op_threads,
            inter_op_threads=settings.inter_op_threads,
            max_batch=settings.max_batch,
        )
        model.warmup()
        m = model.manifest
        metrics.PROVIDER.info(
            {"provider": model.provider, "model": m.name, "version": m.version,
             "precision": model.precision}
        )  # fmt: skip
        log.info("loaded %s %s on %s", m.name, m.version, model.provider)
        store = make_store(
            settings.redis_url,
            prefix=settings.key_prefix,
            ttl_s=settings.stream_ttl_s,
            history_len=settings.history_len,
            dedupe_horizon=settings.dedupe_horizon,
            timeout_s=settings.redis_timeout_s,
        )
        batcher = Batcher(
            model.score,
            max_batch=settings.max_batch,
            max_wait_s=settings.max_wait_ms / 1000,
        )
        batcher.start()
        app.state.settings = settings
        app.state.model = model
        app.state.store = store
        app.state.scorer = Scorer(model, store, batcher, settings)
        try:
            yield
        finally:
            await batcher.stop()
            await store.close()

    app = FastAPI(
        title="SC-JEPA risk service",
        summary="Per-stream risk that the next window of readings holds an anomaly.",
        version="1",
        lifespan=lifespan,
    )
    app.add_middleware(TimingAndLimits, max_body_bytes=settings.max_body_bytes)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StoreUnavailable, _store_unavailable)
    app.add_exception_handler(WindowError, _bad_window)
    app.add_exception_handler(Exception, _internal)
    for r in (ingest.router, risk.router, models.router, health.router):
        app.include_router(r)
    return app


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each bad field (loc) and why (msg); the input is not echoed back
    (it can be large, or hold infinities that JSON cannot carry)."""
    assert isinstance(exc, RequestValidationError)
    detail = [
        {
            "loc": list(e.get("loc", ())),
            "msg": e.get("msg", ""),
            "type": e.get("type", ""),
        }
        for e in exc.errors()
    ]
    return JSONResponse({"detail": detail}, status_code=422)


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("store unavailable: %s", exc)
    return JSONResponse(
        {"detail": f"store unavailable, retry later ({exc})"},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": "1"},
    )


async def _bad_window(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=422)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal error"}, status_code=500)
