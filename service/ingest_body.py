"""POST /ingest bodies: parsed and validated in one pass, with no model object per reading.

The body's schema is :class:`service.schemas.IngestRequest` (documented in OpenAPI, and
the source of every error message). Building that pydantic model costs a ``Reading``
object per reading, about as much as parsing the JSON; the hot path instead validates
the raw bytes against plain-dict twins of the same fields (``TypedDict``s with the same
types and constraints, checked by pydantic-core in one pass) and checks the remaining
rules (one form, distinct streams, increasing timestamps) on the plain lists.

Anything that fails there, or is unusual, takes the slow path: the body parsed and
validated by ``IngestRequest`` itself, so errors are exactly the model's (422, ``loc``
naming the field under ``body``) and a body the model accepts is never refused.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Annotated, Any, NamedTuple

from fastapi.exceptions import RequestValidationError
from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import from_json
from typing_extensions import TypedDict

from service.schemas import IngestRequest, StreamName


class StreamBody(NamedTuple):
    """One stream's readings, validated by the schema: ``ts`` increasing, ``rows`` one
    list of values (float or None) per reading."""

    stream: str
    ts: list[float]
    rows: list[list[float | None]]


class _Reading(TypedDict):
    ts: Annotated[float, Field(allow_inf_nan=False)]
    values: Annotated[list[float | None], Field(min_length=1)]


class _Stream(TypedDict):
    stream: StreamName
    readings: Annotated[list[_Reading], Field(min_length=1)]


class _Body(TypedDict, total=False):
    stream: StreamName
    readings: Annotated[list[_Reading], Field(min_length=1)]
    streams: Annotated[list[_Stream], Field(min_length=1)]


_FAST = TypeAdapter(_Body)


def _increasing(ts: list[float]) -> bool:
    return all(a < b for a, b in pairwise(ts))


def _fast(body: bytes) -> tuple[list[StreamBody], bool] | None:
    """The parsed body, or None when the slow path must decide."""
    try:
        obj = _FAST.validate_json(body)
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


def _slow(body: bytes) -> tuple[list[StreamBody], bool]:
    """The model's verdict, with its errors (FastAPI's usual ones for bad JSON)."""
    if not body:
        raise _located([{"type": "missing", "loc": (), "msg": "Field required"}])
    try:
        obj = from_json(body)
    except ValueError:
        try:
            obj = json.loads(body)  # the standard error with its position
        except json.JSONDecodeError as e:
            raise RequestValidationError(
                [
                    {
                        "type": "json_invalid",
                        "loc": ("body", e.pos),
                        "msg": "JSON decode error",
                        "input": {},
                        "ctx": {"error": e.msg},
                    }
                ]
            ) from None
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
    return _fast(body) or _slow(body)
