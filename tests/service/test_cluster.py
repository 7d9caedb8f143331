"""What only a Redis Cluster has (``redis+cluster://``, a local 3-master cluster): every
key of a stream and its work-queue partition in one slot, the partitions spread over
the masters, the work queue read partition by partition. The service tests on the
Redis store run on the cluster too (tests/conftest.py: ``store_kind``, ``any_redis``)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import numpy as np
from support.service_helpers import RedisCluster
from test_api import T0, body, series

from service.config import Settings
from service.main import create_app
from service.store import Record
from service.store.redis_store import GROUP, RedisStore, partition


def test_partitions_spread_over_the_masters(redis_cluster: RedisCluster) -> None:
    """16 partitions, 16 slots, every master serving some; a stream's keys share its
    partition's slot."""
    store = RedisStore(redis_cluster.url, prefix="spread", ttl_s=60, history_len=10,
                       dedupe_horizon=100, timeout_s=5.0, partitions=16)  # fmt: skip
    rc = redis_cluster.client()
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
            # COUNT applies per partition (as in one XREADGROUP over all): every
            # entry the read made pending on "a" comes back, none waits for a claim
            got = await store.read_work("a", 2, 0.05)
            pending = [await store.client.xpending(k, GROUP) for k in store.work_keys]
            assert 2 < len(got) == sum(p["pending"] for p in pending) < 24
            got += await store.read_work("a", 100, 0.05)
            assert len(got) == 24 and await store.read_work("b", 100, 0) == []
            await asyncio.sleep(0.2)
            claimed = await store.claim_work("b", 0.1, 100)
            assert {i.id for i in claimed} == {i.id for i in got}
            recs = [
                (
                    i.tenant,
                    i.stream,
                    i.epoch,
                    [Record(i.window.n, f"r{i.window.n}", 0.5, None)],
                )
                for i in got
            ]
            assert await store.put_scored(recs) == [[True]] * 24
            assert await store.put_scored(recs) == [[False]] * 24
            await store.ack_work([i.id for i in got])
            assert (await store.queue_stats()).depth == 0
        finally:
            await store.close()

    asyncio.run(main())


def test_a_burst_at_startup_routes_every_command(
    redis_cluster: RedisCluster, artifact_dir: Path
) -> None:
    """Concurrent requests on a fresh app: none sent before the client knows the slot
    map (redis-py would route those to any node, and its MOVED handling then reset the
    connections of the others: 500s)."""
    settings = Settings(artifact=artifact_dir, redis_url=redis_cluster.url,
                        key_prefix=f"b{uuid.uuid4().hex[:8]}", hop=100)  # fmt: skip

    async def main() -> list[int]:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                rs = await asyncio.gather(
                    *(c.post("/ingest", json=body(f"s{i}", series(100)))
                      for i in range(32)),
                    *(c.get(f"/risk/s{i}") for i in range(32)),
                )  # fmt: skip
        return [r.status_code for r in rs]

    codes = asyncio.run(main())
    assert codes[:32] == [200] * 32 and set(codes[32:]) <= {200, 404}, codes
