"""The two hot requests answered ahead of FastAPI's routing: ``GET /risk/{stream}``
(polled by every dashboard and client) and ``POST /ingest`` (every reading).

Through the full stack (Starlette middleware, routing, dependency injection, parameter
validation) each request cost about as much again as the work it wraps, on the one
event loop. This ASGI wrapper answers the plain case itself with the same functions
the routes call: a valid stream name or body, a valid X-API-Key (when keys are set);
the same JSON bodies, status codes and route timing. Anything else goes on to FastAPI
unchanged (a body already read is replayed), which answers as before: a bad name,
a missing key, a body that fails validation or is over the reading limit (nothing has
been stored at that point), any other path. A store failure during an ingest that has
begun is answered here, as the route's handler would (503, nothing lost: appends are
atomic per stream and retries are deduplicated). Reads go to the shared store only,
so any replica answers.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from fastapi.exceptions import RequestValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.deps import key_ok
from service.inference import WindowError
from service.ingest_body import parse_ingest
from service.schemas import STREAM_PATTERN, IngestResponse
from service.store import StoreUnavailable

log = logging.getLogger(__name__)

PREFIX = "/risk/"
STREAM = re.compile(STREAM_PATTERN)  # fullmatch; the routes validate with the same


class _Route:
    def __init__(self, path: str) -> None:
        self.path = path  # the label TimingAndLimits records


RISK, INGEST = _Route("/risk/{stream}"), _Route("/ingest")


def _json(detail: Any) -> bytes:
    return json.dumps({"detail": detail}, separators=(",", ":")).encode()


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    extra: list[tuple[bytes, bytes]] = (),  # type: ignore[assignment]
) -> None:
    headers = [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", b"application/json"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FastPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["method"] == "GET" and scope["path"].startswith(PREFIX):
                if await self._risk(scope, send):
                    return
            elif scope["method"] == "POST" and scope["path"] == "/ingest":
                await self._ingest(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _ready(scope: Scope) -> tuple[Any, Any] | None:
        """(scorer, settings) once started and when the key (if any) is valid."""
        state = scope["app"].state
        scorer = getattr(state, "scorer", None)
        settings = getattr(state, "settings", None)
        if scorer is None or settings is None:
            return None
        if settings.api_keys:
            key = dict(scope["headers"]).get(b"x-api-key")
            if key is None or not key_ok(settings, key.decode("latin-1")):
                return None
        return scorer, settings

    async def _risk(self, scope: Scope, send: Send) -> bool:
        stream = scope["path"][len(PREFIX) :]
        ready = self._ready(scope) if STREAM.fullmatch(stream) else None
        if ready is None:
            return False
        try:
            body = await ready[0].risk(stream)
        except StoreUnavailable:
            return False  # the route answers 503
        scope["route"] = RISK
        if body is None:
            detail = f"unknown stream {stream!r} (no readings yet)"  # as the route
            await _respond(send, 404, _json(detail))
        else:
            await _respond(send, 200, body)
        return True

    async def _ingest(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        ready = self._ready(scope)
        if ready is None:
            await self.app(scope, replay, send)
            return
        scorer, settings = ready
        try:
            items, batch_form = parse_ingest(raw)
        except RequestValidationError:
            await self.app(scope, replay, send)  # the route answers 422 the same way
            return
        n = sum(len(item.ts) for item in items)
        arrays, problems = (
            scorer.prepare(items, batch_form=batch_form)
            if n <= settings.max_readings_per_request
            else ([], [None])
        )
        if problems:  # 413 or 422, from the route: nothing was stored
            await self.app(scope, replay, send)
            return
        scope["route"] = INGEST
        try:
            results = await scorer.ingest([item.stream for item in items], arrays)
        except StoreUnavailable as e:  # as middleware.store_unavailable
            log.warning("store unavailable: %s", e)
            detail = f"store unavailable, retry later ({e})"
            await _respond(send, 503, _json(detail), ((b"retry-after", b"1"),))
            return
        except WindowError as e:  # as middleware.bad_window
            await _respond(send, 422, _json(str(e)))
            return
        body = IngestResponse(results=results).model_dump_json().encode()
        await _respond(send, 200, body)
