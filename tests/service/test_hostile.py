"""Hostile inputs at POST /ingest and GET /risk, on both stores and both adapters: each
is answered 4xx with a JSON body naming the field or the limit, never 5xx, and stores
nothing. Measured on the code before this test (docs/notebook/trust-2026-11-25.md):
non-UTF-8 and gzip bodies and deeply nested JSON were 500s, "1.5" and true were taken
as values, any content type was read, a streamed body was read whole, and a far-future
timestamp made every later reading of the stream late."""

from __future__ import annotations

import gzip
import json
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.service_helpers import ClientFactory, serve_reads
from test_api import T0, body, ingest, series

JSON = {"content-type": "application/json"}


@pytest.fixture(params=[True, False], ids=["fast", "routes"])
def hostile(request: pytest.FixtureRequest, make_client: ClientFactory) -> TestClient:
    """The app with small limits, on the parametrized store and adapter."""
    return make_client(fast_paths=request.param, max_body_bytes=1 << 20)


def post(client: TestClient, content: bytes | Iterator[bytes], **headers: str) -> Any:
    return client.post("/ingest", content=content, headers={**JSON, **headers})


def refused(r: Any, status: int, *words: str) -> Any:
    """A refusal: the status, JSON, no trace, and the body naming each of ``words``."""
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"] == "application/json"
    assert "Traceback" not in r.text
    text = r.text
    for w in words:
        assert w in text, (w, text[:500])
    return r.json()["detail"]


def post_asgi(client: TestClient, receive: Any) -> list[dict[str, Any]]:
    """POST /ingest at the ASGI level, the request's messages from ``receive``: the
    messages the app sent."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": "POST", "scheme": "http", "path": "/ingest", "raw_path": b"/ingest",
        "root_path": "", "query_string": b"", "server": ("t", 80),
        "client": ("c", 1), "headers": [(b"content-type", b"application/json")],
    }  # fmt: skip
    client.portal.call(client.app, scope, receive, send)  # type: ignore[union-attr]
    return sent


def stream(client: TestClient, chunks: Iterator[bytes]) -> tuple[int, Any, int]:
    """POST /ingest with a chunked body, at the ASGI level (the test client would read
    a generator whole before the app sees it): (status, headers, bytes the app read)."""
    read, it = 0, iter(chunks)

    async def receive() -> dict[str, Any]:
        nonlocal read
        chunk = next(it, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    sent = post_asgi(client, receive)
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    text = b"".join(
        m.get("body", b"") for m in sent if m["type"] == "http.response.body"
    )
    return start["status"], (headers, json.loads(text)), read


def nothing_stored(client: TestClient, *streams: str) -> None:
    for s in streams:
        assert client.get(f"/risk/{s}").status_code == 404, s


def one(stream: str, ts: Any, values: Any) -> dict[str, Any]:
    return {"stream": stream, "readings": [{"ts": ts, "values": values}]}


def test_bodies_that_are_not_utf8_json(hostile: TestClient) -> None:
    ok = json.dumps(body("s", series(3))).encode()
    for content in (
        b"\xff\xfe\x00{",
        b'{"stream": "s\xff", "readings": []}',
        ok.decode().encode("utf-16"),
        gzip.compress(ok),  # compressed, but not declared
        zlib.compress(ok),
        bytes(range(256)),
    ):
        detail = refused(post(hostile, content), 422, "json_invalid")
        assert detail[0]["loc"][0] == "body"
    nothing_stored(hostile, "s")


def test_declared_compression_and_wrong_content_types(hostile: TestClient) -> None:
    ok = json.dumps(body("s", series(3))).encode()
    for enc in ("gzip", "deflate", "br", "x-custom"):
        content = gzip.compress(ok) if enc == "gzip" else ok
        refused(
            post(hostile, content, **{"content-encoding": enc}), 415, "Content-Encoding"
        )
    for ctype in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/json; charset=latin-1",
    ):
        refused(post(hostile, ok, **{"content-type": ctype}), 415, "Content-Type")
    nothing_stored(hostile, "s")
    # JSON media types, with a UTF-8 charset or none, and no header at all, are read
    for ctype in ("application/json; charset=utf-8", "application/vnd.api+json"):
        assert post(hostile, ok, **{"content-type": ctype}).status_code == 200
    r = hostile.post("/ingest", content=ok)  # no Content-Type: read as JSON
    assert r.status_code == 200 and r.json()["results"][0]["duplicates"] == 3


def test_deeply_nested_json(hostile: TestClient) -> None:
    for depth in (300, 5_000, 100_000):
        word = "readings" if depth < 900 else "nested too deeply"
        for open_, close in ((b"[", b"]"), (b'{"a":', b"}")):
            content = open_ * depth + b"1" + close * depth
            refused(post(hostile, content), 422, "body")
        nested = b'{"stream": "s", "readings": ' + b"[" * depth + b"]" * depth + b"}"
        refused(post(hostile, nested), 422, word)
    nothing_stored(hostile, "s")


@pytest.mark.parametrize(
    ("literal", "where", "word"),
    [
        (b"1e39", "values", "float32"),
        (b"-1e39", "values", "float32"),
        (b"-1e400", "values", "infinite"),
        (b"1e400", "values", "infinite"),
        (b"Infinity", "values", "infinite"),
        (b"-Infinity", "values", "infinite"),
        (b"1e39", "ts", "SCJEPA_MAX_FUTURE_S"),
        (b"-1e400", "ts", "ts"),
        (b"Infinity", "ts", "ts"),
        (b"NaN", "ts", "ts"),
        (b"-1", "ts", "greater than or equal to 0"),
        (b"-1e-300", "ts", "greater than or equal to 0"),
        (b"9" * 5000, "ts", "json_invalid"),  # past Python's int conversion limit
        (b'"1.5"', "values", "valid number"),
        (b"true", "values", "valid number"),
        (b'"1.5"', "ts", "valid number"),
        (b"false", "ts", "valid number"),
        (b"[1]", "values", "valid number"),
        (b"{}", "ts", "valid number"),
    ],
)
def test_number_literals(
    hostile: TestClient, literal: bytes, where: str, word: str
) -> None:
    ts, values = str(T0).encode(), b"[1, 2, 3, 4]"
    if where == "ts":
        ts = literal
    else:
        values = b"[1, " + literal + b", 3, 4]"
    content = (
        b'{"stream": "s", "readings": [{"ts": ' + ts + b', "values": ' + values + b"}]}"
    )
    detail = refused(post(hostile, content), 422, word)
    assert word == "json_invalid" or where in json.dumps(detail[0]["loc"])
    nothing_stored(hostile, "s")


def test_nan_and_null_values_are_missing(hostile: TestClient) -> None:
    content = (
        f'{{"stream": "s", "readings": [{{"ts": {T0}, "values": [NaN, null, 3, 4]}}]}}'
    )
    r = post(hostile, content.encode())
    assert r.status_code == 200 and r.json()["results"][0]["accepted"] == 1


@pytest.mark.parametrize(
    "name",
    [
        "x" * 129,
        "x" * 10_000,
        "pümpe-7",
        "насос",
        "泵",
        "pump 7",
        "a/b",
        "{x}",
        "",
        "\x00",
        ".",  # a URL path cannot name these two: no GET /risk/{stream} could read them
        "..",
    ],
)
def test_stream_names(hostile: TestClient, name: str) -> None:
    refused(
        post(hostile, json.dumps(one(name, T0, [1, 2, 3, 4])).encode()), 422, "stream"
    )
    batch = {"streams": [body("ok", series(1)), one(name, T0, [1, 2, 3, 4])]}
    detail = refused(post(hostile, json.dumps(batch).encode()), 422, "stream")
    assert detail[0]["loc"][:3] == ["body", "streams", 1]
    nothing_stored(hostile, "ok")
    if name.strip(".") and "/" not in name and "\x00" not in name:
        r = hostile.get(f"/risk/{name}")
        refused(r, 422, "stream")


def test_duplicate_and_decreasing_timestamps_in_one_request(
    hostile: TestClient,
) -> None:
    for ts in ([T0, T0], [T0, T0 + 1, T0 + 1], [T0 + 1, T0]):
        readings = [{"ts": t, "values": [1, 2, 3, 4]} for t in ts]
        content = json.dumps({"stream": "s", "readings": readings}).encode()
        refused(post(hostile, content), 422, "timestamps must increase")
    nothing_stored(hostile, "s")


def test_far_future_timestamps_do_not_poison_a_stream(hostile: TestClient) -> None:
    """Before: one reading at 1e15 was stored, and every later reading was late."""
    now = time.time()
    assert ingest(hostile, "s", series(3))["accepted"] == 3
    for ts in (now + 2 * 86_400, 1e15, 1.7e308):
        r = post(hostile, json.dumps(one("s", ts, [1, 2, 3, 4])).encode())
        detail = refused(r, 422, "SCJEPA_MAX_FUTURE_S")
        assert detail[0]["loc"] == ["body", "readings", 0, "ts"]
    later = ingest(hostile, "s", series(2, start=3), start=3)
    assert (later["accepted"], later["rejected"]) == (2, 0)
    # the service's clock plus the allowance is still fine
    assert ingest(hostile, "t", series(1) + 0 * now)["accepted"] == 1
    soon = post(hostile, json.dumps(one("t", now + 3600, [1, 2, 3, 4])).encode())
    assert soon.status_code == 200


def test_schema_forms_the_service_refuses(hostile: TestClient) -> None:
    r = [{"ts": T0, "values": [1, 2, 3, 4]}]
    for obj, word in [
        (
            {"stream": "s", "readings": r, "streams": [{"stream": "t", "readings": r}]},
            "either",
        ),
        ({"stream": "s", "streams": [{"stream": "t", "readings": r}]}, "either"),
        ({"stream": "s", "readings": r, "streams": None}, "null"),
        ({"stream": None, "readings": r}, "null"),
        ({"stream": "s", "readings": r, "extra": 1}, "extra"),
        ({"stream": "s", "readings": [{**r[0], "quality": "good"}]}, "quality"),
        ({"streams": [{"stream": "t", "readings": r, "x": 1}]}, "streams"),
        ({"streams": []}, "streams"),
        ([body("s", series(1))], "body"),
        ("s", "body"),
        (None, "body"),
    ]:
        refused(post(hostile, json.dumps(obj).encode()), 422, word)
    nothing_stored(hostile, "s", "t")


def test_a_million_readings(make_client: ClientFactory) -> None:
    """1e6 readings: past the byte limit (413) whatever the framing, and past the
    readings limit (413) when the byte limit is raised for them."""
    one_reading = b'{"ts":1,"values":[1,2,3,4]},'
    head, n = b'{"stream":"s","readings":[', 1_000_000
    client = make_client()
    whole = head + one_reading * (n - 1) + b'{"ts":2,"values":[1,2,3,4]}]}'
    refused(post(client, whole), 413, "SCJEPA_MAX_BODY_BYTES")

    def chunks() -> Iterator[bytes]:  # chunked: no Content-Length
        yield head
        block = one_reading * 10_000
        for _ in range(n // 10_000):
            yield block

    status, (_, out), read = stream(client, chunks())
    assert status == 413 and "SCJEPA_MAX_BODY_BYTES" in out["detail"]
    assert read < 2 * client.app.state.settings.max_body_bytes  # type: ignore[attr-defined]
    nothing_stored(client, "s")

    roomy = make_client(max_body_bytes=64 << 20)
    readings = b",".join(b'{"ts":%d,"values":[1,2,3,4]}' % i for i in range(n))
    detail = refused(post(roomy, head + readings + b"]}"), 413, "10000")
    assert "SCJEPA_MAX_READINGS_PER_REQUEST" in detail
    nothing_stored(roomy, "s")


@pytest.mark.parametrize("fast_paths", [True, False])
def test_a_50_mb_body_is_cut_off_at_the_limit(
    make_client: ClientFactory, fast_paths: bool
) -> None:
    client = make_client(fast_paths=fast_paths)
    limit = client.app.state.settings.max_body_bytes  # type: ignore[attr-defined]
    status, (headers, out), read = stream(client, (b" " * (1 << 20) for _ in range(50)))
    assert status == 413 and out["detail"] == (
        f"request body over {limit} bytes (SCJEPA_MAX_BODY_BYTES)"
    )
    assert headers["connection"] == "close"
    assert read <= limit + (1 << 20)  # read up to the limit, not the 50 MB
    declared = post(client, b" " * (50 << 20))  # Content-Length over the limit
    refused(declared, 413, "SCJEPA_MAX_BODY_BYTES")
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("where", ["header", "target"])
def test_headers_over_64_kib_in_one_read_are_431(where: str) -> None:
    """Headers (or a request target) over the 64 KiB cap that arrive in one read were
    served (a header) or answered a plain-text 400 (a target: the URL parser's own
    limit); the cap counted only reads that left the headers unfinished."""
    from service.http import MAX_HEADER_BYTES

    big = b"a" * (MAX_HEADER_BYTES + 500)
    if where == "header":
        head = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: " + big + b"\r\n\r\n"
    else:
        head = b"GET /risk/" + big + b" HTTP/1.1\r\nhost: t\r\n\r\n"
    for reads in ([head], [head[:1000], head[1000:]]):
        out, closed = serve_reads(reads)
        assert out.startswith(b"HTTP/1.1 431 "), out[:200]
        assert out.count(b"HTTP/1.1") == 1 and closed
        assert json.loads(out.partition(b"\r\n\r\n")[2]) == {
            "detail": f"request headers over {MAX_HEADER_BYTES} bytes"
        }
    # under the cap, in one read: served
    ok = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 60_000 + b"\r\n\r\n"
    out, _ = serve_reads([ok])
    assert out.startswith(b"HTTP/1.1 200 "), out[:200]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /ingest HTTP/1.1\r\nhost: t\r\ncontent-length: abc\r\n\r\n",
        b"POST /ingest HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        b"GET /risk/a b HTTP/1.1\r\nhost: t\r\n\r\n",
    ],
)
def test_bytes_that_are_not_http_get_a_json_400(request_bytes: bytes) -> None:
    """uvicorn answered these with text/plain "Invalid HTTP request received."; every
    error is JSON (docs/reference/api.md, Errors)."""
    out, closed = serve_reads([request_bytes])
    head, _, text = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and closed, out[:200]
    assert b"content-type: application/json" in head
    assert json.loads(text)["detail"].startswith("invalid HTTP request")
    assert out.count(b"HTTP/1.1") == 1


def test_a_client_that_leaves_mid_body_is_no_500(hostile: TestClient) -> None:
    """A client that disconnects before its body is whole gets nothing stored, and the
    request is counted as 499 (client left), not as a 500 of the service: the fast
    path answered nothing and was timed as 500, the FastAPI route raised
    ClientDisconnect into the 500 handler (an "unhandled error" logged)."""
    from prometheus_client import REGISTRY

    def count(status: str) -> float:
        labels = {"method": "POST", "route": "/ingest", "status": status}
        name = "scjepa_http_request_duration_seconds_count"
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = {s: count(s) for s in ("499", "500")}
    messages = iter(
        [
            {
                "type": "http.request",
                "body": b'{"stream": "s", "readi',
                "more_body": True,
            },
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> dict[str, Any]:
        return next(messages, {"type": "http.disconnect"})

    sent = post_asgi(hostile, receive)
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    assert statuses in ([], [499]), statuses
    assert count("499") == before["499"] + 1
    assert count("500") == before["500"]
    nothing_stored(hostile, "s")
