"""POST /ingest and GET /risk/{stream}: the one implementation of each hot route, and
the door every tenant route goes through (key -> tenant, rate limit).

Each takes the request's parts (its :class:`Meta` headers, a body reader or the stream
name, the app's Scorer and Door) and returns a :class:`Reply`: status, JSON body bytes,
headers. Two thin adapters serve them and answer alike: service/fastpaths.py (ASGI,
ahead of FastAPI's routing, ``SCJEPA_FAST_PATHS``) and routes/ingest.py +
routes/risk.py (FastAPI).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.responses import Response

from service import auth, metrics
from service.config import Settings
from service.inference import WindowError
from service.ingest_body import (
    MSGPACK_TYPES,
    STREAM_NAME,
    StreamBody,
    parse_ingest,
    parse_msgpack,
)
from service.schemas import STREAM_PATTERN, IngestResponse
from service.scoring import Scorer, StreamQuotaExceeded
from service.store import LayoutChanged, Store, StoreUnavailable

log = logging.getLogger(__name__)

JSON = "application/json"
AUTH_DETAIL = "missing or unknown X-API-Key"
AUTH_HEADERS = (("WWW-Authenticate", "X-API-Key"),)
_STREAM = re.compile(STREAM_PATTERN)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Reply(NamedTuple):
    """One answer of a hot route; content type always JSON."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    streams: int | None = None  # POST /ingest: streams in the body (the access line)

    def response(self) -> Response:
        return Response(self.body, self.status, dict(self.headers), media_type=JSON)


def detail(
    status: int, what: object, headers: tuple[tuple[str, str], ...] = ()
) -> Reply:
    """``{"detail": what}``, rendered byte for byte as FastAPI's JSONResponse does."""
    body = json.dumps(
        {"detail": what}, ensure_ascii=False, allow_nan=False, separators=(",", ":")
    )
    return Reply(status, body.encode(), headers)


UNAUTHORIZED = detail(401, AUTH_DETAIL, AUTH_HEADERS)
JSON_TYPES = ("application/json",)


class Meta(NamedTuple):
    """The request headers the handlers read."""

    api_key: str | None = None
    content_type: str | None = None
    content_encoding: str | None = None

    @classmethod
    def of(cls, headers: Sequence[tuple[bytes, bytes]]) -> Meta:
        """From ASGI headers (lower-case names): the first of each, as Starlette's
        ``Headers.get`` reads it; ``Authorization: Bearer KEY`` stands for X-API-Key."""
        key = bearer = ctype = encoding = None
        for name, value in headers:
            if name == b"x-api-key" and key is None:
                key = bytes(value).decode("latin-1")
            elif name == b"authorization" and bearer is None:
                scheme, _, token = bytes(value).decode("latin-1").partition(" ")
                bearer = token.strip() if scheme.lower() == "bearer" else None
            elif name == b"content-type" and ctype is None:
                ctype = bytes(value).decode("latin-1")
            elif name == b"content-encoding" and encoding is None:
                encoding = bytes(value).decode("latin-1")
        return cls(key if key is not None else bearer, ctype, encoding)


class Door:
    """Who a request is: a tenant (tenant routes, rate-limited per key), or an
    @admin / @ops key. Holds the key table (service.auth.Keys)."""

    def __init__(self, keys: auth.Keys, store: Store, settings: Settings) -> None:
        self.keys = keys
        self.store = store
        self.settings = settings

    async def tenant(self, key: str | None) -> str | Reply:
        """The tenant of ``key``, or the refusal: 401 (no tenant key), 429 (over the
        key's rate), 503 (the rate bucket's store is down)."""
        if self.keys.open:
            return auth.DEFAULT_TENANT
        who = self.keys.identify(key)
        if who is None or who.principal.startswith("@"):
            return UNAUTHORIZED
        s = self.settings
        if s.rate_limit_rps > 0:
            try:
                wait = await self.store.rate(
                    who.key_id, s.rate_limit_rps, s.rate_limit_burst
                )
            except StoreUnavailable as e:
                return store_unavailable(e)
            if wait > 0:
                metrics.REFUSED.labels(reason="rate_limit", tenant=who.principal).inc()
                return detail(
                    429,
                    f"rate limit: {s.rate_limit_rps:g} requests/s per API key, "
                    f"bursts of {s.rate_limit_burst} (SCJEPA_RATE_LIMIT_RPS, "
                    f"SCJEPA_RATE_LIMIT_BURST); retry in {wait:.3f} s",
                    (("Retry-After", str(max(1, math.ceil(wait)))),),
                )
        return who.principal

    def admin(self, key: str | None) -> Reply | None:
        """None when ``key`` is an @admin key, else the refusal (403 when no admin
        key is configured at all: the admin routes are off)."""
        if not self.keys.table.has(auth.ADMIN):
            return detail(
                403,
                "admin routes are off: no @admin key is configured (SCJEPA_API_KEYS "
                "or SCJEPA_API_KEYS_FILE)",
            )
        who = self.keys.identify(key)
        return None if who is not None and who.principal == auth.ADMIN else UNAUTHORIZED

    def ops(self, path: str, key: str | None) -> Reply | None:
        """None when ``path`` is open or ``key`` is an @ops or @admin key."""
        if path not in self.settings.ops_key_routes:
            return None
        who = self.keys.identify(key)
        if who is not None and who.principal in (auth.OPS, auth.ADMIN):
            return None
        return UNAUTHORIZED


class BodyTooLarge(Exception):
    """Raised by the body reader past SCJEPA_MAX_BODY_BYTES (middleware.py): 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def too_large(limit: int) -> Reply:
    """413; the connection closes (the rest of the body is not read)."""
    return detail(
        413,
        f"request body over {limit} bytes (SCJEPA_MAX_BODY_BYTES)",
        (("Connection", "close"),),
    )


def body_parser(
    meta: Meta,
) -> Callable[[bytes], tuple[list[StreamBody], bool]] | Reply:
    """The parser of the body's media type: JSON (a missing Content-Type is read as
    JSON, as FastAPI does) or MessagePack (service.ingest_body); else the 415: another
    Content-Type, a charset other than UTF-8 on JSON, any Content-Encoding."""
    encoding = (meta.content_encoding or "identity").strip().lower()
    if encoding != "identity":
        metrics.REFUSED.labels(reason="unsupported_media_type", tenant="").inc()
        return detail(
            415,
            f"Content-Encoding {encoding!r} is not supported: send the body "
            "uncompressed",
        )
    if meta.content_type is None:
        return parse_ingest
    media, *params = (p.strip().lower() for p in meta.content_type.split(";"))
    if media in MSGPACK_TYPES:
        return parse_msgpack
    charset = next((p[8:].strip('"') for p in params if p.startswith("charset=")), "")
    is_json = media in JSON_TYPES or (
        media.startswith("application/") and media.endswith("+json")
    )
    if is_json and charset in ("", "utf-8", "utf8"):
        return parse_ingest
    metrics.REFUSED.labels(reason="unsupported_media_type", tenant="").inc()
    return detail(
        415,
        f"Content-Type {meta.content_type!r} is not supported: send application/json "
        "(UTF-8) or application/msgpack",
    )


def invalid(errors: Sequence[Mapping[str, Any]]) -> Reply:
    """422 naming each bad field (``loc``) and why (``msg``); the input is not echoed
    (it can be large, or hold infinities that JSON cannot carry)."""
    return detail(
        422,
        [
            {
                "loc": list(e.get("loc", ())),
                "msg": e.get("msg", ""),
                "type": e.get("type", ""),
            }
            for e in errors
        ],
    )


def store_unavailable(exc: StoreUnavailable) -> Reply:
    """503 with Retry-After: nothing was lost (appends are atomic per stream and a
    retry is deduplicated)."""
    log.warning("store unavailable: %s", exc)
    return detail(
        503, f"store unavailable, retry later ({exc})", (("Retry-After", "1"),)
    )


def bad_window(exc: WindowError) -> Reply:
    return detail(422, str(exc))


def unknown_stream(stream: str) -> str:
    return f"unknown stream {stream!r} (no readings yet)"


def stream_errors(stream: str) -> list[dict[str, Any]]:
    """The errors of a stream name in the URL path (none for a valid one)."""
    if _STREAM.fullmatch(stream):
        return []
    try:
        STREAM_NAME.validate_python(stream)
    except ValidationError as e:
        return [{**x, "loc": ("path", "stream", *x["loc"])} for x in e.errors()]
    return []


def wait_of(query: bytes, limit: float) -> float | Reply:
    """The ``wait`` query parameter of POST /ingest: seconds in [0, limit], 0 absent;
    else the 422 naming it. A number as JSON writes one: an empty value, blanks,
    ``inf``, ``1_0`` or digits other than ASCII ones are refused, not read by
    Python's lenient ``float()``."""
    values = parse_qs(query.decode("latin-1"), keep_blank_values=True).get("wait")
    if not values:
        return 0.0
    wait = float(values[0]) if _NUMBER.fullmatch(values[0]) else math.nan
    if not 0 <= wait <= limit:  # NaN fails too
        return invalid(
            [
                {
                    "loc": ["query", "wait"],
                    "msg": f"wait = {values[0]!r}: seconds from 0 to {limit:g} "
                    "(SCJEPA_MAX_INGEST_WAIT_S)",
                    "type": "wait_range",
                }
            ]
        )
    return wait


async def ingest(
    meta: Meta,
    read_body: Callable[[], Awaitable[bytes]],
    scorer: Scorer,
    door: Door,
    query: bytes = b"",
) -> Reply:
    """Store readings, queue every window they complete for scoring, report counts per
    stream; with ``?wait=S``, wait up to S seconds for those windows' risks.

    Checked in this order, nothing stored before the last: key (401), rate (429),
    media type (415), wait (422), body size (413, while reading), body (422), reading
    count (413), values and timestamps against the model and the clock (422), the
    tenant's stream quota (403). The body is read only once the key is known.
    """
    settings = scorer.settings
    tenant = await door.tenant(meta.api_key)
    if isinstance(tenant, Reply):
        return tenant
    parse = body_parser(meta)
    if isinstance(parse, Reply):
        return parse
    wait = wait_of(query, settings.max_ingest_wait_s) if query else 0.0
    if isinstance(wait, Reply):
        return wait
    raw = await read_body()  # BodyTooLarge past the limit: the middleware's 413
    try:
        items, batch_form = parse(raw)
    except RequestValidationError as e:
        return invalid(e.errors())
    reply = await _ingest_parsed(items, batch_form, tenant, wait, scorer)
    return reply._replace(streams=len(items))


async def _ingest_parsed(
    items: list[StreamBody],
    batch_form: bool,
    tenant: str,
    wait: float,
    scorer: Scorer,
) -> Reply:
    """:func:`ingest` once the body is parsed."""
    settings = scorer.settings
    n = sum(len(item.ts) for item in items)
    limit = settings.max_readings_per_request
    if n > limit:
        return detail(
            413,
            f"{n} readings in one request; the limit is {limit} "
            "(SCJEPA_MAX_READINGS_PER_REQUEST)",
        )
    arrays, problems = scorer.prepare(items, batch_form=batch_form)
    if problems:
        return invalid(problems)
    try:
        results = await scorer.ingest(
            tenant, [item.stream for item in items], arrays, wait
        )
    except StreamQuotaExceeded as e:
        return detail(403, str(e))
    except LayoutChanged as e:
        return detail(409, str(e))
    except StoreUnavailable as e:
        return store_unavailable(e)
    except WindowError as e:
        return bad_window(e)
    return Reply(200, IngestResponse(results=results).model_dump_json().encode())


async def risk(stream: str, meta: Meta, scorer: Scorer, door: Door) -> Reply:
    """Latest risk of one of the tenant's streams, or its warm-up progress; 404 for an
    unknown one (another tenant's stream of that name is unknown too)."""
    tenant = await door.tenant(meta.api_key)
    if isinstance(tenant, Reply):
        return tenant
    if errors := stream_errors(stream):
        return invalid(errors)
    try:
        body = await scorer.risk(tenant, stream)
    except StoreUnavailable as e:
        return store_unavailable(e)
    if body is None:
        return detail(404, unknown_stream(stream))
    return Reply(200, body)
