"""POST /ingest with a MessagePack body: columns of binary arrays (service.ingest_body.
parse_msgpack). The same readings as JSON give the same stored readings and scores; a
bad body is a 422 naming the field, and stores nothing."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.service_helpers import ClientFactory
from test_api import T0, V, body, series

MSGPACK = {"content-type": "application/msgpack"}


def columns(stream: str, x: np.ndarray, start: int = 0) -> dict[str, Any]:
    """One stream's readings as the MessagePack body's columns."""
    ts = T0 + start + np.arange(len(x), dtype=np.float64)
    return {
        "stream": stream,
        "ts": ts.astype("<f8").tobytes(),
        "values": np.ascontiguousarray(x, dtype="<f4").tobytes(),
    }


def post(client: TestClient, obj: Any, wait: float = 20, **headers: str) -> Any:
    return client.post(
        "/ingest",
        content=msgspec.msgpack.encode(obj),
        headers=MSGPACK | headers,
        params={"wait": wait},
    )


def without_name(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "stream"}


@pytest.mark.parametrize("fast_paths", [True, False])
def test_same_readings_as_json_give_the_same_scores(
    make_client: ClientFactory, fast_paths: bool
) -> None:
    client = make_client(fast_paths=fast_paths)
    x = series(130).astype(np.float32).astype(np.float64)  # exact in both bodies
    x[5, 1] = np.nan  # a missing value: null in JSON, NaN in the array
    for part in (slice(0, 99), slice(99, 130)):
        start = part.start
        by_json = client.post(
            "/ingest", json=body("j", x[part], start), params={"wait": 20}
        )
        by_pack = post(client, columns("m", x[part], start))
        assert by_json.status_code == by_pack.status_code == 200, by_pack.text
        (rj,) = by_json.json()["results"]
        (rm,) = by_pack.json()["results"]
        assert without_name(rm) == without_name(rj)
    assert rm["windows_scored"] == 1 and rm["risk"] is not None
    risk_j, risk_m = client.get("/risk/j").json(), client.get("/risk/m").json()
    for key in ("risk", "readings_total", "window_end", "top_channels", "alert"):
        assert risk_m[key] == risk_j[key]


def test_batch_form_and_media_type_aliases(client: TestClient) -> None:
    x = series(100)
    obj = {"streams": [columns("a", x), columns("b", x[:40])]}
    r = post(client, obj, **{"content-type": "application/vnd.msgpack"})
    assert r.status_code == 200, r.text
    a, b = r.json()["results"]
    assert (a["stream"], a["accepted"], a["windows_scored"]) == ("a", 100, 1)
    assert (b["stream"], b["accepted"], b["windows_scored"]) == ("b", 40, 0)
    r = post(
        client, columns("b", x[40:], 40), **{"content-type": "application/x-msgpack"}
    )
    assert r.json()["results"][0]["windows_scored"] == 1


GOOD = columns("s", series(2), start=100)
TS2 = GOOD["ts"]


@pytest.mark.parametrize(
    ("obj", "loc", "words"),
    [
        (GOOD | {"ts": "1700000000"}, ["body", "ts"], "Expected `bytes`"),
        (GOOD | {"ts": TS2[:12]}, ["body", "ts"], "8 bytes"),
        (GOOD | {"ts": b""}, ["body", "ts"], "at least one"),
        (GOOD | {"values": GOOD["values"][:-2]}, ["body", "values"], "float32"),
        (GOOD | {"values": GOOD["values"][: 4 * 6]}, ["body", "values"],
         f"expected {V} values per reading"),
        (GOOD | {"ts": TS2[8:] + TS2[:8]}, ["body", "ts", 1],
         f"ts[1] = {T0 + 100!r} is not greater than ts[0] = {T0 + 101!r}"),  # not np.float64
        (GOOD | {"ts": np.array([np.nan, T0], "<f8").tobytes()}, ["body", "ts", 0], "finite"),
        (GOOD | {"ts": np.array([T0, 1e12], "<f8").tobytes()}, ["body", "ts", 1], "ahead"),
        (GOOD | {"values": np.array([1, 2, 3, np.inf] * 2, "<f4").tobytes()},
         ["body", "values", 0, 3], "infinite"),
        (GOOD | {"extra": 1}, ["body"], "unknown field `extra`"),
        (GOOD | {"stream": "bad/name"}, ["body", "stream"], "pattern"),
        ({"stream": "s", "ts": TS2}, ["body", "values"], "Field required"),
        ({}, ["body"], "either"),
        (GOOD | {"streams": [GOOD]}, ["body"], "not both"),
        ({"streams": []}, ["body", "streams"], "length"),
        ({"streams": [GOOD, GOOD]}, ["body", "streams"], "more than once"),
        ({"streams": [GOOD, GOOD | {"stream": "t", "values": b"\0" * 4}]},
         ["body", "streams", 1, "values"], "float32"),
        ([GOOD], ["body"], "Expected `object`"),
    ],
)  # fmt: skip
def test_bad_body_is_422_naming_the_field(
    client: TestClient, obj: Any, loc: list[Any], words: str
) -> None:
    assert post(client, columns("s", series(50))).json()["results"][0]["accepted"] == 50
    r = post(client, obj)
    assert r.status_code == 422, r.text
    (err,) = r.json()["detail"]
    assert err["loc"] == loc and words in err["msg"], err
    # a rejected request stores nothing and loses nothing
    assert client.get("/risk/s").json()["readings_total"] == 50
    assert client.get("/risk/t").status_code == 404


def test_bytes_that_are_not_msgpack_are_422(client: TestClient) -> None:
    rng = np.random.default_rng(0)
    good = msgspec.msgpack.encode(columns("s", series(3)))
    bodies = [b"", b"\xc1", b'{"stream": "s"}', good + b"\x00", good[:-5]]
    bodies += [rng.bytes(int(rng.integers(1, 64))) for _ in range(200)]
    for raw in bodies:  # malformed, truncated, trailing bytes, noise
        r = client.post("/ingest", content=raw, headers=MSGPACK)
        assert r.status_code == 422, (raw, r.text)
        assert r.json()["detail"][0]["loc"][0] == "body"
    assert client.get("/risk/s").status_code == 404


def test_openapi_documents_both_body_formats(client: TestClient) -> None:
    post_ = client.get("/openapi.json").json()["paths"]["/ingest"]["post"]
    content = post_["requestBody"]["content"]
    assert set(content) == {"application/json", "application/msgpack"}
    props = content["application/msgpack"]["schema"]["properties"]
    assert {"stream", "ts", "values", "streams"} == set(props)
