"""The scorer tier apart from the API, as processes (``scjepa serve --role api|scorer``)
on a real redis-server and on the local 3-master Redis Cluster: kill -9 of a scorer, of
an API process, of redis-server itself; two APIs and two scorers fed retried requests.
Each test counts the risk records per window number: every stored window is scored
exactly once. The test's own reads use SCAN (a cluster client's KEYS asks one node)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from served import Served, ServeFactory
from support.service_helpers import AnyRedis, RedisServer, free_port

from service.store import completed_ends

V = 4
T0 = 1_700_000_000.0
Sync = redis.Redis | redis.RedisCluster  # the test's own client


def readings(start: int, n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(start)
    x = np.round(rng.normal(size=(n, V)), 4)
    return [{"ts": T0 + start + i, "values": row.tolist()} for i, row in enumerate(x)]


def keys(r: Sync, pattern: str) -> list[Any]:
    return list(r.scan_iter(pattern))  # every master's keys on a cluster


def records(r: Sync, prefix: str, stream: str) -> list[int]:
    """Window numbers of the stream's risk records (one entry per record)."""
    (key,) = keys(r, f"{prefix}:*:default/{stream}:risk") or [None]
    if key is None:
        return []
    return sorted(int(n) for _, n in r.zrange(key, 0, -1, withscores=True))


def stored(r: Sync, prefix: str, stream: str) -> int:
    (key,) = keys(r, f"{prefix}:*:default/{stream}:state")
    return int(r.hget(key, "n") or 0)


def queue_depth(r: Sync, prefix: str) -> int:
    return sum(int(r.xlen(k)) for k in keys(r, f"{prefix}:*:work"))


def pending(r: Sync, prefix: str) -> int:
    total = 0
    for k in keys(r, f"{prefix}:*:work"):
        with_group = r.xinfo_groups(k)
        total += sum(int(g["pending"]) for g in with_group)
    return total


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def kill9(s: Served) -> None:
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(10)


def every_window_once(r: Sync, prefix: str, streams: list[str]) -> None:
    for s in streams:
        want = completed_ends(0, stored(r, prefix, s), 100, 100)
        assert records(r, prefix, s) == want, s


@pytest.fixture
def prefix() -> str:
    return f"so{uuid.uuid4().hex[:8]}"


def test_killed_scorer_leaves_windows_to_another_scored_once(
    serve: ServeFactory, any_redis: AnyRedis, prefix: str
) -> None:
    """kill -9 of a scorer with windows delivered and not acknowledged: another claims
    them after SCJEPA_CLAIM_TIMEOUT_S and every window has exactly one record."""
    r = any_redis.client()
    common = {"redis_url": any_redis.url, "key_prefix": prefix}
    api = serve(role="api", **common)
    streams = [f"s{i}" for i in range(20)]
    sent = 0  # readings per stream

    def send(n: int) -> None:
        nonlocal sent
        for start in range(sent, sent + n, 500):
            part = [{"stream": s, "readings": readings(start, 500)} for s in streams]
            r_ = httpx.post(f"{api.url}/ingest", json={"streams": part}, timeout=60)
            assert r_.status_code == 200, r_.text
        sent += n

    # 400 windows: a scorer that starts while a loaded machine answers its readiness
    # check slowly must not have scored them all before the first look
    send(2000)
    # a scorer that reads one window at a time, killed while it holds one; between
    # two windows it holds none, so a kill can land there: then another one is
    # started and killed, until one dies holding work
    for _ in range(10):
        if queue_depth(r, prefix) == 0:  # those killed before scored every window
            send(500)
        doomed = serve(role="scorer", claim_timeout_s=1.0, max_batch=1,
                       scorer_concurrency=1, **common)  # fmt: skip
        # a generous limit: on a loaded 2-core machine a fresh scorer took just over
        # 30 s to load its model and claim a first window (once in five full runs).
        # A scorer holds a window only while it scores it: one that scores every
        # queued window before (or between) two looks holds none for the rest of the
        # wait, so the queue is refilled whenever it runs empty (a run timed out so),
        # and looked at right after each request of the refill: a scorer faster than
        # the test's requests drained each refill before the next look (another run
        # timed out so)

        def holding() -> bool:
            if pending(r, prefix) > 0:
                return True
            if queue_depth(r, prefix) == 0:
                for _ in range(4):
                    send(500)
                    if pending(r, prefix) > 0:
                        return True
            return False

        try:
            wait_until(holding, 90, "a window delivered")
        except AssertionError as e:
            raise AssertionError(f"{e}; its log: {doomed.text()[-2000:]}") from e
        kill9(doomed)
        if pending(r, prefix) > 0:
            break
    assert queue_depth(r, prefix) > 0 and pending(r, prefix) > 0  # the dead one's
    serve(role="scorer", claim_timeout_s=1.0, **common)
    wait_until(lambda: queue_depth(r, prefix) == 0, 120, "the queue to drain")
    every_window_once(r, prefix, streams)
    assert sum(len(records(r, prefix, s)) for s in streams) == 20 * sent // 100


def test_two_apis_two_scorers_retried_and_concurrent_requests(
    serve: ServeFactory, any_redis: AnyRedis, prefix: str
) -> None:
    """Clients send every request to both API processes (a retry on the other
    replica) while batches of several streams go concurrently: 0 readings lost, 0
    stored twice, every window scored exactly once by one of two scorers."""
    r = any_redis.client()
    common = {"redis_url": any_redis.url, "key_prefix": prefix}
    apis = [serve(role="api", **common) for _ in range(2)]
    for _ in range(2):
        serve(role="scorer", claim_timeout_s=2.0, **common)
    streams = [f"p{i}" for i in range(8)]
    n_batches, size = 12, 50

    async def client(k: int, c: httpx.AsyncClient) -> list[dict[str, Any]]:
        out = []
        stream = streams[k]
        for b in range(n_batches):
            body = {"stream": stream, "readings": readings(b * size, size)}
            first, second = apis[b % 2], apis[(b + 1) % 2]
            # the same request to both replicas, concurrently: one stores, one dedupes
            rs = await asyncio.gather(
                c.post(f"{first.url}/ingest", json=body),
                c.post(f"{second.url}/ingest", json=body),
            )
            assert [x.status_code for x in rs] == [200, 200], [x.text for x in rs]
            out += [x.json()["results"][0] for x in rs]
        return out

    async def main() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=30) as c:
            per = await asyncio.gather(*(client(k, c) for k in range(len(streams))))
        return [res for p in per for res in p]

    results = asyncio.run(main())
    sent = len(streams) * n_batches * size
    assert sum(x["accepted"] for x in results) == sent  # 0 lost, 0 stored twice
    assert sum(x["duplicates"] for x in results) == sent
    assert sum(x["rejected"] for x in results) == 0
    wait_until(lambda: queue_depth(r, prefix) == 0, 120, "the queue to drain")
    every_window_once(r, prefix, streams)
    assert sum(x["windows_queued"] for x in results) == len(streams) * 6


def test_killed_api_mid_ingest_loses_no_window(
    serve: ServeFactory, any_redis: AnyRedis, prefix: str
) -> None:
    """kill -9 of an API process while requests completing windows are in flight;
    the client retries on the other replica: every window stored is scored."""
    r = any_redis.client()
    common = {"redis_url": any_redis.url, "key_prefix": prefix}
    doomed, other = serve(role="api", **common), serve(role="api", **common)
    serve(role="scorer", **common)
    streams = [f"k{i}" for i in range(32)]
    body = {"streams": [{"stream": s, "readings": readings(0, 300)} for s in streams]}

    async def main() -> None:
        async with httpx.AsyncClient(timeout=60) as c:
            inflight = [
                asyncio.create_task(c.post(f"{doomed.url}/ingest", json=body))
                for _ in range(3)
            ]
            await asyncio.sleep(0.05)
            kill9(doomed)
            for t in inflight:  # answered or cut off: either way, retry elsewhere
                with contextlib.suppress(httpx.TransportError):
                    await t
            rs = await c.post(f"{other.url}/ingest", json=body)
            assert rs.status_code == 200, rs.text

    asyncio.run(main())
    assert [stored(r, prefix, s) for s in streams] == [300] * 32
    wait_until(lambda: queue_depth(r, prefix) == 0, 120, "the queue to drain")
    every_window_once(r, prefix, streams)


def test_one_request_completing_2000_streams_under_a_small_pool(
    serve: ServeFactory, redis_server: RedisServer, prefix: str
) -> None:
    """The 100th reading of 2,000 streams in one request, 2 pooled connections: every
    window completed is queued in its stream's own script and scored."""
    # single redis-server only: minutes long; that a burst past the pool queues on a
    # Cluster too is test_store_units' test_a_burst_of_every_kind_of_call_queues_...
    r = redis.Redis.from_url(redis_server.url)
    api = serve(redis_url=redis_server.url, key_prefix=prefix,
                redis_max_connections=2)  # fmt: skip
    streams = [f"m{i}" for i in range(2000)]
    warm = readings(0, 99)
    with httpx.Client(timeout=120) as c:
        for k in range(0, 2000, 100):  # 99 readings each, 9,900 readings a request
            body = {"streams": [{"stream": s, "readings": warm} for s in streams[k : k + 100]]}  # fmt: skip
            assert c.post(f"{api.url}/ingest", json=body).status_code == 200
        last = readings(99, 1)
        body = {"streams": [{"stream": s, "readings": last} for s in streams]}
        res = c.post(f"{api.url}/ingest", json=body)
    assert res.status_code == 200, res.text
    assert sum(x["windows_queued"] for x in res.json()["results"]) == 2000
    wait_until(lambda: queue_depth(r, prefix) == 0, 180, "the queue to drain")
    counts = [len(records(r, prefix, s)) for s in streams]
    assert counts == [1] * 2000


def test_killed_redis_with_aof_always_loses_no_acknowledged_reading(
    serve: ServeFactory, tmp_path: Path, prefix: str
) -> None:
    """kill -9 of redis-server (appendonly, appendfsync always) mid-stream: while it is
    down every ingest is 503 with Retry-After, within the timeout (never 500, never a
    hang); restarted on its files, the service recovers by itself and every reading
    acknowledged before the kill is there, every stored window scored once."""
    # single redis-server only: its subject is one redis-server's AOF and restart
    port = free_port()
    server = RedisServer(tmp_path / "aof", port, aof=True)
    (tmp_path / "aof").mkdir()
    server.start()
    try:
        api = serve(redis_url=server.url, key_prefix=prefix, redis_timeout_s=1.0)
        acked = 0
        down: list[tuple[int, str | None, float]] = []
        with httpx.Client(timeout=30) as c:
            for b in range(8):
                rs = c.post(f"{api.url}/ingest", json={"stream": "d", "readings": readings(b * 50, 50)})  # fmt: skip
                assert rs.status_code == 200, rs.text
                acked += rs.json()["results"][0]["accepted"]
            server.stop()  # kill -9
            for b in range(8, 11):
                start = time.monotonic()
                rs = c.post(f"{api.url}/ingest", json={"stream": "d", "readings": readings(b * 50, 50)})  # fmt: skip
                down.append((rs.status_code, rs.headers.get("retry-after"),
                             time.monotonic() - start))  # fmt: skip
            assert c.get(f"{api.url}/risk/d").status_code == 503
            server.start()  # the same port and files
            for b in range(8, 14):  # the refused ones again, then more
                deadline = time.monotonic() + 30
                while True:
                    rs = c.post(f"{api.url}/ingest", json={"stream": "d", "readings": readings(b * 50, 50)})  # fmt: skip
                    if rs.status_code == 200:
                        break
                    assert rs.status_code == 503 and time.monotonic() < deadline
                    time.sleep(0.2)
                acked += rs.json()["results"][0]["accepted"]
        assert all(code == 503 and retry for code, retry, _ in down), down
        assert max(t for _, _, t in down) < 5.0, down  # bounded by the timeouts
        r = redis.Redis.from_url(server.url)
        assert stored(r, prefix, "d") == acked == 14 * 50
        wait_until(lambda: queue_depth(r, prefix) == 0, 60, "the queue to drain")
        every_window_once(r, prefix, ["d"])
    finally:
        server.stop()


def test_pipelined_batches_of_one_stream_on_two_apis_within_the_lateness(
    serve: ServeFactory, any_redis: AnyRedis, prefix: str
) -> None:
    """A client pipelining consecutive batches of one stream to two replicas (they
    race; the later may land first): with SCJEPA_ALLOWED_LATENESS_S covering a batch,
    none is rejected as late, the readings are merged in timestamp order, and every
    window is scored once with the readings in order."""
    r = any_redis.client()
    common = {"redis_url": any_redis.url, "key_prefix": prefix,
              "allowed_lateness_s": 120}  # fmt: skip
    apis = [serve(role="api", **common) for _ in range(2)]
    serve(role="scorer", **common)
    size, pairs = 50, 15  # 1,500 readings

    async def main() -> list[dict[str, Any]]:
        out = []
        async with httpx.AsyncClient(timeout=30) as c:
            for p in range(pairs):
                a, b = (2 * p) * size, (2 * p + 1) * size
                rs = await asyncio.gather(  # the later batch to the other replica
                    c.post(f"{apis[0].url}/ingest", json={"stream": "pipe", "readings": readings(a, size)}),
                    c.post(f"{apis[1].url}/ingest", json={"stream": "pipe", "readings": readings(b, size)}),
                )  # fmt: skip
                assert [x.status_code for x in rs] == [200, 200]
                out += [x.json()["results"][0] for x in rs]
            # readings past the lateness release the last held ones
            rs = await c.post(f"{apis[0].url}/ingest", json={"stream": "pipe", "readings": readings(pairs * 2 * size + 200, 1)})  # fmt: skip
            out.append(rs.json()["results"][0])
        return out

    results = asyncio.run(main())
    assert sum(x["accepted"] for x in results) == 2 * pairs * size + 1
    assert sum(x["rejected"] for x in results) == 0  # none lost as late
    assert results[-1]["held"] == 1  # the newest waits for the watermark to pass it
    assert stored(r, prefix, "pipe") == 2 * pairs * size  # all the others, in order
    wait_until(lambda: queue_depth(r, prefix) == 0, 60, "the queue to drain")
    every_window_once(r, prefix, ["pipe"])
    (key,) = keys(r, f"{prefix}:*:default/pipe:risk")
    recs = [json.loads(m) for m in r.zrange(key, 0, -1)]
    assert [(x["window_start"], x["window_end"]) for x in recs] == [
        (T0 + n - 100, T0 + n - 1) for n in range(100, 1501, 100)
    ]  # each window is 100 consecutive readings, in timestamp order
