"""HTTP plumbing: request timing by route template, the body-size limit, and error
handlers that always answer JSON (never a stack trace)."""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import metrics
from service.fastpaths import FastPaths
from service.inference import WindowError
from service.store import StoreUnavailable

log = logging.getLogger(__name__)


class TimingAndLimits:
    """Observe request latency labelled by route template (``/risk/{stream}``, never the
    raw path); answer 413 to a body whose Content-Length is over the limit.

    Chunked bodies carry no length: for them ``max_readings_per_request`` is the bound.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        code = 500  # what an exception escaping the app becomes

        async def send_status(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            length = dict(scope["headers"]).get(b"content-length", b"")
            if length.isdigit() and int(length) > self.max_body_bytes:
                limit = f"{self.max_body_bytes} bytes (SCJEPA_MAX_BODY_BYTES)"
                too_large = JSONResponse(
                    {"detail": f"request body over {limit}"},
                    status_code=413,
                )
                await too_large(scope, receive, send_status)
            else:
                await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            metrics.REQUEST_LATENCY.labels(
                method=scope["method"], route=route, status=str(code)
            ).observe(time.perf_counter() - start)


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each bad field (``loc``) and why (``msg``); the input is not echoed
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


async def store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("store unavailable: %s", exc)
    return JSONResponse(
        {"detail": f"store unavailable, retry later ({exc})"},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": "1"},
    )


async def bad_window(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=422)


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal error"}, status_code=500)


def install(app: FastAPI, *, max_body_bytes: int) -> None:
    app.add_middleware(FastPaths)  # inside the timing: its requests are observed too
    app.add_middleware(TimingAndLimits, max_body_bytes=max_body_bytes)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StoreUnavailable, store_unavailable)
    app.add_exception_handler(WindowError, bad_window)
    app.add_exception_handler(Exception, internal_error)
