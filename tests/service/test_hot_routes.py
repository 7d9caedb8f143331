"""POST /ingest and GET /risk/{stream}: one implementation (service.handlers) behind two
adapters, the ASGI fast path (SCJEPA_FAST_PATHS on) and the FastAPI routes (off), which
must answer byte for byte alike, validate a bad body once and time under the template."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from support.service_helpers import ClientFactory
from test_api import T0, body, series

from service import handlers, ingest_body
from service.fastpaths import FastPaths
from service.schemas import IngestRequest, RiskResponse
from service.store import StoreUnavailable

KEY = {"X-API-Key": "k1"}
LIMITS = {
    "api_keys": ["k1"],
    "max_readings_per_request": 150,
    "max_body_bytes": 200_000,
}


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()  # inf as Infinity, which the server parses


def one(t: float, values: list[Any]) -> dict[str, Any]:
    return {"stream": "s", "readings": [{"ts": T0 + t, "values": values}]}


Answer = tuple[str, str, int, list[tuple[str, str]], bytes]


def exchange(client: TestClient) -> list[Answer]:
    """A session touching every answer of both routes; each answer with all its
    headers and its body (``computed_at`` masked: the two apps score at other times)."""
    out: list[Answer] = []

    def post(
        content: bytes, headers: dict[str, str] | None = None, wait: bool = False
    ) -> None:  # wait: the answer (and the next GET /risk) has the window's score
        path = "/ingest?wait=20" if wait else "/ingest"
        keep(client.post(path, content=content, headers=headers))

    def get(path: str, headers: dict[str, str] | None = None) -> None:
        keep(client.get(path, headers=headers))

    def keep(r: Any) -> None:
        content = re.sub(rb'"computed_at":"[^"]*"', b'"computed_at":"-"', r.content)
        out.append((r.request.method, r.request.url.path, r.status_code,
                    sorted(r.headers.items()), content))  # fmt: skip

    post(raw(body("s", series(60))), KEY)  # 200
    post(raw(body("s", series(60))), KEY)  # 200: all duplicates
    post(raw(body("s", series(3))))  # 401
    post(raw(body("s", series(3))), {"X-API-Key": "k2"})  # 401
    post(raw(body("t", series(151))))  # 401 before 413
    post(b'{"stream": "s",,}', KEY)  # 422: JSON, with its position
    post(b"", KEY)  # 422: no body
    post(b"[1, 2]", KEY)  # 422
    post(raw(body("bad/name", series(3))), KEY)  # 422: schema
    post(raw({"streams": [body("s", series(2)), body("s", series(2))]}), KEY)  # 422
    post(raw(body("s", series(3)[:, :2])), KEY)  # 422: channel count (the model's)
    post(raw(one(70, [1, 2, 3, float("inf")])), KEY)  # 422: infinite
    post(raw(one(70, [1, 2, 3, 1e39])), KEY)  # 422: over float32
    post(raw(body("t", series(151))), KEY)  # 413: readings
    post(b"{" + b" " * 300_000 + b"}", KEY)  # 413: bytes (before either adapter)
    get("/risk/s", KEY)  # 200: warming up
    get("/risk/t", KEY)  # 404: nothing refused was stored
    post(raw(body("s", series(40, start=60), start=60)), KEY, wait=True)  # scored
    get("/risk/s", KEY)  # 200: ok
    get("/risk/nope", KEY)  # 404
    get("/risk/bad{name}", KEY)  # 422
    get("/risk/" + "x" * 129, KEY)  # 422
    get("/risk/s")  # 401
    get("/risk/bad{name}")  # 401 before 422
    get("/risk/s/history", KEY)  # not a hot route
    get("/risk/", KEY)  # 404: no route
    keep(client.post("/risk/s", headers=KEY))  # 405

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("redis: down")

    store = client.app.state.store  # type: ignore[attr-defined]
    store.latest = store.append = store.append_many = down
    get("/risk/s", KEY)  # 503
    post(raw(body("s", series(3, start=100), start=100)), KEY)  # 503
    return out


def test_both_adapters_answer_alike(make_client: ClientFactory) -> None:
    fast = exchange(make_client(fast_paths=True, **LIMITS))
    routes = exchange(make_client(fast_paths=False, **LIMITS))
    assert fast == routes
    statuses = [a[2] for a in fast]
    assert statuses == [200, 200, 401, 401, 401, 422, 422, 422, 422, 422, 422, 422,
                        422, 413, 413, 200, 404, 200, 200, 404, 422, 422, 401, 401,
                        200, 404, 405, 503, 503]  # fmt: skip
    answers = {(a[0], a[1], a[2]): (dict(a[3]), a[4]) for a in fast}
    headers, text = answers[("GET", "/risk/s", 503)]
    assert headers["retry-after"] == "1" and b"store unavailable" in text
    headers, _ = answers[("POST", "/ingest", 401)]
    assert headers["www-authenticate"] == "X-API-Key"
    detail = json.loads(answers[("GET", "/risk/bad{name}", 422)][1])["detail"]
    assert detail[0]["loc"] == ["path", "stream"]
    ok = [a for a in fast if a[1] == "/risk/s" and a[2] == 200][-1]
    assert json.loads(ok[4])["status"] == "ok"
    assert list(json.loads(ok[4])) == list(RiskResponse.model_fields)


def test_the_adapter_answers_its_routes_and_passes_on_the_rest(
    make_client: ClientFactory,
) -> None:
    """FastPaths alone (no FastAPI behind it) against the whole app without it."""
    limits = LIMITS | {"max_readings_per_request": 100}
    client = make_client(**limits)
    routes = make_client(fast_paths=False, **limits)
    plain = raw(body("s", series(60)))
    status, out, passed = run_adapter(client, "/ingest", KEY, "POST", plain)
    assert (status, passed) == (200, False)
    (res,) = json.loads(out)["results"]
    assert res["accepted"] == 60 and res["readings_total"] == 60
    status, out, passed = run_adapter(client, "/ingest", KEY, "POST", plain)  # retry
    assert json.loads(out)["results"][0]["duplicates"] == 60
    assert routes.post("/ingest", content=plain, headers=KEY).status_code == 200
    refused = [
        (plain, {}, 401),  # no key
        (raw(body("s", series(3)[:, :2])), KEY, 422),  # 2 channels
        (raw(body("t", series(101))), KEY, 413),  # over the limit
        (b'{"stream": "s",', KEY, 422),  # malformed
        (raw({"stream": "s", "readings": []}), KEY, 422),
    ]
    for content, headers, code in refused:
        status, out, passed = run_adapter(client, "/ingest", headers, "POST", content)
        want = routes.post("/ingest", content=content, headers=headers)
        assert (status, out, passed) == (code, want.content, False)
    # nothing of the refused bodies was stored
    assert client.get("/risk/s", headers=KEY).json()["readings_total"] == 60
    assert client.get("/risk/t", headers=KEY).status_code == 404

    status, out, passed = run_adapter(client, "/risk/s", KEY)
    assert (status, passed) == (200, False)
    assert out == client.get("/risk/s", headers=KEY).content
    for path, headers, code in [
        ("/risk/nope", KEY, 404),
        ("/risk/s", {}, 401),
        ("/risk/s", {"X-API-Key": "k2"}, 401),
        ("/risk/bad{name}", KEY, 422),
    ]:
        want = routes.get(path, headers=headers)
        assert run_adapter(client, path, headers) == (code, want.content, False)
    for path, method in [("/risk/s/history", "GET"), ("/risk/s", "POST"),
                         ("/risk/s/", "GET"), ("/risk/", "GET"), ("/ingest", "GET")]:  # fmt: skip
        assert run_adapter(client, path, KEY, method) == (None, b"", True)


def run_adapter(client: TestClient, path: str, headers: dict[str, str] | None = None,
                method: str = "GET", content: bytes = b"") -> tuple[int | None, bytes, bool]:  # fmt: skip
    """Run FastPaths alone on a request: (status, body, whether it passed it on, with
    the request body intact)."""
    passed: list[bool] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": content, "more_body": False}

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        if method == "POST":  # what FastAPI would read
            assert (await receive())["body"] == content
        passed.append(True)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [
            (k.lower().encode(), v.encode()) for k, v in (headers or {}).items()
        ],
        "app": client.app,
    }
    client.portal.call(FastPaths(inner), scope, receive, send)  # type: ignore[union-attr]
    status = sent[0]["status"] if sent else None
    return status, b"".join(m.get("body", b"") for m in sent[1:]), bool(passed)


@pytest.mark.parametrize("fast_paths", [True, False])
def test_the_switch_picks_the_adapter(
    make_client: ClientFactory, fast_paths: bool
) -> None:
    client = make_client(fast_paths=fast_paths)
    stack = [m.cls for m in client.app.user_middleware]  # type: ignore[attr-defined]
    assert (FastPaths in stack) is fast_paths


@pytest.mark.parametrize("fast_paths", [True, False])
def test_a_bad_body_is_validated_once(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, fast_paths: bool
) -> None:
    client = make_client(fast_paths=fast_paths)
    calls = {"parse": 0, "model": 0, "prepare": 0}
    parse, model = handlers.parse_ingest, IngestRequest.model_validate
    scorer = client.app.state.scorer  # type: ignore[attr-defined]
    prepare = scorer.prepare

    def counted(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    monkeypatch.setattr(handlers, "parse_ingest", counted("parse", parse))
    monkeypatch.setattr(
        ingest_body.IngestRequest, "model_validate", counted("model", model)
    )
    monkeypatch.setattr(scorer, "prepare", counted("prepare", prepare))
    r = client.post("/ingest", content=raw({"stream": "s", "readings": []}))
    assert r.status_code == 422 and calls == {"parse": 1, "model": 1, "prepare": 0}
    r = client.post("/ingest", content=raw(body("s", series(3)[:, :2])))
    assert r.status_code == 422 and "expected 4 values" in r.text
    assert calls == {"parse": 2, "model": 1, "prepare": 1}


def metric_count(method: str, route: str, status: int) -> float:
    labels = {"method": method, "route": route, "status": str(status)}
    return REGISTRY.get_sample_value("scjepa_http_request_duration_seconds_count", labels) or 0.0  # fmt: skip


@pytest.mark.parametrize("fast_paths", [True, False])
def test_hot_routes_are_timed_under_their_template(
    make_client: ClientFactory, fast_paths: bool
) -> None:
    client = make_client(fast_paths=fast_paths)
    cases = [("POST", "/ingest", 200), ("POST", "/ingest", 422),
             ("GET", "/risk/{stream}", 200), ("GET", "/risk/{stream}", 404),
             ("GET", "/risk/{stream}", 422)]  # fmt: skip
    before = [metric_count(*c) for c in cases]
    client.post("/ingest", json=body("s", series(10)))
    client.post("/ingest", content=b"{")
    client.get("/risk/s")
    client.get("/risk/nope")
    client.get("/risk/bad{name}")
    after = [metric_count(*c) for c in cases]
    assert np.subtract(after, before).tolist() == [1.0] * len(cases)


@pytest.mark.parametrize("fast_paths", [True, False])
def test_wait_is_a_plain_number(make_client: ClientFactory, fast_paths: bool) -> None:
    """?wait= as the schema has it (a JSON number from 0 to the limit): an empty value,
    blanks, digit separators, infinities and words are refused by name, nothing
    stored; a plain number is taken."""
    client = make_client(fast_paths=fast_paths, **LIMITS)
    for value in ["", "%20", "1_0", "%201", "inf", "NaN", "-1", "one", "1e9"]:
        r = client.post(f"/ingest?wait={value}", content=raw(body("s", series(3))),
                        headers=KEY)  # fmt: skip
        assert r.status_code == 422, value
        (err,) = r.json()["detail"]
        assert err["loc"] == ["query", "wait"] and err["type"] == "wait_range"
    r = client.post("/ingest?wait=0.5", content=raw(body("s", series(3))), headers=KEY)
    assert r.status_code == 200 and r.json()["results"][0]["accepted"] == 3
