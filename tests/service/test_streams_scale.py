"""Many streams: GET /streams and a /metrics scrape read from Redis the same at 20,000
streams as at one (before: ~250 ms at 22,000 and growing, as both read every name), and
the idle TTL gives every stream's memory back, in Redis and in the service.
Their latency at 100,000 streams: `scjepa bench streams` (docs/reference/benchmarks.md);
a timed test here only measured the shared machine's load."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from support.service_helpers import AnyRedis, ClientFactory
from test_api import body, series

from service.config import Settings
from service.main import create_app


def sent_bytes(nodes: list[redis.Redis]) -> int:
    """What the Redis nodes have sent their clients so far (INFO's
    total_net_output_bytes; a node's replies to this INFO included: a constant)."""
    return sum(int(n.info("stats")["total_net_output_bytes"]) for n in nodes)


def test_listing_and_scrapes_do_not_grow_with_streams(
    client: TestClient, store_kind: str, request: pytest.FixtureRequest
) -> None:
    store = client.app.state.store  # type: ignore[attr-defined]
    call = client.portal.call  # type: ignore[union-attr]
    nodes: list[redis.Redis] = []
    if store_kind == "redis":
        nodes = [request.getfixturevalue("redis_server").client()]
    elif store_kind == "cluster":
        nodes = [n.client() for n in request.getfixturevalue("redis_cluster").nodes]

    def read_bytes() -> tuple[int, int]:
        """Bytes Redis sent for one scrape and for one page of 100 names."""
        out = []
        for path in ("/metrics", "/streams?limit=100"):
            before = sent_bytes(nodes)
            assert client.get(path).status_code == 200
            out.append(sent_bytes(nodes) - before)
        return out[0], out[1]

    client.post("/ingest", json=body("s-0", series(3)))
    one = read_bytes()
    names = [f"s-{i:05d}" for i in range(20_000)]
    for a in range(0, len(names), 1000):
        assert call(store.register, "default", names[a : a + 1000], 10**6) == []
    many = read_bytes()
    page = client.get("/streams?limit=100").json()
    assert len(page["streams"]) == 100 and page["next"] == "s-00098"  # after "s-0"
    assert client.get(f"/streams?limit=100&after={page['next']}").json()["streams"][
        :2
    ] == ["s-00099", "s-00100"]
    text = client.get("/metrics").text
    assert "scjepa_streams_tracked 20001.0" in text
    if nodes:  # within 10 KB (a page's 100 names: ~1.2 KB), not 20,000 names' ~300 KB
        assert many[0] < one[0] + 10_000 and many[1] < one[1] + 10_000, (one, many)
        assert one[1] > 0  # a page is read from Redis


def test_the_idle_ttl_reclaims_streams_in_redis(
    any_redis: AnyRedis, artifact_dir: Path
) -> None:
    prefix = f"ttl{time.time_ns()}"
    settings = Settings(artifact=artifact_dir, redis_url=any_redis.url,
                        key_prefix=prefix, stream_ttl_s=4, hop=10)  # fmt: skip
    r = any_redis.client()
    with TestClient(create_app(settings)) as client:
        store = client.app.state.store  # type: ignore[attr-defined]
        x = series(120)
        stored = 0
        for a in range(0, 2000, 80):  # 80 x 120 readings: under the request limit
            names = [f"s-{i}" for i in range(a, a + 80)]
            r_ = client.post("/ingest", json={"streams": [body(n, x) for n in names]})
            assert r_.status_code == 200
            assert {x["windows_queued"] for x in r_.json()["results"]} == {3}
            # counted as written (the first batches' may expire before the last's)
            stored += r.exists(*(store._key("default", n, k) for n in names
                                 for k in ("rows", "seen", "state")))  # fmt: skip
            if a == 0:  # the stream gauge counts them (before any TTL passes)
                tracked = client.get("/metrics").text.split("scjepa_streams_tracked ")
                assert float(tracked[-1].split()[0]) == 80
        assert stored == 3 * 2000
        deadline = time.monotonic() + 60  # the scorer drains the 6,000 windows
        while client.portal.call(store.queue_stats).depth:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        deadline = time.monotonic() + 30
        while True:
            time.sleep(0.5)
            metrics = client.get("/metrics").text  # a scrape forgets idle streams
            listed = client.get("/streams").json()["streams"]
            # the work queue's partitions stay (a fixed number, empty once scored)
            left = [k for k in r.scan_iter(f"{prefix}:*", count=10_000)
                    if not k.endswith(b":work") or r.xlen(k)]  # fmt: skip
            if not left and not listed and "scjepa_streams_tracked 0.0" in metrics:
                break
            assert time.monotonic() < deadline, (len(left), left[:5], len(listed))
        assert client.get("/risk/s-1").status_code == 404
        store = client.app.state.store  # type: ignore[attr-defined]
        time.sleep(0.3)  # the replica's registry memo empties too
        client.post("/ingest", json=body("fresh", series(1)))
        assert len(store._touched) <= 1
        assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize("store_kind", ["memory"])
def test_the_idle_ttl_reclaims_streams_in_memory(make_client: ClientFactory) -> None:
    client = make_client(stream_ttl_s=1)
    batch = {"streams": [body(f"s-{i}", series(5)) for i in range(500)]}
    assert client.post("/ingest", json=batch).status_code == 200
    store = client.app.state.store  # type: ignore[attr-defined]
    assert len(store._streams) == 500
    time.sleep(1.3)
    assert "scjepa_streams_tracked 0.0" in client.get("/metrics").text
    assert client.get("/streams").json()["streams"] == []
    assert len(store._streams) == 0 and store._names == {}
