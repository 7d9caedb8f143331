"""DELETE /streams/{stream} on every store (in memory, one Redis, a Redis Cluster):
everything stored for the stream goes (rows, held readings, state, risks, its names
and gauge entries), a firing alert is resolved, windows queued or being scored when
it was deleted write nothing, and the name sent again starts a new stream."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.service_helpers import (
    AnyRedis,
    ClientFactory,
    Hook,
    RedisCluster,
    RedisServer,
)
from test_alerting import wait_until
from test_store_units import fresh_store

from service import alerting
from service.config import Settings
from service.main import create_app
from service.store import Record, Summary, recent_novelty
from service.store.redis_store import RedisStore
from service.worker import ScoredWindow

T0 = 1_700_000_000.0


def readings(n: int, start: int = 0, value: float = 0.0) -> list[dict[str, Any]]:
    return [{"ts": T0 + start + i, "values": [value] * 4} for i in range(n)]


def send(client: TestClient, stream: str, start: int) -> int:
    """POST /ingest of 3 readings of ``stream`` from T0 + ``start``: the status."""
    body = {"stream": stream, "readings": readings(3, start)}
    return int(client.post("/ingest", json=body).status_code)


def metric(client: TestClient, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not exported")


@pytest.fixture
def redis(request: pytest.FixtureRequest, store_kind: str) -> AnyRedis | None:
    """The Redis of ``store_kind`` (None: the in-memory store)."""
    if store_kind == "memory":
        return None
    server: AnyRedis = request.getfixturevalue(
        "redis_server" if store_kind == "redis" else "redis_cluster"
    )
    return server


def test_a_deleted_stream_leaves_nothing_behind(
    make_client: ClientFactory, redis: AnyRedis | None, monitored: Path
) -> None:
    """A stream with risks, a recent novelty (a model with the input-drift monitor)
    and readings held (allowed lateness) is deleted: 204, and nothing of it is left
    (GET /risk and its history 404, not listed, not counted in the gauges nor among
    the top streams, no Redis key naming it, its quota place free); the other stream
    is untouched; a second DELETE is a 404 like GET /risk's; the name sent again is
    a new stream, warming up, with no recent novelty."""
    client = make_client(
        artifact=monitored, allowed_lateness_s=5.0, max_streams_per_tenant=2
    )
    prefix = client.app.state.settings.key_prefix  # type: ignore[attr-defined]
    for stream in ("p", "q"):
        body = {"stream": stream, "readings": readings(150)}
        assert client.post("/ingest?wait=20", json=body).status_code == 200
    assert client.get("/risk/p").json()["status"] == "ok"
    assert client.get("/risk/p").json()["recent_novelty"] is not None
    assert client.post("/ingest", json={"stream": "r", "readings": readings(1)}
                       ).status_code == 403  # fmt: skip
    assert metric(client, "scjepa_streams_tracked") == 2
    assert 'stream="p"' in client.get("/metrics").text

    if redis is not None:  # when its gauges' figures were written: kept till now
        for k in ("latest_at", "novelty_at"):
            assert redis.client().hget(f"{prefix}:{{global}}:{k}", "default/p")
    r = client.delete("/streams/p")
    assert (r.status_code, r.content) == (204, b"")
    assert client.get("/risk/p").status_code == 404
    assert client.get("/risk/p/history").status_code == 404
    assert client.get("/streams").json()["streams"] == ["q"]
    assert client.get("/risk/q").json()["readings_total"] == 145  # 5 s held
    assert metric(client, "scjepa_streams_tracked") == 1
    assert 'stream="p"' not in client.get("/metrics").text  # neither top streams
    if redis is not None:
        r_ = redis.client()
        left = [k for k in r_.scan_iter(f"{prefix}:*") if b"/p" in k]
        assert left == []
        for k in ("names", "touched"):
            assert r_.zscore(f"{prefix}:{{default}}:{k}", "p") is None
        for k in ("streams", "latest", "novelty"):
            assert r_.zscore(f"{prefix}:{{global}}:{k}", "default/p") is None
        for k in ("latest_at", "novelty_at"):
            assert r_.hget(f"{prefix}:{{global}}:{k}", "default/p") is None
    again = client.delete("/streams/p")
    assert again.status_code == 404
    assert again.json() == {"detail": "unknown stream 'p' (no readings yet)"}

    # its place in the quota is free; the name sent again starts over
    assert client.post("/ingest", json={"stream": "r", "readings": readings(1)}
                       ).status_code == 200  # fmt: skip
    client.delete("/streams/r")
    res = client.post("/ingest", json={"stream": "p", "readings": readings(3)})
    assert res.json()["results"][0]["accepted"] == 3  # not duplicates of the old
    cur = client.get("/risk/p").json()
    assert (cur["status"], cur["readings_total"]) == ("warming_up", 0)  # 3 held
    assert cur["recent_novelty"] is None
    assert client.get("/risk/p/history").json()["items"] == []
    assert client.get("/streams").json()["streams"] == ["p", "q"]  # registered again


def test_a_delete_is_scoped_to_the_callers_tenant(
    make_client: ClientFactory,
) -> None:
    """Another tenant's key cannot delete a stream it does not have (404, the stream
    stays); no key is a 401, a bad name a 422 naming the path field."""
    client = make_client(api_keys=["acme:ka", "globex:kg"])
    acme, globex = {"X-API-Key": "ka"}, {"X-API-Key": "kg"}
    body = {"stream": "p", "readings": readings(5)}
    assert client.post("/ingest", json=body, headers=acme).status_code == 200
    assert client.delete("/streams/p", headers=globex).status_code == 404
    assert client.delete("/streams/p").status_code == 401
    bad = client.delete("/streams/a%20b", headers=acme)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == [
        "path",
        "stream",
    ]
    assert client.get("/risk/p", headers=acme).json()["readings_total"] == 5
    assert client.delete("/streams/p", headers=acme).status_code == 204
    assert client.get("/streams", headers=acme).json()["streams"] == []


def test_windows_queued_when_a_stream_is_deleted_write_nothing(
    store_url: str | None,
) -> None:
    """A scorer holds some of the stream's windows (being scored), others wait in the
    queue, and the stream is deleted: their late writes are refused (no state), and
    after the name has sent again (a new life, the same window numbers) they are
    refused still, the new life's own records written. Nothing brought back."""

    async def main() -> None:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        x = np.ones((30, 2), np.float32)
        try:
            await store.ensure_groups()
            await store.register("t", ["s"], 10)
            await store.append("t", "s", T0 + np.arange(30.0), x, window=10, hop=10,
                               max_queued=100)  # fmt: skip
            held = await store.read_work("c", 1, 0)  # being scored
            assert len(held) == 1
            assert await store.delete("t", "s") == held[0].epoch
            queued = await store.read_work("c", 10, 0)  # still queued: not dropped
            assert sorted(it.window.n for it in held + queued) == [10, 20, 30]

            def recs(items: list[Any], tag: str) -> list[tuple[str, str, int, Any]]:
                return [("t", "s", it.epoch, [Record(it.window.n, f"{tag}-{it.window.n}",
                                               0.9, None)]) for it in items]  # fmt: skip

            assert await store.put_scored(recs(held, "old")) == [[False]]
            assert await store.state("t", "s") is None
            assert await store.risks("t", "s", 10) == []
            assert await store.streams("t", None, 10) == []
            assert (await store.summary(0.5)).streams == 0
            # the name sends again before the queued windows are scored
            await store.register("t", ["s"], 10)
            await store.append("t", "s", T0 + 100 + np.arange(10.0), x[:10],
                               window=10, hop=10, max_queued=100)  # fmt: skip
            new = await store.read_work("c", 10, 0)
            assert [it.window.n for it in new] == [10]
            assert new[0].epoch > held[0].epoch
            assert await store.put_scored(recs(queued, "old")) == [[False]] * 2
            assert await store.put_scored(recs(new, "new")) == [[True]]
            assert await store.risks("t", "s", 10) == ["new-10"]
            assert await store.streams("t", None, 10) == ["s"]
            assert (await store.summary(0.5)).in_alert == 1
            state = await store.state("t", "s")
            assert state is not None and state.total == 10
        finally:
            await store.close()

    asyncio.run(main())


def test_a_deleted_stream_queued_windows_do_not_bring_it_back(
    make_client: ClientFactory,
) -> None:
    """Through the service: the scorer stopped, a stream's windows wait in the queue;
    the stream is deleted and sends again (a few readings); the scorer then scores
    the old windows: the stream stays warming up, with no risk and no history."""
    client = make_client()
    worker = client.app.state.worker  # type: ignore[attr-defined]
    client.portal.call(worker.stop)  # type: ignore[union-attr]
    res = client.post("/ingest", json={"stream": "p", "readings": readings(300)})
    assert res.json()["results"][0]["windows_queued"] > 1
    assert client.delete("/streams/p").status_code == 204
    client.post("/ingest", json={"stream": "p", "readings": readings(5, 1000)})
    store = client.app.state.store  # type: ignore[attr-defined]
    client.portal.call(worker.start)  # type: ignore[union-attr]
    wait_until(lambda: client.portal.call(store.queue_stats).depth == 0, 30)  # type: ignore[union-attr]
    time.sleep(0.2)
    cur = client.get("/risk/p").json()
    assert (cur["status"], cur["readings_total"]) == ("warming_up", 5)
    assert client.get("/risk/p/history").json()["items"] == []


def test_a_delete_cut_short_is_completed_by_its_retry(any_redis: AnyRedis) -> None:
    """Redis failed between the stream's keys and its names (two slots, two calls):
    the retry finds no keys but the names left, removes them and answers deleted, not
    unknown (the name would stay listed, a 404 to every other call, until the TTL);
    and what it answers closes the deleted life's firing alert, whose epoch went with
    the keys (it resolves, not left to its endsAt), and no later life's."""
    policy = alerting.Policy("http://127.0.0.1:9", ttl_s=60)

    async def main() -> list[Any]:
        store = fresh_store(any_redis.url, dedupe_horizon=100, partitions=2)
        assert isinstance(store, RedisStore)
        states = alerting.MemoryStates(policy)
        try:
            await store.register("t", ["s"], 10)
            await store.append("t", "s", T0 + np.arange(5.0),
                               np.ones((5, 2), np.float32), window=10, hop=10,
                               max_queued=100)  # fmt: skip
            state = store._key("t", "s", "state")
            epoch = int(await store.client.hget(state, "epoch"))
            now = time.time()
            out: list[Any] = [await states([window(10, epoch)], now)]  # fires
            keys = ("rows", "seen", "state", "risk", "pend")
            for k in keys:  # what the first call's script did before Redis failed
                await store.client.delete(store._key("t", "s", k))
            retry = await store.delete("t", "s")
            out += [
                retry is not None and retry > epoch,
                await states.forget("t", "s", retry, now),  # was firing: resolved
                await store.streams("t", None, 10),
                await store.delete("t", "s"),
            ]
            # the name sent again starts a life the retry's bound precedes
            await store.register("t", ["s"], 10)
            await store.append("t", "s", T0 + np.arange(5.0),
                               np.ones((5, 2), np.float32), window=10, hop=10,
                               max_queued=100)  # fmt: skip
            out.append(int(await store.client.hget(state, "epoch")) > retry)
            return out
        finally:
            await store.close()

    assert asyncio.run(main()) == [[alerting.FIRE], True, True, [], None, True]


def test_a_stream_idle_past_the_ttl_is_unknown_to_delete(
    make_client: ClientFactory,
) -> None:
    """A stream idle past the TTL, its keys expired but its name not yet pruned (the
    tenant's names live on with another stream's registration): DELETE is a 404 as
    GET /risk's, on every store (Redis answered 204, deleted, for a stream forgotten
    already, that GET /streams did not list)."""
    client = make_client(stream_ttl_s=2)

    def send(stream: str) -> None:
        body = {"stream": stream, "readings": readings(3)}
        assert client.post("/ingest", json=body).status_code == 200

    send("p")
    time.sleep(1.5)
    send("q")  # the tenant's names outlive p's keys
    time.sleep(1.0)  # p idle past the TTL, q not
    assert client.get("/risk/p").status_code == 404
    r = client.delete("/streams/p")
    assert (r.status_code, r.json()) == (
        404,
        {"detail": "unknown stream 'p' (no readings yet)"},
    )
    assert client.get("/streams").json()["streams"] == ["q"]
    assert client.delete("/streams/q").status_code == 204


def replicas(make_client: ClientFactory, quota: int) -> tuple[TestClient, TestClient]:
    """Two API replicas (A, B) on one Redis: the same key prefix and stream quota."""
    b = make_client(max_streams_per_tenant=quota)
    prefix = b.app.state.settings.key_prefix  # type: ignore[attr-defined]
    return make_client(max_streams_per_tenant=quota, key_prefix=prefix), b


@pytest.mark.parametrize("store_kind", ["redis", "cluster"])
def test_a_stream_deleted_through_another_replica_is_registered_again_at_once(
    make_client: ClientFactory,
) -> None:
    """Two API replicas on one Redis: B registered the stream (its memo holds it for
    5 s), A deletes it, B gets it again within those 5 s: it is listed and counted
    against the quota at once (it was stored unlisted and uncounted: the tenant's
    third stream with a quota of 2 was taken), and B's next new stream is refused."""
    a, b = replicas(make_client, quota=2)

    assert send(b, "s", 0) == 200
    assert a.delete("/streams/s").status_code == 204
    assert send(b, "s", 100) == 200
    assert b.get("/streams").json()["streams"] == ["s"]
    assert b.get("/risk/s").json()["readings_total"] == 3
    assert send(b, "u", 0) == 200
    assert send(b, "v", 0) == 403
    assert a.get("/streams").json()["streams"] == ["s", "u"]


@pytest.mark.parametrize("store_kind", ["redis", "cluster"])
def test_a_stream_deleted_through_another_replica_keeps_the_quota(
    make_client: ClientFactory,
) -> None:
    """Quota 1: B serves s (its memo holds it for 5 s), A deletes s and takes the
    tenant's one place with u; s sent again through B within those 5 s is refused
    (403, nothing stored), where B's memo alone would have stored it unlisted."""
    a, b = replicas(make_client, quota=1)

    assert send(b, "s", 0) == 200
    assert a.delete("/streams/s").status_code == 204
    assert send(a, "u", 0) == 200
    assert send(b, "s", 100) == 403
    assert b.get("/risk/s").status_code == 404
    assert b.get("/streams").json()["streams"] == ["u"]


def commands(server: AnyRedis) -> dict[str, int]:
    """Calls per command on every node of ``server`` (INFO commandstats)."""
    nodes = server.nodes if isinstance(server, RedisCluster) else [server]
    out: dict[str, int] = {}
    for node in nodes:
        client = node.client()
        try:
            for name, stat in client.info("commandstats").items():
                out[name] = out.get(name, 0) + int(stat["calls"])
        finally:
            client.close()
    return out


@pytest.mark.parametrize("store_kind", ["redis", "cluster"])
def test_a_streams_repeated_ingest_is_one_round_trip(
    make_client: ClientFactory, redis: AnyRedis
) -> None:
    """A stream sent again within the registry memo's 5 s costs its append script
    only (one EVALSHA, no ZADD): on a Cluster the memo was never filled, and each
    ingest ran the registry script and the gauges' ZADD too (three round trips).
    33 readings in all: no window completes, so no scorer writes in between."""
    client = make_client()
    sent = 10
    assert send(client, "s", 0) == 200  # registers the stream
    before = commands(redis)
    for i in range(1, sent + 1):
        assert send(client, "s", 3 * i) == 200
    after = commands(redis)
    calls = {c: after.get(c, 0) - before.get(c, 0) for c in after}
    assert (calls["cmdstat_evalsha"], calls.get("cmdstat_zadd", 0)) == (sent, 0)
    assert client.get("/risk/s").json()["readings_total"] == 3 * (sent + 1)


def posted(hook: Hook) -> list[str]:
    """The summary of every alert posted, in order."""
    batches: list[list[dict[str, Any]]] = hook.received  # type: ignore[assignment]
    return [a["annotations"]["summary"] for batch in batches for a in batch]


def test_a_firing_stream_deleted_is_resolved(
    make_client: ClientFactory, sharp: Path, hook: Hook
) -> None:
    """Firing, then deleted: its alert is posted resolved at once (endsAt now), the
    gauge of streams in alert drops it; sent again, it alerts again as a new stream."""
    url = hook.url.removesuffix("/hook")
    client = make_client(artifact=sharp, alertmanager_url=url)
    high = {"stream": "pump", "readings": readings(100, value=50.0)}
    assert client.post("/ingest?wait=20", json=high).json()["results"][0]["alert"]
    wait_until(lambda: len(posted(hook)) == 1)
    assert metric(client, "scjepa_streams_in_alert") == 1
    assert client.delete("/streams/pump").status_code == 204
    wait_until(lambda: len(posted(hook)) == 2)
    alert = hook.received[-1][0]  # type: ignore[index]
    assert "was deleted" in alert["annotations"]["summary"]
    assert (
        alert["labels"]["stream"] == "pump" and alert["labels"]["tenant"] == "default"
    )
    assert metric(client, "scjepa_streams_in_alert") == 0
    high["readings"] = readings(100, start=1000, value=50.0)
    assert client.post("/ingest?wait=20", json=high).json()["results"][0]["alert"]
    wait_until(lambda: len(posted(hook)) == 3)
    assert "at or above" in posted(hook)[-1]
    time.sleep(0.3)
    assert len(posted(hook)) == 3


def test_an_api_replica_resolves_the_alert_of_a_stream_it_deletes(
    redis_server: RedisServer, sharp: Path, hook: Hook
) -> None:
    """The split deployment: a scorer fired the stream's alert; the DELETE answers in
    an API process (role api), which has no scorer: it resolves the alert itself."""
    prefix = f"del{time.time_ns()}"
    url = hook.url.removesuffix("/hook")

    def app(role: str) -> TestClient:
        return TestClient(create_app(Settings(
            artifact=sharp, redis_url=redis_server.url, key_prefix=prefix, role=role,
            alertmanager_url=url, infer_in="thread", max_wait_ms=1.0)))  # fmt: skip

    with app("api") as api, app("scorer"):
        high = {"stream": "pump", "readings": readings(100, value=50.0)}
        assert api.post("/ingest?wait=20", json=high).json()["results"][0]["alert"]
        wait_until(lambda: len(posted(hook)) == 1)
        assert api.delete("/streams/pump").status_code == 204
        wait_until(lambda: len(posted(hook)) == 2)
        assert "was deleted" in posted(hook)[-1]


def window(n: int, epoch: int, alert: bool = True) -> ScoredWindow:
    from service.schemas import ModelRef

    ref = ModelRef(name="m", version="1")
    return ScoredWindow("t", "s", n, T0, 0.95 if alert else 0.1, 0.5, alert, (),
                        ref, epoch)  # fmt: skip


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_deleted_lifes_late_window_does_not_reopen_its_alert(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Closing a deleted stream's state: True when it was firing; then a window of the
    deleted life (claimed late, alert) changes nothing, one of the next life fires;
    a state of a later life than the one deleted is left alone."""
    policy = alerting.Policy("http://127.0.0.1:9", ttl_s=60)

    async def main() -> list[Any]:
        if kind == "memory":
            states: Any = alerting.MemoryStates(policy)
        else:
            from service.store.redis_store import connect

            url = request.getfixturevalue("redis_server").url
            client = connect(url, timeout_s=2.0)
            states = alerting.RedisStates(client, f"d{time.time_ns()}", policy)
        try:
            now = time.time()
            out = [await states([window(10, 5)], now)]  # fires
            out.append(await states.forget("t", "s", 5, now))
            out.append(await states([window(20, 5)], now))  # late: nothing
            out.append(await states.forget("t", "s", 5, now))  # closed: not firing
            out.append(await states([window(10, 6)], now))  # the next life: fires
            out.append(await states.forget("t", "s", 5, now))  # an older life's
            out.append(await states([window(20, 6, alert=False)], now))  # resolves
            return out
        finally:
            if kind != "memory":
                await states.close()

    assert asyncio.run(main()) == [
        [alerting.FIRE], True, [alerting.NONE], False, [alerting.FIRE], False,
        [alerting.RESOLVE],
    ]  # fmt: skip


def test_a_deleted_stream_is_not_noted_back_in_the_gauges(
    any_redis: AnyRedis,
) -> None:
    """A record written while the stream is deleted (a scorer between its record and
    its note of the newest risk; or, as here, the name sent again within 5 s through
    a replica whose memo skips registering it) noted no risk back into the gauges'
    index: it stayed there for ever (the idle expiry reads the registered streams
    only), a deleted stream counted in alert and exported among the top streams (of
    risk, and of recent novelty)."""

    async def main() -> tuple[int, int, float, tuple[Any, ...], tuple[Any, ...]]:
        def replica() -> RedisStore:
            return RedisStore(any_redis.url, prefix=prefix, ttl_s=600, history_len=10,
                              dedupe_horizon=100, timeout_s=5.0, partitions=2)  # fmt: skip

        prefix = f"ghost{time.time_ns()}"
        a, b = replica(), replica()
        x = np.ones((10, 2), np.float32)
        try:
            await a.ensure_groups()
            for store in (a, b):  # both replicas have served the stream
                await store.register("t", ["s"], 10)
            await a.append("t", "s", T0 + np.arange(10.0), x, window=10, hop=10,
                           max_queued=100)  # fmt: skip
            assert await a.delete("t", "s") is not None
            await b.register("t", ["s"], 10)  # memo: registered 0 s ago, skipped
            await b.append("t", "s", T0 + 100 + np.arange(10.0), x, window=10,
                           hop=10, max_queued=100)  # fmt: skip
            items = await a.read_work("c", 10, 0)
            new = [it for it in items if it.epoch == max(i.epoch for i in items)]
            written = await a.put_scored(
                [
                    ("t", "s", it.epoch, [Record(it.window.n, "{}", 0.9, 0.9)])
                    for it in new
                ]
            )
            assert written == [[True]]  # the new life's record is kept
            s = await a.summary(0.5, 5)
            return s.streams, s.in_alert, s.max_risk, s.top, s.top_novelty
        finally:
            await a.close()
            await b.close()

    assert asyncio.run(main()) == (0, 0, 0.0, (), ())


def test_a_delete_between_a_scorers_record_and_its_gauge_write_leaves_no_risk(
    any_redis: AnyRedis,
) -> None:
    """A scorer wrote a window's record, then (its second call) the stream's newest
    risk for the gauges; a DELETE through another replica lands between the two: the
    risk is not noted (it was, for ever: the deleted stream counted in alert, as the
    max risk and among the top streams), nor its recent novelty. After a SCRIPT
    FLUSH the gauge write still notes a live stream's risk and recent novelty (its
    script is loaded again)."""

    async def main() -> list[Any]:
        prefix = f"d{time.time_ns()}"  # two processes' stores on one Redis

        def store() -> RedisStore:
            return RedisStore(any_redis.url, prefix=prefix, ttl_s=600, history_len=10,
                              dedupe_horizon=100, timeout_s=5.0, partitions=2)  # fmt: skip

        api, scorer = store(), store()
        calls = 0
        call = scorer._call

        async def delete_between(op: str, coro: Any, **kw: Any) -> Any:
            nonlocal calls
            calls += op == "put_risks"
            if calls == 2:  # the record is written, the gauge write next
                calls += 1
                await api.delete("t", "s")
            return await call(op, coro, **kw)

        scorer._call = delete_between  # type: ignore[method-assign]
        out: list[Any] = []
        x = np.ones((10, 2), np.float32)
        try:
            await scorer.ensure_groups()
            for stream in ("s", "q"):
                await api.register("t", [stream], 10)
                await api.append("t", stream, T0 + np.arange(10.0), x, window=10,
                                 hop=10, max_queued=100)  # fmt: skip
            items = {it.stream: it for it in await scorer.read_work("c", 10, 0)}
            s = items["s"]
            rec = [("t", "s", s.epoch, [Record(10, "{}", 0.95, 0.99)])]
            out.append(await scorer.put_scored(rec, ack=[s.id]))
            out.append(await api.summary(0.5, top=5))
            any_redis.client().script_flush()
            q = items["q"]
            rec = [("t", "q", q.epoch, [Record(10, "{}", 0.7, 0.6)])]
            out.append(await scorer.put_scored(rec, ack=[q.id]))
            out.append(await api.summary(0.5, top=5))
            return out
        finally:
            await api.close()
            await scorer.close()

    assert asyncio.run(main()) == [
        [[True]],
        Summary(1, 0.0, (), ()),
        [[True]],
        Summary(
            1,
            0.7,
            (("t", "q", 0.7),),
            (("t", "q", recent_novelty(None, 0.6)),),
            (("t", 1),),
        ),
    ]
