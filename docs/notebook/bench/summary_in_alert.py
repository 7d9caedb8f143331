"""What the gauges' summary script costs Redis per /metrics scrape as the streams in
alert grow (benchmarks.md, 2026-12-02): counting them by tenant reads their names.

    PYTHONPATH=. python docs/notebook/bench/summary_in_alert.py   # needs redis-server

Starts a redis-server on a free loopback port, notes 100,000 streams of 20 tenants in
the gauges' indexes (risks spread evenly over [0, 1)), and times RedisStore.summary
(20 runs, the median) at thresholds that put none, 1 %, 10 % and all of them in alert.
"""

import asyncio
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Coroutine
from typing import Any

import redis

from service.store.redis_store import RedisStore

N, TENANTS = 100_000, 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def main(port: int) -> None:
    url = f"redis://127.0.0.1:{port}/0"
    store = RedisStore(url, prefix="b", ttl_s=3600, history_len=10,
                       dedupe_horizon=100, timeout_s=5.0, partitions=2)  # fmt: skip
    streams, latest = store._global("streams"), store._global("latest")
    r, now = redis.Redis(port=port), time.time()
    pipe = r.pipeline(transaction=False)
    for i in range(N):
        member = f"t{i % TENANTS}/pump-{i:06d}"
        pipe.zadd(streams, {member: now})
        pipe.zadd(latest, {member: (i % 1000) / 1000})
    pipe.execute()
    for share in (0.0, 0.01, 0.1, 1.0):
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            s = await store.summary(1.0 - share if share < 1 else 0.0, 20)
            times.append(time.perf_counter() - t0)
        ms = 1e3 * statistics.median(times)
        print(f"{s.in_alert:>7} of {N} streams in alert: {ms:.2f} ms a scrape")
    await store.close()


def on_redis(bench: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """Run ``bench(port)`` against a fresh redis-server on a free loopback port."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        asyncio.run(bench(port))
    finally:
        server.terminate()


if __name__ == "__main__":
    on_redis(main)
