"""GET /risk/{stream} answered ahead of FastAPI's routing: the request polled most.

A dashboard or a fleet of clients polls the latest risk; through the full stack (Starlette
middleware, routing, dependency injection, parameter validation) each poll cost several
times the store read it wraps, on the event loop that also serves ingest. This ASGI
wrapper answers the plain case itself: a stream name matching the route's pattern, a
valid X-API-Key (when keys are set), one store round trip (``Scorer.risk``), the same
JSON body and 404 as the route. Anything else (a bad name, a missing key, the store
unreachable, any other path) goes on to FastAPI unchanged, which answers it as before.
It reads the shared store only, so any replica answers, as through the route.
"""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from service.deps import key_ok
from service.store import StoreUnavailable

PREFIX = "/risk/"
STREAM = re.compile(r"[A-Za-z0-9._:\-]{1,128}")  # routes/risk.py StreamPath


class _Route:
    path = "/risk/{stream}"  # the label TimingAndLimits records


ROUTE = _Route()


class RiskReads:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "GET"
            and scope["path"].startswith(PREFIX)
            and await self._answer(scope, send)
        ):
            return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, send: Send) -> bool:
        stream = scope["path"][len(PREFIX) :]
        if not STREAM.fullmatch(stream):
            return False
        state = scope["app"].state
        scorer = getattr(state, "scorer", None)
        settings = getattr(state, "settings", None)
        if scorer is None or settings is None:
            return False
        if settings.api_keys:
            key = dict(scope["headers"]).get(b"x-api-key")
            if key is None or not key_ok(settings, key.decode("latin-1")):
                return False
        try:
            body = await scorer.risk(stream)
        except StoreUnavailable:
            return False
        status = 200
        if body is None:
            status = 404
            detail = f"unknown stream {stream!r} (no readings yet)"  # as the route
            body = json.dumps({"detail": detail}, separators=(",", ":")).encode()
        scope["route"] = ROUTE
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-length", str(len(body)).encode()),
                    (b"content-type", b"application/json"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return True
