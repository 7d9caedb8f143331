"""ASGI adapter: POST /ingest and GET /risk/{stream} answered by service.handlers
ahead of FastAPI's routing, which costs about as much again as the work it wraps
(docs/notebook/benchmarks.md, Service). Installed when ``SCJEPA_FAST_PATHS`` is on (the
default); with it off the FastAPI routes answer, through the same handlers. Every other
request, and any before start-up, goes on to FastAPI unchanged.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from service import handlers
from service.handlers import Door, Meta, Reply
from service.scoring import Scorer

RISK_PREFIX = "/risk/"


class _Route:
    """What the router would put in ``scope["route"]``: the template the request
    timing is labelled with (middleware.TimingAndLimits)."""

    def __init__(self, path: str) -> None:
        self.path = path


RISK, INGEST = _Route("/risk/{stream}"), _Route("/ingest")


async def _send(send: Send, reply: Reply) -> None:
    headers = [
        (b"content-length", str(len(reply.body)).encode()),
        (b"content-type", handlers.JSON.encode()),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers),
    ]
    await send(
        {"type": "http.response.start", "status": reply.status, "headers": headers}
    )
    await send({"type": "http.response.body", "body": reply.body})


class FastPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scorer: Scorer | None = None
        door: Door | None = None
        if scope["type"] == "http":
            scorer = getattr(scope["app"].state, "scorer", None)
            door = getattr(scope["app"].state, "door", None)
        if scorer is None or door is None:
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        stream = path[len(RISK_PREFIX) :] if path.startswith(RISK_PREFIX) else ""
        if method == "GET" and stream and "/" not in stream:  # the route's {stream}
            scope["route"] = RISK
            meta = Meta.of(scope["headers"])
            await _send(send, await handlers.risk(stream, meta, scorer, door))
        elif method == "POST" and path == "/ingest":
            left = False

            async def read_body() -> bytes:
                nonlocal left
                chunks, more = [], True
                while more:
                    message = await receive()
                    if message["type"] != "http.request":  # the client left
                        left = True
                        return b""
                    chunks.append(message.get("body", b""))
                    more = message.get("more_body", False)
                return b"".join(chunks)

            scope["route"] = INGEST
            meta = Meta.of(scope["headers"])
            query = scope.get("query_string", b"")
            reply = await handlers.ingest(meta, read_body, scorer, door, query)
            scope.setdefault("state", {})["streams"] = reply.streams
            if not left:
                await _send(send, reply)
        else:
            await self.app(scope, receive, send)
