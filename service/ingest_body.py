"""POST /ingest bodies, parsed and validated in one pass with no model object per reading.

The schema is :class:`service.schemas.IngestRequest`. Three tries, the cheapest first,
each accepting only what the schema accepts: the usual one-stream body, decoded and
type-checked by msgspec into typed records (:func:`_one_stream`: a fifth of the cost of
the next);
a plain body validated from the raw bytes against plain-dict twins of the schema's
fields (``TypedDict``s, same types and constraints), because a ``Reading`` object per
reading costs about as much as parsing the JSON; anything else goes to
``IngestRequest`` itself, so every error is the model's.
"""

from __future__ import annotations

import json
import math
import re
from itertools import pairwise
from typing import Annotated, Any, NamedTuple

import msgspec
from fastapi.exceptions import RequestValidationError
from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import from_json
from typing_extensions import TypedDict

from service.schemas import (
    FORBID,
    STREAM_PATTERN,
    IngestRequest,
    Number,
    StreamName,
)


class StreamBody(NamedTuple):
    """One stream's readings, validated by the schema: ``ts`` increasing, ``rows`` one
    list of values (float or None) per reading."""

    stream: str
    ts: list[float]
    rows: list[list[float | None]]


class _Reading(TypedDict):
    __pydantic_config__ = FORBID  # type: ignore[misc]
    ts: Annotated[Number, Field(ge=0, allow_inf_nan=False)]
    values: Annotated[list[Number | None], Field(min_length=1)]


class _Stream(TypedDict):
    __pydantic_config__ = FORBID  # type: ignore[misc]
    stream: StreamName
    readings: Annotated[list[_Reading], Field(min_length=1)]


class _Body(TypedDict, total=False):
    __pydantic_config__ = FORBID  # type: ignore[misc]
    stream: StreamName
    readings: Annotated[list[_Reading], Field(min_length=1)]
    streams: Annotated[list[_Stream], Field(min_length=1)]


_PLAIN = TypeAdapter(_Body)


def _increasing(ts: list[float]) -> bool:
    return all(a < b for a, b in pairwise(ts))


_STREAM = re.compile(STREAM_PATTERN)


class _FastReading(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    ts: float
    values: list[float | None]


class _FastBody(msgspec.Struct, forbid_unknown_fields=True):
    stream: str
    readings: list[_FastReading]


_FAST = msgspec.json.Decoder(_FastBody)


def _one_stream(body: bytes) -> list[StreamBody] | None:
    """``{"stream": ..., "readings": [{"ts": ..., "values": [...]}, ...]}`` with every
    field as the schema wants it (ts a finite number >= 0, increasing; values a
    non-empty list of numbers or nulls), else None: the next try decides. msgspec
    decodes and type-checks in one pass in C, with no dict per reading: a bool is no
    number, an unknown or missing field, NaN, a number that overflows a double are
    refused (the next try gives the model's error)."""
    try:
        obj = _FAST.decode(body)
    except (msgspec.DecodeError, ValueError):  # and a string that is not UTF-8
        return None
    name, readings = obj.stream, obj.readings
    if not readings or _STREAM.fullmatch(name) is None:
        return None
    ts = [r.ts for r in readings]
    rows = [r.values for r in readings]
    if min(map(len, rows)) == 0:
        return None
    if not (ts[0] >= 0 and math.isfinite(ts[-1]) and _increasing(ts)):
        return None
    return [StreamBody(name, ts, rows)]


def _plain(body: bytes) -> tuple[list[StreamBody], bool] | None:
    """The parsed body, or None when the model must decide."""
    try:
        obj = _PLAIN.validate_json(body)
    except (ValidationError, ValueError):
        return None
    if "streams" in obj:
        if "stream" in obj or "readings" in obj:
            return None
        parts = [(s["stream"], s["readings"]) for s in obj["streams"]]
        if len({name for name, _ in parts}) != len(parts):
            return None
        batch = True
    elif "stream" in obj and "readings" in obj:
        parts, batch = [(obj["stream"], obj["readings"])], False
    else:
        return None
    out = []
    for name, readings in parts:
        ts = [r["ts"] for r in readings]
        if not _increasing(ts):
            return None
        out.append(StreamBody(name, ts, [r["values"] for r in readings]))
    return out, batch


def _located(errors: list[Any]) -> RequestValidationError:
    """FastAPI's form: each error's ``loc`` under ``body``."""
    return RequestValidationError(
        [
            {
                "type": e["type"],
                "loc": ("body", *e["loc"]),
                "msg": e["msg"],
                "input": e.get("input"),
            }
            for e in errors
        ]
    )


def _json_error(pos: int, why: str) -> RequestValidationError:
    return RequestValidationError(
        [
            {
                "type": "json_invalid",
                "loc": ("body", pos),
                "msg": f"JSON decode error: {why}",
                "input": {},
                "ctx": {"error": why},
            }
        ]
    )


def _decode(body: bytes) -> Any:
    """The body's JSON value; a :class:`RequestValidationError` naming the position
    for anything else: bytes that are not UTF-8 (a compressed body, say), malformed
    JSON, nesting deeper than the parsers' limits (pydantic's, then Python's)."""
    try:
        return from_json(body)
    except ValueError:
        pass
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _json_error(e.start, f"not UTF-8 text ({e.reason})") from None
    try:
        return json.loads(text)  # the standard error, with its position
    except json.JSONDecodeError as e:
        raise _json_error(e.pos, e.msg) from None
    except RecursionError:
        raise _json_error(0, "nested too deeply") from None
    except ValueError as e:  # e.g. an integer literal too long to convert
        raise _json_error(0, str(e)[:200]) from None


def _by_model(body: bytes) -> tuple[list[StreamBody], bool]:
    """The model's verdict, with its errors (FastAPI's usual ones for bad JSON)."""
    if not body:
        raise _located([{"type": "missing", "loc": (), "msg": "Field required"}])
    obj = _decode(body)
    try:
        model = IngestRequest.model_validate(obj)
    except ValidationError as e:
        raise _located(e.errors(include_url=False)) from None
    items = [
        StreamBody(s.stream, [r.ts for r in s.readings], [r.values for r in s.readings])
        for s in model.items()
    ]
    return items, model.streams is not None


def parse_ingest(body: bytes) -> tuple[list[StreamBody], bool]:
    """The streams of a POST /ingest body and whether it used the ``streams`` form;
    raises :class:`RequestValidationError` (422) naming the field."""
    one = _one_stream(body)
    if one is not None:
        return one, False
    return _plain(body) or _by_model(body)
