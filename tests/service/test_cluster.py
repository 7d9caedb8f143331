"""The service on a local 3-master Redis Cluster (``redis+cluster://``): every key of
a stream and its work-queue partition in one slot, the partitions spread over the
masters, and the core flows (ingest and scores, backfill, retries, history, listing,
rate limits, the work queue's claims) as on one Redis."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import numpy as np
import pytest
import redis
from fastapi.testclient import TestClient
from support.service_helpers import RedisCluster
from test_api import T0, body, direct_risk, series

from service.config import Settings
from service.main import create_app
from service.store.redis_store import RedisStore, partition


@pytest.fixture
def client(redis_cluster: RedisCluster, artifact_dir: Path) -> TestClient:
    settings = Settings(artifact=artifact_dir, redis_url=redis_cluster.url,
                        key_prefix=f"c{uuid.uuid4().hex[:8]}", hop=50)  # fmt: skip
    with TestClient(create_app(settings)) as c:
        yield c


def test_ingest_scores_and_reads_on_a_cluster(client: TestClient) -> None:
    x = series(1000)
    r = client.post("/ingest?wait=30", json=body("pump-7", x))
    res = r.json()["results"][0]
    assert (res["accepted"], res["windows_queued"], res["windows_scored"]) == (
        1000, 19, 19,
    )  # fmt: skip
    assert res["risk"] == pytest.approx(direct_risk(client, x[-100:]), abs=1e-6)
    again = client.post("/ingest?wait=30", json=body("pump-7", x)).json()["results"][0]
    assert (again["accepted"], again["duplicates"], again["windows_queued"]) == (
        0, 1000, 0,
    )  # fmt: skip
    hist = client.get("/risk/pump-7/history", params={"limit": 50}).json()["items"]
    assert sorted(h["n"] for h in hist) == list(range(100, 1001, 50))
    assert client.get("/risk/pump-7").json()["window_end"] == T0 + 999
    # many streams in one request: their keys sit in every master's slots
    many = {"streams": [body(f"s-{i}", series(100)) for i in range(64)]}
    out = client.post("/ingest?wait=30", json=many).json()["results"]
    assert [x["windows_scored"] for x in out] == [1] * 64
    page = client.get("/streams", params={"limit": 100}).json()["streams"]
    assert len(page) == 65


def test_partitions_spread_over_the_masters(redis_cluster: RedisCluster) -> None:
    """16 partitions, 16 slots, every master serving some; a stream's keys share its
    partition's slot."""
    store = RedisStore(redis_cluster.url, prefix="spread", ttl_s=60, history_len=10,
                       dedupe_horizon=100, timeout_s=5.0, partitions=16)  # fmt: skip
    rc = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port)
    try:
        slots = {rc.keyslot(k) for k in store.work_keys}
        owners = {rc.get_node_from_key(k).name for k in store.work_keys}
        assert len(slots) == 16 and len(owners) == 3
        p = partition("acme", "pump-7", 16)
        keys = [
            store._key("acme", "pump-7", k) for k in ("rows", "seen", "state", "risk")
        ]
        assert {rc.keyslot(k) for k in keys} == {rc.keyslot(store.work_keys[p])}
    finally:
        rc.close()
        asyncio.run(store.close())


def test_work_queue_claims_and_first_write_wins_on_a_cluster(
    redis_cluster: RedisCluster,
) -> None:
    async def main() -> None:
        store = RedisStore(redis_cluster.url, prefix=uuid.uuid4().hex, ttl_s=600,
                           history_len=10, dedupe_horizon=100, timeout_s=5.0,
                           partitions=8)  # fmt: skip
        try:
            await store.ensure_groups()
            streams = [f"s{i}" for i in range(12)]
            await store.register("t", streams, 100)
            for s in streams:
                await store.append("t", s, T0 + np.arange(20.0),
                                   np.ones((20, 2), np.float32), window=10, hop=10,
                                   max_queued=1000)  # fmt: skip
            assert (await store.queue_stats()).depth == 24
            got = await store.read_work("a", 100, 0.05)
            assert len(got) == 24 and await store.read_work("b", 100, 0) == []
            await asyncio.sleep(0.2)
            claimed = await store.claim_work("b", 0.1, 100)
            assert {i.id for i in claimed} == {i.id for i in got}
            recs = [
                (i.tenant, i.stream, [(i.window.n, f"r{i.window.n}", 0.5)]) for i in got
            ]
            assert await store.put_scored(recs) == [[True]] * 24
            assert await store.put_scored(recs) == [[False]] * 24
            await store.ack_work([i.id for i in got])
            assert (await store.queue_stats()).depth == 0
        finally:
            await store.close()

    asyncio.run(main())
