"""HTTP plumbing: request timing and the access log by route template, the body-size
limit (declared or streamed), the hot routes' ASGI adapter when it is switched on, and error handlers that
always answer JSON (never a stack trace), worded by service.handlers as the hot routes
word them."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import handlers, logs, metrics
from service.deps import Refused
from service.fastpaths import FastPaths
from service.handlers import BodyTooLarge
from service.inference import WindowError
from service.store import StoreUnavailable

log = logging.getLogger(__name__)

# no answer: the client left before its body was read (nginx's number for it), counted
# apart from the service's own 5xx
CLIENT_LEFT = 499


class TimingAndLimits:
    """Observe request latency labelled by route template (``/risk/{stream}``, never the
    raw path); answer 413 to a body whose Content-Length is over the limit, and to one
    that grows past it while it is read (chunked bodies carry no length): the reader
    raises :class:`BodyTooLarge` at the limit, so no more than the limit is held, and
    the connection closes."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        # (method, route template, status) -> its REQUEST_LATENCY child; bounded: the
        # templates and statuses are few, and the methods are the server's (uvicorn
        # answers an unknown one itself)
        self.latency: dict[tuple[str, str, int], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        code = 500  # what an exception escaping the app becomes
        root_path = scope.get("root_path", "")  # a mount moves it; route_of needs it

        async def send_status(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        limit, received, left = self.max_body_bytes, 0, False

        async def receive_limited() -> Message:
            nonlocal received, left
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            elif message["type"] == "http.disconnect":
                left = True
            return message

        try:
            length = dict(scope["headers"]).get(b"content-length", b"")
            if length.isdigit() and int(length) > limit:
                raise BodyTooLarge(limit)
            await self.app(scope, receive_limited, send_status)
        except BodyTooLarge:
            metrics.REFUSED.labels(reason="body_too_large", tenant="").inc()
            if code != 500:  # a response has started: only closing is left
                raise
            await handlers.too_large(limit).response()(scope, receive, send_status)
        finally:
            if left and code in (500, CLIENT_LEFT):  # nothing was answered
                code = CLIENT_LEFT
            took = time.perf_counter() - start
            route = route_of(scope, root_path)
            series = (scope["method"], route, code)
            latency = self.latency.get(series)
            if latency is None:  # labels() costs as much as the rest of this
                latency = self.latency[series] = metrics.REQUEST_LATENCY.labels(
                    method=scope["method"], route=route, status=str(code)
                )
            latency.observe(took)
            state = scope.get("state") or {}
            logs.access(scope["method"], route, code, took, state.get("streams"))


def route_of(scope: Scope, root_path: str = "") -> str:
    """The route template that served a request: FastAPI's routes (and the fast paths)
    put themselves in ``scope["route"]``; Starlette's own (``/openapi.json``, a mount
    such as /docs' assets) do not, and are looked up again with the request's own
    ``root_path`` (a mount extends it); no match: ``unmatched``."""
    route = scope.get("route")
    if route is not None:
        return str(getattr(route, "path", "unmatched"))
    probe = {**scope, "root_path": root_path}
    app = scope.get("app")
    for r in getattr(getattr(app, "router", None), "routes", ()):
        if r.matches(probe)[0] == Match.FULL:
            return str(getattr(r, "path", "unmatched"))
    return "unmatched"


async def refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return exc.reply.response()


async def body_too_large(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BodyTooLarge)
    metrics.REFUSED.labels(reason="body_too_large", tenant="").inc()
    return handlers.too_large(exc.limit).response()


async def no_route(request: Request, exc: Exception) -> Response:
    """Starlette's 404 / 405 (no such route or method), naming what was asked for."""
    assert isinstance(exc, StarletteHTTPException)
    what = exc.detail
    if exc.status_code == 404 and what == "Not Found":
        what = f"no route {request.method} {request.url.path}"
    elif exc.status_code == 405 and what == "Method Not Allowed":
        what = f"method {request.method} not allowed on {request.url.path}"
    return JSONResponse({"detail": what}, exc.status_code, headers=exc.headers)


async def client_left(request: Request, exc: Exception) -> Response:
    """The client went away while its body was read: nobody to answer."""
    assert isinstance(exc, ClientDisconnect)
    return Response(status_code=CLIENT_LEFT)


async def invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return handlers.invalid(exc.errors()).response()


async def store_unavailable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StoreUnavailable)
    return handlers.store_unavailable(exc).response()


async def bad_window(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, WindowError)
    return handlers.bad_window(exc).response()


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return JSONResponse({"detail": "internal error"}, status_code=500)


def install(app: FastAPI, *, max_body_bytes: int, fast_paths: bool) -> None:
    """The middleware and error handlers; ``fast_paths`` puts the ASGI adapter of the
    hot routes (service.fastpaths) inside the timing, so its requests are observed."""
    if fast_paths:
        app.add_middleware(FastPaths)
    app.add_middleware(TimingAndLimits, max_body_bytes=max_body_bytes)
    app.add_exception_handler(StarletteHTTPException, no_route)
    app.add_exception_handler(Refused, refused)
    app.add_exception_handler(BodyTooLarge, body_too_large)
    app.add_exception_handler(ClientDisconnect, client_left)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StoreUnavailable, store_unavailable)
    app.add_exception_handler(WindowError, bad_window)
    app.add_exception_handler(Exception, internal_error)
