"""POST /ingest bodies, parsed and validated in one pass with no model object per reading.

Two media types. JSON (:func:`parse_ingest`) follows :class:`service.schemas.IngestRequest`.
MessagePack (:func:`parse_msgpack`) carries the same readings in columns, each a binary
array: ``{"stream": name, "ts": float64 LE bytes, "values": float32 LE bytes}`` (row-major,
readings x channels; NaN for a missing value), or ``{"streams": [those]}``. It is for
clients that send many readings: the numbers go straight into arrays, with no text to
parse and no Python object per value (docs/reference/api.md).

JSON: three tries, the cheapest first,
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
from typing import Annotated, Any, NamedTuple, TypeVar

import msgspec
import numpy as np
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
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
    list of values (float or None) per reading, or (MessagePack) ``ts`` a float64 array
    and ``rows`` a (readings, channels) float32 array, NaN where a value is missing."""

    stream: str
    ts: list[float] | np.ndarray
    rows: list[list[float | None]] | np.ndarray


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
STREAM_NAME = TypeAdapter(StreamName)  # to word a refusal as the model would


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


M = TypeVar("M", bound=BaseModel)


def parse_model(body: bytes, model: type[M]) -> M:
    """A JSON body as ``model``; a :class:`RequestValidationError` (422) naming the
    field otherwise, FastAPI's usual errors, and for bytes that are not UTF-8 text too
    (which FastAPI's own body parsing answers with a bare 400)."""
    if not body:
        raise _located([{"type": "missing", "loc": (), "msg": "Field required"}])
    obj = _decode(body)
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        raise _located(e.errors(include_url=False)) from None


def _by_model(body: bytes) -> tuple[list[StreamBody], bool]:
    """The model's verdict, with its errors (FastAPI's usual ones for bad JSON)."""
    model = parse_model(body, IngestRequest)
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


# -- MessagePack: columns of binary arrays

MSGPACK_TYPES = (
    "application/msgpack",
    "application/vnd.msgpack",
    "application/x-msgpack",
)
_UNSET = msgspec.UNSET


class _BinStream(msgspec.Struct, forbid_unknown_fields=True):
    stream: str
    ts: bytes
    values: bytes


class _BinBody(msgspec.Struct, forbid_unknown_fields=True):
    stream: str | msgspec.UnsetType = _UNSET
    ts: bytes | msgspec.UnsetType = _UNSET
    values: bytes | msgspec.UnsetType = _UNSET
    streams: (
        Annotated[list[_BinStream], msgspec.Meta(min_length=1)] | msgspec.UnsetType
    ) = _UNSET


_BIN = msgspec.msgpack.Decoder(_BinBody)
_AT = re.compile(r"^(.*?)(?: - at `\$(.*)`)?$", re.S)
_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[(\d+)\]")


def _schema_error(e: msgspec.ValidationError) -> RequestValidationError:
    """msgspec's message ("Expected `bytes`, got `str` - at `$.streams[0].ts`") as a
    422 entry located like the JSON path's (``["body", "streams", 0, "ts"]``)."""
    m = _AT.match(str(e))
    assert m is not None  # the pattern matches any text
    loc: list[str | int] = [
        name or int(index) for name, index in _STEP.findall(m.group(2) or "")
    ]
    return _located([{"type": "msgpack_type", "loc": loc, "msg": m.group(1)}])


def _bin_stream(
    base: list[str | int], name: str, ts_raw: bytes, values_raw: bytes
) -> tuple[StreamBody | None, list[dict[str, Any]]]:
    """One stream's columns as arrays, or the errors that name what is wrong."""

    def err(where: list[str | int], msg: str, type_: str) -> list[dict[str, Any]]:
        return [{"loc": ["body", *base, *where], "msg": msg, "type": type_}]

    if _STREAM.fullmatch(name) is None:
        try:
            STREAM_NAME.validate_python(name)
        except ValidationError as e:
            return None, [
                {**x, "loc": ["body", *base, "stream", *x["loc"]]} for x in e.errors()
            ]
    if not ts_raw or len(ts_raw) % 8:
        return None, err(
            ["ts"],
            f"{len(ts_raw)} bytes: ts holds one little-endian float64 (8 bytes) per "
            "reading, at least one",
            "ts_bytes",
        )
    n = len(ts_raw) // 8
    if not values_raw or len(values_raw) % (4 * n):
        return None, err(
            ["values"],
            f"{len(values_raw)} bytes for {n} readings: values holds the same number "
            "of little-endian float32 (4 bytes) per reading, readings x channels, "
            "row-major, at least one",
            "values_bytes",
        )
    ts = np.frombuffer(ts_raw, dtype="<f8")
    bad = ~(np.isfinite(ts) & (ts >= 0))
    if bad.any():
        i = int(np.argmax(bad))
        return None, err(
            ["ts", i], f"ts[{i}] = {ts[i]}: a finite number >= 0", "ts_value"
        )
    back = np.diff(ts) <= 0
    if back.any():
        i = int(np.argmax(back)) + 1
        return None, err(
            ["ts", i],
            f"ts[{i}] = {float(ts[i])!r} is not greater than ts[{i - 1}] = "
            f"{float(ts[i - 1])!r}: "
            "timestamps must increase within a request",
            "ts_order",
        )
    rows = np.frombuffer(values_raw, dtype="<f4").reshape(n, -1)
    return StreamBody(name, ts, rows), []


_FORMS = "'stream' + 'ts' + 'values' or 'streams' (a list of those)"


def _refused(loc: tuple[str, ...], msg: str) -> RequestValidationError:
    return _located([{"type": "value_error", "loc": loc, "msg": msg}])


def parse_msgpack(body: bytes) -> tuple[list[StreamBody], bool]:
    """The streams of a MessagePack POST /ingest body (module docstring) and whether it
    used the ``streams`` form; raises :class:`RequestValidationError` (422) naming
    the field."""
    if not body:
        raise _located([{"type": "missing", "loc": (), "msg": "Field required"}])
    try:
        obj = _BIN.decode(body)
    except msgspec.ValidationError as e:
        raise _schema_error(e) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # and a str not UTF-8
        raise RequestValidationError(
            [{"type": "msgpack_invalid", "loc": ("body",), "msg": f"MessagePack: {e}"}]
        ) from None
    single = {"stream": obj.stream, "ts": obj.ts, "values": obj.values}
    given = [k for k, v in single.items() if v is not _UNSET]
    if obj.streams is _UNSET:
        if not given:
            raise _refused((), f"send either {_FORMS}")
        if len(given) < 3:
            raise _located(
                [
                    {"type": "missing", "loc": (k,), "msg": "Field required"}
                    for k in single
                    if k not in given
                ]
            )
        parts: list[tuple[list[str | int], str, bytes, bytes]] = [
            ([], obj.stream, obj.ts, obj.values)  # type: ignore[list-item]
        ]
    else:
        if given:
            raise _refused((), f"send either {_FORMS}, not both")
        parts = [
            (["streams", k], s.stream, s.ts, s.values)
            for k, s in enumerate(obj.streams)
        ]
        names = [p[1] for p in parts]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise _refused(("streams",), f"streams listed more than once: {dupes}")
    out, errors = [], []
    for base, name, ts, values in parts:
        item, errs = _bin_stream(base, name, ts, values)
        errors += errs
        if item is not None:
            out.append(item)
    if errors:
        raise RequestValidationError(errors)
    return out, obj.streams is not _UNSET
