"""The HTTP API against both stores (in-memory and a real redis-server)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from support.service_helpers import AnyRedis, ClientFactory

from service.config import Settings
from service.main import create_app
from service.store.redis_store import partition

V = 4  # the test artifact's channels: a, b, c, flat (masked)
T0 = 1_700_000_000.0


def series(n: int, start: int = 0, seed: int = 0) -> np.ndarray:
    """(n, V) readings, 4 decimals so they survive JSON/Lua round trips exactly."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(start + n, V)) * np.array([1.0, 3.0, 0.5, 0.0]) + 2.0
    return np.round(x[start:], 4)


def body(stream: str, x: np.ndarray, start: int = 0) -> dict[str, Any]:
    return {
        "stream": stream,
        "readings": [
            {
                "ts": T0 + start + i,
                "values": [None if np.isnan(v) else float(v) for v in row],
            }
            for i, row in enumerate(x)
        ],
    }


WAIT = {"wait": 20}  # POST /ingest?wait=20: answer with the windows' scores


def ingest(
    client: TestClient, stream: str, x: np.ndarray, start: int = 0, wait: float = 20
) -> dict[str, Any]:
    r = client.post("/ingest", json=body(stream, x, start), params={"wait": wait})
    assert r.status_code == 200, r.text
    (result,) = r.json()["results"]
    return dict(result)


def direct_risk(client: TestClient, window: np.ndarray) -> float:
    model = client.app.state.model  # type: ignore[attr-defined]
    return float(model.score(window.astype(np.float32)[None]).risk[0])


def test_ingest_to_first_score(client: TestClient) -> None:
    x = series(100)
    res = ingest(client, "pump-7", x[:99])
    assert (res["accepted"], res["windows_scored"], res["risk"]) == (99, 0, None)

    r = client.get("/risk/pump-7")
    assert r.status_code == 200
    warm = r.json()
    assert warm["status"] == "warming_up"
    assert warm["readings_buffered"] == 99
    assert warm["progress"] == pytest.approx(0.99)
    assert warm["risk"] is None

    res = ingest(client, "pump-7", x[99:], start=99)
    assert (res["accepted"], res["windows_completed"], res["windows_scored"]) == (
        1,
        1,
        1,
    )
    expected = direct_risk(client, x)
    assert res["risk"] == pytest.approx(expected, abs=1e-6)

    out = client.get("/risk/pump-7").json()
    assert out["status"] == "ok"
    assert out["risk"] == pytest.approx(expected, abs=1e-6)
    assert out["alert"] == (expected >= out["threshold"])
    assert (out["window_start"], out["window_end"]) == (T0, T0 + 99)
    assert out["model"] == {"name": "tiny", "version": "0.0.1"}
    names = [c["name"] for c in out["top_channels"]]
    assert names and set(names) <= {"a", "b", "c"}  # "flat" is masked
    assert out["computed_at"] is not None


def test_hop_scores_every_completed_window(make_client: ClientFactory) -> None:
    client = make_client(hop=10)
    x = series(140)
    res = ingest(client, "s", x[:130])
    assert (res["windows_completed"], res["windows_scored"]) == (4, 4)  # 100..130
    hist = client.get("/risk/s/history", params={"limit": 10}).json()["items"]
    assert [h["n"] for h in hist] == [130, 120, 110, 100]
    for h in hist:
        n = h["n"]
        assert (h["window_start"], h["window_end"]) == (T0 + n - 100, T0 + n - 1)
        assert h["risk"] == pytest.approx(direct_risk(client, x[n - 100 : n]), abs=1e-6)
    assert ingest(client, "s", x[130:135], start=130)["windows_scored"] == 0
    assert ingest(client, "s", x[135:140], start=135)["windows_scored"] == 1
    assert client.get("/risk/s").json()["window_end"] == T0 + 139


def test_ingest_answers_once_queued_and_scores_arrive_later(
    client: TestClient,
) -> None:
    """Without ?wait= the answer comes once the readings are stored and the windows
    queued; GET /risk shows the score when the scorer has written it."""
    x = series(200)
    res = ingest(client, "s", x, wait=0)
    assert (res["windows_completed"], res["windows_queued"]) == (2, 2)
    assert res["windows_shed"] == 0
    for _ in range(200):
        hist = client.get("/risk/s/history").json()["items"]
        if len(hist) == 2:
            break
        time.sleep(0.02)
    assert [h["n"] for h in hist] == [200, 100]
    assert client.get("/risk/s").json()["window_end"] == T0 + 199


def test_backfill_scores_every_window(client: TestClient) -> None:
    """One 10,000-reading POST to a new stream (the request limit) queues and scores
    all of its windows, not only the latest few."""
    x = series(10_000)
    res = ingest(client, "backfill", x, wait=30)
    assert (res["accepted"], res["windows_completed"]) == (10_000, 100)
    assert (res["windows_queued"], res["windows_scored"], res["windows_shed"]) == (
        100, 100, 0,
    )  # fmt: skip
    hist = client.get("/risk/backfill/history", params={"limit": 500}).json()["items"]
    assert sorted(h["n"] for h in hist) == list(range(100, 10_001, 100))
    for h in hist[::33]:
        n = h["n"]
        assert h["risk"] == pytest.approx(direct_risk(client, x[n - 100 : n]), abs=1e-6)


def test_backpressure_keeps_readings_and_scores_the_newest(
    make_client: ClientFactory,
) -> None:
    """Past SCJEPA_MAX_QUEUED_WINDOWS an ingest queues only its newest window per
    stream; the others are shed (counted, in the answer and the metric) and every
    reading is kept."""
    client = make_client(hop=10, max_queued_windows=3, work_partitions=1)
    shed = metric("scjepa_windows_shed_total", {"reason": "backpressure"})
    # stop the scorer, so that the queue fills
    worker = client.app.state.worker  # type: ignore[attr-defined]
    client.portal.call(worker.stop)  # type: ignore[union-attr]
    res = ingest(client, "s", series(200), wait=0)  # 11 windows: 100, 110, ..., 200
    assert (res["accepted"], res["windows_completed"]) == (200, 11)
    assert (res["windows_queued"], res["windows_shed"]) == (3, 8)
    res = ingest(client, "s", series(20, start=200), start=200, wait=0)  # 210, 220
    assert (res["windows_queued"], res["windows_shed"]) == (1, 1)  # the newest: 220
    assert metric("scjepa_windows_shed_total", {"reason": "backpressure"}) - shed == 9
    assert client.get("/risk/s").json()["readings_total"] == 220
    client.portal.call(worker.start)  # type: ignore[union-attr]
    for _ in range(300):
        hist = client.get("/risk/s/history").json()["items"]
        if len(hist) == 4:
            break
        time.sleep(0.02)
    assert sorted(h["n"] for h in hist) == [180, 190, 200, 220]


def test_duplicates_and_late_readings(client: TestClient) -> None:
    x = series(60)
    assert ingest(client, "s", x[:50])["accepted"] == 50
    res = ingest(client, "s", x[40:60], start=40)  # a retry overlapping new data
    assert (res["accepted"], res["duplicates"], res["rejected"]) == (10, 10, 0)
    late = {"stream": "s", "readings": [{"ts": T0 + 5.5, "values": [1, 2, 3, 4]}]}
    res = client.post("/ingest", json=late).json()["results"][0]
    assert (res["accepted"], res["duplicates"], res["rejected"]) == (0, 0, 1)
    res = ingest(client, "s", x[:60])  # the whole series again: all duplicates
    assert (res["accepted"], res["duplicates"], res["readings_total"]) == (0, 60, 60)
    assert client.get("/risk/s").json()["readings_buffered"] == 60


def test_large_request_is_stored_whole_and_deduped(client: TestClient) -> None:
    """More readings than one variadic Redis push takes (the script chunks them)."""
    x = series(4500)
    res = ingest(client, "big", x)
    assert (res["accepted"], res["readings_total"]) == (4500, 4500)
    assert res["windows_completed"] == 45 and res["window_end"] == T0 + 4499
    res = ingest(client, "big", x)  # a retry of the whole request stores nothing
    assert (res["accepted"], res["duplicates"]) == (0, 4500)
    assert client.get("/risk/big").json()["readings_buffered"] == 100
    # the latest window is the last 100 readings, exactly
    assert client.get("/risk/big").json()["risk"] == pytest.approx(
        direct_risk(client, x[-100:]), abs=1e-6
    )


def test_missing_values_are_forward_filled(client: TestClient) -> None:
    x = series(100)
    sent = x.copy()
    sent[:3, 1] = np.nan  # leading gap: the window's first observed value
    sent[50:55, 0] = np.nan  # gap: the last accepted value
    sent[99, 2] = np.nan  # in the reading that completes the window
    filled = x.copy()
    filled[:3, 1] = x[3, 1]
    filled[50:55, 0] = x[49, 0]
    filled[99, 2] = x[98, 2]
    ingest(client, "s", sent[:50])
    res = ingest(client, "s", sent[50:], start=50)  # fill crosses the request border
    assert res["risk"] == pytest.approx(direct_risk(client, filled), abs=1e-6)


def test_batch_form_and_streams(client: TestClient) -> None:
    x = series(100)
    req = {"streams": [body("a-1", x), body("b-2", x[:10])]}
    r = client.post("/ingest", json=req, params=WAIT)
    assert r.status_code == 200
    res = {s["stream"]: s for s in r.json()["results"]}
    assert res["a-1"]["windows_scored"] == 1 and res["b-2"]["windows_scored"] == 0
    assert res["b-2"]["accepted"] == 10
    assert client.get("/streams").json()["streams"] == ["a-1", "b-2"]
    assert client.get("/risk/b-2").json()["status"] == "warming_up"


def test_unknown_stream_is_404(client: TestClient) -> None:
    for path in ("/risk/nope", "/risk/nope/history"):
        r = client.get(path)
        assert r.status_code == 404
        assert "nope" in r.json()["detail"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"stream": "s", "readings": [{"ts": T0, "values": [1, 2, 3]}]}, "values"),
        ({"stream": "s", "readings": [{"ts": T0, "values": [1, 2, 3, 1e999]}]}, "values"),
        ({"stream": "s", "readings": [{"ts": T0, "values": [1, 2, 3, 1e39]}]}, "float32"),
        ({"stream": "s", "readings": [{"ts": T0 + 1, "values": [1, 2, 3, 4]},
                                      {"ts": T0, "values": [1, 2, 3, 4]}]}, "ts"),
        ({"stream": "s", "readings": [{"values": [1, 2, 3, 4]}]}, "ts"),
        ({"stream": "bad/{name}", "readings": [{"ts": T0, "values": [1, 2, 3, 4]}]}, "stream"),
        ({"readings": [{"ts": T0, "values": [1, 2, 3, 4]}]}, "stream"),
        ({"streams": [body("s", series(2)), body("s", series(2))]}, "streams"),
        ({"streams": [body("s", series(2)), {"stream": "t", "readings": [
            {"ts": T0, "values": [1]}]}]}, "values"),
    ],
)  # fmt: skip
def test_bad_input_is_422_naming_the_field(
    client: TestClient, payload: dict[str, Any], field: str
) -> None:
    assert ingest(client, "s", series(50))["accepted"] == 50
    r = client.post(  # json.dumps writes inf as Infinity, which the server parses
        "/ingest",
        content=json.dumps(payload),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/json"
    assert field in r.text
    assert "Traceback" not in r.text
    # a rejected request stores nothing and loses nothing
    assert client.get("/risk/s").json()["readings_total"] == 50
    assert client.get("/risk/t").status_code == 404


def test_malformed_json_is_422_with_its_position(client: TestClient) -> None:
    r = client.post(
        "/ingest",
        content=b'{"stream": "s", "readings": [{"ts": 1, "values": [1, 2,,]}]}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    # the position of the second comma
    assert err["type"] == "json_invalid" and err["loc"] == ["body", 55]


def test_channel_count_error_location(client: TestClient) -> None:
    payload = {"streams": [body("ok", series(2)), {"stream": "t", "readings": [
        {"ts": T0, "values": [1, 2, 3, 4]}, {"ts": T0 + 1, "values": [1]}]}]}  # fmt: skip
    detail = client.post("/ingest", json=payload).json()["detail"]
    assert detail[0]["loc"] == ["body", "streams", 1, "readings", 1, "values"]
    assert "expected 4 values" in detail[0]["msg"]


def test_limits(make_client: ClientFactory) -> None:
    client = make_client(max_readings_per_request=10, max_body_bytes=4096)
    r = client.post("/ingest", json=body("s", series(11)))
    assert r.status_code == 413 and "10" in r.json()["detail"]
    r = client.post("/ingest", content=b"{" + b" " * 5000 + b"}",
                    headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 413 and "bytes" in r.json()["detail"]


def metric(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def test_metrics(client: TestClient) -> None:
    def readings(outcome: str) -> float:  # an open service: the tenant is "default"
        return metric(
            "scjepa_readings_total", {"outcome": outcome, "tenant": "default"}
        )

    before = {o: readings(o) for o in ("accepted", "duplicate", "rejected")}
    scored = metric("scjepa_windows_scored_total", {"tenant": "default"})
    batches = metric("scjepa_inference_batch_size_count")
    res = ingest(client, "secret-stream-id", series(120))
    ingest(client, "secret-stream-id", series(10))  # 10 duplicates
    ingest(client, "warming", series(10))
    client.get("/risk/secret-stream-id")
    assert readings("accepted") - before["accepted"] == 130
    assert readings("duplicate") - before["duplicate"] == 10
    assert readings("rejected") == before["rejected"]
    assert metric("scjepa_windows_scored_total", {"tenant": "default"}) - scored == 1
    assert metric("scjepa_inference_batch_size_count") - batches == 1

    text = client.get("/metrics").text
    # store-wide gauges, refreshed by the scrape
    assert metric("scjepa_streams_tracked") == 2
    assert metric("scjepa_streams_in_alert") == int(res["alert"])
    assert metric("scjepa_max_risk") == pytest.approx(res["risk"])
    for name in (
        "scjepa_http_request_duration_seconds_bucket",
        "scjepa_inference_duration_seconds_bucket",
        "scjepa_scorer_batch_seconds_bucket",
        "scjepa_work_queue_depth",
        "scjepa_work_queue_oldest_age_seconds",
        "scjepa_windows_shed_total",
        "scjepa_store_duration_seconds_bucket"
        if client.app.state.settings.redis_url
        else "",  # type: ignore[attr-defined]
        "scjepa_streams_tracked",
        "scjepa_streams_in_alert",
        "scjepa_max_risk",
        "scjepa_inference_info{",
        'le="0.0001"',
        'route="/risk/{stream}"',
    ):
        assert name in text, name
    assert 'provider="CPUExecutionProvider"' in text
    # a stream id labels the bounded top-streams gauge only (SCJEPA_TOP_STREAMS)
    named = [line for line in text.splitlines() if "secret-stream-id" in line]
    assert named and all(n.startswith("scjepa_top_stream_risk{") for n in named), named


def test_api_keys(make_client: ClientFactory) -> None:
    client = make_client(api_keys=["k1", "k2"])
    assert client.get("/streams").status_code == 401
    assert client.get("/streams", headers={"X-API-Key": "nope"}).status_code == 401
    assert client.get("/streams", headers={"X-API-Key": "k2"}).status_code == 200
    assert client.get("/healthz").status_code == 200  # probes stay open


def test_models_and_openapi(client: TestClient) -> None:
    (m,) = client.get("/models").json()["models"]
    assert m["provider"] == "CPUExecutionProvider" and m["warmed"] is True
    assert m["manifest"]["name"] == "tiny"
    assert m["manifest"]["model_config"] == {"window": 100, "n_patches": 5}
    # 3 kept channels x 5 patches = 15 tokens a window: 512 // 15 = 34 per CPU run
    assert (m["max_batch"], m["windows_per_run"]) == (64, 34)
    assert m["parallel_runs"] == 1  # one intra-op thread (the default)
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/ingest", "/risk/{stream}", "/risk/{stream}/history", "/streams",
            "/healthz", "/readyz", "/models"} <= set(paths)  # fmt: skip


def test_readyz(client: TestClient) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200
    checks = r.json()["checks"]
    assert checks["provider"] == "CPUExecutionProvider"
    assert checks["model"] is True and checks["store"] is True
    assert checks["batcher"] is True
    worker = client.app.state.worker  # type: ignore[attr-defined]
    client.portal.call(worker.stop)  # type: ignore[union-attr]
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["checks"]["batcher"] is False


def test_history_is_capped(make_client: ClientFactory) -> None:
    """Only the newest SCJEPA_HISTORY_LEN records are kept; a ?wait= call counts the
    windows scored whose records the cap trimmed at once, and answers when all are
    scored, not at its deadline."""
    client = make_client(hop=10, history_len=3)
    start = time.monotonic()
    res = ingest(client, "s", series(150), wait=20)  # windows end at 100, ..., 150
    assert time.monotonic() - start < 20  # not waited out: 100-120's records are gone
    counts = (res["windows_queued"], res["windows_scored"], res["window_n"])
    assert counts == (6, 6, 150)
    hist = client.get("/risk/s/history", params={"limit": 50}).json()["items"]
    assert [h["n"] for h in hist] == [150, 140, 130]
    assert client.get("/risk/s/history", params={"limit": 0}).status_code == 422


def test_redis_keys_hash_tag_trim_and_ttl(
    any_redis: AnyRedis, artifact_dir: Path
) -> None:
    p = "layout"
    settings = Settings(artifact=artifact_dir, redis_url=any_redis.url, key_prefix=p,
                        stream_ttl_s=600)  # fmt: skip
    with TestClient(create_app(settings)) as client:
        x = series(130)
        ingest(client, "pump-7", x)
    r = any_redis.client()
    keys = sorted(k.decode() for k in r.scan_iter(f"{p}:*"))
    # every stream key carries the tenant (here the default one, no keys configured)
    # and its partition's hash tag, which its work queue's key shares
    tag = f"{p}:{{p{partition('default', 'pump-7', 16)}}}"
    # (alerts: its one window is in alert, at the test model's threshold 0.5)
    parts = ("alerts", "risk", "rows", "seen", "state")
    tagged = [f"{tag}:default/pump-7:{k}" for k in parts]
    tenant = [f"{p}:{{default}}:{k}" for k in ("names", "touched")]
    shared = [f"{p}:{{global}}:{k}" for k in ("latest", "latest_at", "streams")]
    shared.append(f"{p}:{{global}}:latest:default")  # the tenant's own latest risks
    work = [f"{p}:{{p{i}}}:work" for i in range(16)]  # the work queue's partitions
    assert keys == sorted([*shared, *tenant, *tagged, *work])
    assert r.llen(f"{tag}:default/pump-7:rows") == 100  # trimmed to the window
    # a row is packed little-endian: float64 ts, then the V values as float32
    last = r.lindex(f"{tag}:default/pump-7:rows", -1)
    assert len(last) == 8 + 4 * x.shape[1]
    assert np.frombuffer(last[:8], "<f8")[0] == T0 + 129
    np.testing.assert_array_equal(np.frombuffer(last[8:], "<f4"), x[-1].astype("f4"))
    # the dedupe horizon (10,000): accepted timestamps packed, 8 bytes each
    seen = np.frombuffer(r.get(f"{tag}:default/pump-7:seen"), "<f8")
    np.testing.assert_array_equal(seen, T0 + np.arange(130))
    assert r.xlen(f"{tag}:work") == 0  # scored, acknowledged and deleted
    for k in tagged + tenant:
        assert 0 < r.ttl(k) <= 600  # idle streams expire


def test_concurrent_retries_store_each_reading_once(
    store_url: str | None, artifact_dir: Path
) -> None:
    """Five copies of one request racing: exactly one set of readings is stored."""
    settings = Settings(artifact=artifact_dir, redis_url=store_url, key_prefix="race",
                        hop=10)  # fmt: skip
    payload = body("s", series(120))

    async def main() -> list[dict[str, Any]]:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                rs = await asyncio.gather(
                    *(c.post("/ingest", json=payload, params=WAIT) for _ in range(5))
                )
                hist = (await c.get("/risk/s/history")).json()["items"]
        assert all(r.status_code == 200 for r in rs)
        return [r.json()["results"][0] for r in rs] + [{"hist": hist}]

    *results, last = asyncio.run(main())
    assert sum(r["accepted"] for r in results) == 120
    assert sum(r["duplicates"] for r in results) == 4 * 120
    assert sum(r["windows_scored"] for r in results) == 3  # 100, 110, 120, each once
    assert sorted(h["n"] for h in last["hist"]) == [100, 110, 120]


@pytest.mark.parametrize("news_during_append", [False, True])
def test_wait_reads_the_store_first_only_if_news_came_during_the_append(
    store_url: str | None, artifact_dir: Path, news_during_append: bool
) -> None:
    """A ?wait= call whose windows were just queued reads their records once the news
    says they are scored: no read before (none can be scored unreported, as the call
    waits before the next news is delivered). Unless news came while the readings
    were being stored: one of its windows may be among them, so it reads first."""
    settings = Settings(artifact=artifact_dir, redis_url=store_url, hop=10,
                        key_prefix=f"r{uuid.uuid4().hex[:8]}", role="api")  # fmt: skip

    async def main() -> tuple[dict[str, Any], int, int]:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            bus, store = app.state.scorer.bus, app.state.store
            reads = 0
            scored, append_many = store.scored, store.append_many

            async def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal reads
                reads += 1
                return await scored(*args, **kwargs)

            async def with_news(*args: Any, **kwargs: Any) -> Any:
                out = await append_many(*args, **kwargs)
                if news_during_append:  # another stream's, delivered meanwhile
                    bus.deliver([("default", "other", [100])])
                return out

            store.scored, store.append_many = counted, with_news
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                post = asyncio.create_task(c.post(
                    "/ingest", json=body("s", series(110)), params={"wait": 30}
                ))  # fmt: skip
                start = time.monotonic()
                while ("default", "s") not in bus._waits:  # the call waits now
                    assert time.monotonic() - start < 20 and not post.done()
                    await asyncio.sleep(0)
                await asyncio.sleep(0.2)  # a first read, if any, is answered
                before = reads
                bus.deliver([("default", "s", [100, 110])])
                r = await post
                return r.json()["results"][0], before, reads

    res, before, reads = asyncio.run(main())
    assert (res["windows_queued"], res["windows_scored"]) == (2, 2)
    assert (before, reads) == ((1, 2) if news_during_append else (0, 1))


def test_wait_ends_when_each_window_is_known_scored(
    store_url: str | None, artifact_dir: Path
) -> None:
    """?wait= answers once each window of the call is known scored, by its record or
    by the news of scored windows alone (a record the history cap trimmed is gone):
    not while one is still to be scored, not at its deadline once all are. An API
    process without a scorer (role api); the news is delivered by hand."""
    settings = Settings(artifact=artifact_dir, redis_url=store_url, hop=10,
                        key_prefix=f"w{uuid.uuid4().hex[:8]}", role="api")  # fmt: skip

    async def main() -> tuple[dict[str, Any], bool, float]:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            bus = app.state.scorer.bus
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                start = time.monotonic()
                post = asyncio.create_task(c.post(
                    "/ingest", json=body("s", series(150)), params={"wait": 30}
                ))  # fmt: skip
                while ("default", "s") not in bus._waits:  # the call waits now
                    assert time.monotonic() - start < 20 and not post.done()
                    await asyncio.sleep(0.01)
                bus.deliver([("default", "s", [100, 110, 120, 130, 140])])
                await asyncio.sleep(1.0)  # two store re-reads (RECHECK_S)
                early = post.done()  # 150: not scored yet
                bus.deliver([("default", "s", [150])])
                r = await post
                return r.json()["results"][0], early, time.monotonic() - start

    res, early, took = asyncio.run(main())
    assert not early
    assert took < 30  # answered at the news, not at the deadline
    counts = (res["windows_queued"], res["windows_scored"], res["risk"])
    assert counts == (6, 6, None)  # known scored, no record to read (none written)
