"""What keeps the hot routes cheap: POST /ingest bodies validated without a model per
reading (service.ingest_body), GET /risk in one store round trip as plain JSON, and the
niced inference thread. Their two adapters: test_hot_routes.py."""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from fastapi.testclient import TestClient
from pydantic import ValidationError
from test_api import T0, body, ingest, series

from service import ingest_body
from service.batcher import inference_executor
from service.ingest_body import StreamBody, parse_ingest
from service.schemas import IngestRequest, RiskRecord, RiskResponse


def by_model(obj: Any) -> tuple[list[StreamBody], bool] | list[Any]:
    """What IngestRequest itself makes of ``obj``: the streams, or its errors."""
    try:
        m = IngestRequest.model_validate(obj)
    except ValidationError as e:
        return [(("body", *x["loc"]), x["msg"]) for x in e.errors()]
    items = [
        StreamBody(s.stream, [r.ts for r in s.readings], [r.values for r in s.readings])
        for s in m.items()
    ]
    return items, m.streams is not None


def by_parser(obj: Any) -> tuple[list[StreamBody], bool] | list[Any]:
    try:
        return parse_ingest(json.dumps(obj).encode())
    except RequestValidationError as e:
        return [(tuple(x["loc"]), x["msg"]) for x in e.errors()]


R = [{"ts": T0, "values": [1, 2.5, None, 4]}, {"ts": T0 + 1, "values": [1, 2, 3, 4]}]
BODIES = [
    {"stream": "s", "readings": R},  # the single form
    {"streams": [{"stream": "a", "readings": R}, {"stream": "b", "readings": R[:1]}]},
    {"stream": "s", "readings": R, "streams": None},  # null streams: the single form
    {"stream": "s", "readings": R, "extra": 1},  # unknown keys are ignored
    {"stream": "s", "readings": [{"ts": 1, "values": [True, "2.5", 3, 4]}]},  # lax
    {"stream": "s", "readings": [{"ts": "1.5", "values": [1, 2, 3, 4]}]},
    # refused, each for its own reason
    {"stream": "s", "readings": [R[1], R[0]]},  # timestamps not increasing
    {"stream": "s", "readings": [{"ts": T0, "values": [1, 2, 3, 4]}] * 2},  # equal
    {"stream": "s", "readings": []},
    {"stream": "bad/name", "readings": R},
    {"readings": R},
    {"stream": "s"},
    {"stream": "s", "readings": R, "streams": [{"stream": "t", "readings": R}]},
    {"streams": []},
    {"streams": [{"stream": "a", "readings": R}, {"stream": "a", "readings": R}]},
    {"stream": "s", "readings": [{"ts": float("inf"), "values": [1, 2, 3, 4]}]},
    {"stream": "s", "readings": [{"ts": T0, "values": []}]},
    {"stream": "s", "readings": [{"ts": T0, "values": [1, {}, 3, 4]}]},
    {"stream": "s", "readings": [{"ts": T0}]},
    [1, 2],
    None,
    # the one-stream shape decoded and type-checked by msgspec (ingest_body._one_stream)
    {"stream": "s", "readings": [{"ts": 1, "values": [1, None, 3, 4]}, R[1]]},
    {"stream": "s", "readings": [{"ts": 2.5, "values": [0, 0, 0, 2**64]}]},
    {"stream": "s", "readings": [{"ts": True, "values": [1, 2, 3, 4]}]},
    {"stream": "s", "readings": [{"ts": -1, "values": [1, 2, 3, 4]}]},
    {"stream": "s", "readings": [{"ts": None, "values": [1, 2, 3, 4]}]},
    {"stream": "s", "readings": [{"ts": T0, "values": [[1], 2, 3, 4]}]},
    {"stream": "s", "readings": [{"ts": T0, "values": [1, 2, 3, False]}]},
    {"stream": "s", "readings": [{"ts": T0, "values": [1, 2, 3, 4], "n": 0}]},
    {"stream": "s", "readings": [{"ts": T0, "values": [1, 2, 3, 4]}, 5]},
    {"stream": "s", "readings": [{"values": [1, 2, 3, 4], "x": T0}]},
    {"stream": "s", "readings": {"ts": T0, "values": [1, 2, 3, 4]}},
    {"stream": 5, "readings": R},
    {"stream": "s\n", "readings": R},
    {"stream": "s", "readings": [{"ts": T0, "values": None}]},
    {
        "stream": "s",
        "readings": [{"ts": T0 + 1, "values": [1]}, {"ts": T0, "values": [1]}],
    },
]


@pytest.mark.parametrize("obj", BODIES)
def test_parser_agrees_with_the_model(obj: Any) -> None:
    """Same streams when the model accepts; the model's errors, under body, when not."""
    assert by_parser(obj) == by_model(obj)


def test_plain_bodies_skip_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model was built for a plain body")

    monkeypatch.setattr(ingest_body.IngestRequest, "model_validate", refuse)
    for obj in BODIES[:2]:
        items, _ = parse_ingest(json.dumps(obj).encode())
        assert [len(i.ts) for i in items] == [len(s["readings"]) for s in items_of(obj)]


def test_one_stream_bodies_skip_pydantic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual body (one stream) is decoded by msgspec alone; what it cannot vouch
    for (Infinity here, which the model takes and prepare() refuses) goes on to the
    next reader, which agrees with the model."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("pydantic read a one-stream body")

    obj = BODIES[0]
    with monkeypatch.context() as m:
        m.setattr(ingest_body._PLAIN, "validate_json", refuse)
        assert parse_ingest(json.dumps(obj).encode()) == by_model(obj)
    inf = {"stream": "s", "readings": [{"ts": T0, "values": [float("inf"), 1]}]}
    assert ingest_body._one_stream(json.dumps(inf).encode()) is None
    assert by_parser(inf) == by_model(inf)


RAW = [  # bodies json.dumps does not write: the fast reader agrees with the model's
    b'{"stream": "a", "stream": "s", "readings": [{"ts": 5, "values": [1, 2, 3, 4]}]}',
    b'{"stream": "s", "readings": [{"ts": 5, "ts": 6, "values": [1, 2, 3, 4]}]}',
    b'{"stream": "s", "readings": [{"ts": 5, "values": [1, 2, 3, 100000000000000000000000]}]}',
    b'{"stream": "s", "readings": [{"ts": 5, "values": [1, 2, 3, 1e400]}]}',
    b'{"stream": "s", "readings": [{"ts": 5, "values": [1, 2, 3, NaN]}]}',
    b'{"stream": "s\\u0000", "readings": [{"ts": 5, "values": [1, 2, 3, 4]}]}',
    b'\xef\xbb\xbf{"stream": "s", "readings": [{"ts": 5, "values": [1, 2, 3, 4]}]}',
    b' {"stream":"s","readings":[{"values":[1,2,3,4],"ts":5}]} \n',
    b'{"stream": "s\xff", "readings": [{"ts": 5, "values": [1, 2, 3, 4]}]}',
]


def _outcome(read: Any, raw: bytes) -> Any:
    try:
        return read(raw)
    except RequestValidationError as e:
        return [(tuple(x["loc"]), x["msg"]) for x in e.errors()]


@pytest.mark.parametrize("raw", RAW)
def test_fast_reader_agrees_with_the_model_on_raw_bytes(raw: bytes) -> None:
    # repr: a NaN the model takes (a missing value) compares unequal to itself
    assert repr(_outcome(parse_ingest, raw)) == repr(
        _outcome(ingest_body._by_model, raw)
    )


def items_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj.get("streams", [obj]))


def test_empty_and_malformed_bodies() -> None:
    with pytest.raises(RequestValidationError) as e:
        parse_ingest(b"")
    assert e.value.errors()[0]["loc"] == ("body",)
    with pytest.raises(RequestValidationError) as e:
        parse_ingest(b'{"stream": "s",,}')
    (err,) = e.value.errors()
    assert err["type"] == "json_invalid" and err["loc"] == ("body", 15)


def test_ingest_documents_its_body(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    content = spec["paths"]["/ingest"]["post"]["requestBody"]["content"]
    ref = content["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/IngestRequest"
    schemas = spec["components"]["schemas"]
    assert {"IngestRequest", "StreamReadings", "Reading"} <= set(schemas)
    ok = spec["paths"]["/ingest"]["post"]["responses"]["200"]["content"]
    assert ok["application/json"]["schema"]["$ref"].endswith("/IngestResponse")


def test_risk_body_is_a_risk_response(client: TestClient) -> None:
    ingest(client, "s", series(60))
    warm = client.get("/risk/s")
    assert warm.headers["content-type"] == "application/json"
    w = RiskResponse.model_validate_json(warm.content)
    assert (w.status, w.readings_total, w.readings_buffered) == ("warming_up", 60, 60)
    assert w.progress == 0.6 and w.risk is None and w.model.name == "tiny"
    assert list(warm.json()) == list(RiskResponse.model_fields)  # every field, in order

    res = ingest(client, "s", series(40, start=60), start=60)
    r = client.get("/risk/s")
    got = RiskResponse.model_validate_json(r.content)
    (rec,) = [RiskRecord(**x) for x in client.get("/risk/s/history").json()["items"]]
    assert got.status == "ok" and got.readings_total == 100 and got.progress == 1.0
    assert got.risk == res["risk"] == rec.risk and got.alert == rec.alert
    assert (got.window_start, got.window_end) == (T0, T0 + 99)
    assert got.top_channels == rec.top_channels
    assert got.computed_at == rec.computed_at and got.model == rec.model
    assert list(r.json()) == list(RiskResponse.model_fields)


def test_store_latest_is_state_and_newest_record(client: TestClient) -> None:
    store = client.app.state.store  # type: ignore[attr-defined]
    call = client.portal.call  # type: ignore[union-attr]
    assert call(store.latest, "default", "nope") == (None, None)
    client.post("/ingest?wait=20", json=body("s", series(250)))
    state, rec = call(store.latest, "default", "s")
    assert state == call(store.state, "default", "s")
    assert rec == call(store.risks, "default", "s", 1)[0]
    assert json.loads(rec)["n"] == 200


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")
def test_inference_thread_is_niced() -> None:
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = nice()
    for step, want in ((0, base), (5, min(base + 5, 19))):
        pool = inference_executor(step)
        try:
            assert pool.submit(nice).result() == want
        finally:
            pool.shutdown()
    assert nice() == base  # the caller's thread keeps its priority


def test_risk_reads_are_timed_under_the_route(client: TestClient) -> None:
    client.post("/ingest", json=body("s", series(10)))
    for _ in range(3):
        assert client.get("/risk/s").status_code == 200
    text = client.get("/metrics").text
    assert 'route="/risk/{stream}",status="200"' in text
