"""POST /ingest and GET /risk/{stream}: the one implementation of each hot route.

Each takes the request's parts (raw body or stream name, the X-API-Key header, the
app's Scorer) and returns a :class:`Reply`: status, JSON body bytes, headers. Two thin
adapters serve them and answer alike: service/fastpaths.py (ASGI, ahead of FastAPI's
routing, ``SCJEPA_FAST_PATHS``) and routes/ingest.py + routes/risk.py (FastAPI).
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from service.config import Settings
from service.inference import WindowError
from service.ingest_body import parse_ingest
from service.schemas import STREAM_PATTERN, IngestResponse, StreamName
from service.scoring import Scorer
from service.store import StoreUnavailable

log = logging.getLogger(__name__)

JSON = "application/json"
AUTH_DETAIL = "missing or unknown X-API-Key"
AUTH_HEADERS = (("WWW-Authenticate", "X-API-Key"),)
_STREAM = re.compile(STREAM_PATTERN)
_STREAM_NAME = TypeAdapter(StreamName)  # only to word a refusal as FastAPI would


class Reply(NamedTuple):
    """One answer of a hot route; content type always JSON."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

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


def key_ok(settings: Settings, key: str | None) -> bool:
    """Open when no keys are configured; otherwise ``key`` must match one."""
    if not settings.api_keys:
        return True
    return key is not None and any(
        secrets.compare_digest(key.encode(), k.encode()) for k in settings.api_keys
    )


UNAUTHORIZED = detail(401, AUTH_DETAIL, AUTH_HEADERS)


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
        _STREAM_NAME.validate_python(stream)
    except ValidationError as e:
        return [{**x, "loc": ("path", "stream", *x["loc"])} for x in e.errors()]
    return []


async def ingest(raw: bytes, api_key: str | None, scorer: Scorer) -> Reply:
    """Store readings, score every window they complete, report counts per stream.

    Checked in this order, nothing stored before the last: key (401), body (422),
    reading count (413), values against the model (422).
    """
    settings = scorer.settings
    if not key_ok(settings, api_key):
        return UNAUTHORIZED
    try:
        items, batch_form = parse_ingest(raw)
    except RequestValidationError as e:
        return invalid(e.errors())
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
        results = await scorer.ingest([item.stream for item in items], arrays)
    except StoreUnavailable as e:
        return store_unavailable(e)
    except WindowError as e:
        return bad_window(e)
    return Reply(200, IngestResponse(results=results).model_dump_json().encode())


async def risk(stream: str, api_key: str | None, scorer: Scorer) -> Reply:
    """Latest risk of a stream, or its warm-up progress; 404 for an unknown one."""
    if not key_ok(scorer.settings, api_key):
        return UNAUTHORIZED
    if errors := stream_errors(stream):
        return invalid(errors)
    try:
        body = await scorer.risk(stream)
    except StoreUnavailable as e:
        return store_unavailable(e)
    if body is None:
        return detail(404, unknown_stream(stream))
    return Reply(200, body)
