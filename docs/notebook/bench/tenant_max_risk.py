"""What each tenant's highest risk costs Redis (benchmarks.md, 2026-12-03): one more
ZADD per window noted by the scorers, and one short read per tenant per scrape.

    PYTHONPATH=. python docs/notebook/bench/tenant_max_risk.py   # needs redis-server

Starts a redis-server on a free loopback port and registers 100,000 streams of 20
tenants. Notes: NOTE_LATEST with batches of 256 latest risks (a scorer's batch), as
shipped and without its tenant-index lines (the script before), each on its own copy
of the indexes, alternated, 200 calls each, the median. Scrapes: RedisStore.summary
with no tenant and with the 20 (20 runs each, alternated, the median) once every
stream has a latest risk (and the tenants' indexes' memory, MEMORY USAGE over every
member); then RedisStore.top_streams (GET /streams/top) of one tenant
(5,000 streams), limits 20 and 1,000, 20 runs each, the median.
"""

import platform
import statistics
import time
from pathlib import Path

import redis
from summary_in_alert import on_redis

from service.store.redis_store import NOTE_LATEST, NOTED, RedisStore

N, TENANTS, BATCH, CALLS = 100_000, 20, 256, 200
BEFORE = "\n".join(line for line in NOTE_LATEST.split("\n") if "own" not in line)


def cpu() -> str:
    with open("/proc/cpuinfo") as f:
        names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    return names[0] if names else platform.processor()


async def main(port: int) -> None:
    url = f"redis://127.0.0.1:{port}/0"
    store = RedisStore(url, prefix="b", ttl_s=3600, history_len=10,
                       dedupe_horizon=100, timeout_s=5.0, partitions=2)  # fmt: skip
    r, now = redis.Redis(port=port), time.time()
    members = [f"t{i % TENANTS}/pump-{i:06d}" for i in range(N)]
    scripts = {
        "before": r.register_script(BEFORE),
        "shipped": r.register_script(NOTE_LATEST),
    }
    keys = {name: [f"{name}:{{global}}:{k}" for k in NOTED] for name in scripts}
    pipe = r.pipeline(transaction=False)
    for m in members:
        pipe.zadd(store._global("streams"), {m: now})
        for name in scripts:
            pipe.zadd(keys[name][0], {m: now})
    pipe.execute()
    times: dict[str, list[float]] = {k: [] for k in scripts}
    for call in range(CALLS):
        batch = members[(call * BATCH) % N :][:BATCH]
        t = str(time.time_ns() // 1000)
        args = [len(batch)]
        for m in batch:
            args += [t, repr((hash(m) % 1000) / 1000), m]
        args.append(0)  # no novelty triples
        for name, script in scripts.items():
            t0 = time.perf_counter()
            script(keys=keys[name], args=args)
            times[name].append(time.perf_counter() - t0)
    for name, ts in times.items():
        ms = 1e3 * statistics.median(ts)
        print(f"note {BATCH} latest risks, {name}: {ms:.3f} ms a call")
    pipe = r.pipeline(transaction=False)  # every stream with a latest risk
    for i, m in enumerate(members):
        pipe.zadd(store._global("latest"), {m: (i % 1000) / 1000})
        pipe.zadd(store._tenant_latest(m.split("/")[0]), {m: (i % 1000) / 1000})
    pipe.execute()
    tenants = [f"t{i}" for i in range(TENANTS)]
    held = sum(r.memory_usage(store._tenant_latest(t), samples=0) for t in tenants)
    print(f"the tenants' indexes: {held / N:.0f} B a stream (MEMORY USAGE)")
    scrape: dict[str, list[float]] = {"no tenant": [], f"{TENANTS} tenants": []}
    for _ in range(20):
        for name, asked in zip(scrape, ([], tenants), strict=True):
            t0 = time.perf_counter()
            await store.summary(0.99, 20, asked)
            scrape[name].append(time.perf_counter() - t0)
    for name, ts in scrape.items():
        print(f"scrape, {name}: {1e3 * statistics.median(ts):.2f} ms")
    for limit in (20, 1000):  # GET /streams/top's read, a tenant of 5,000 streams
        ts = []
        for _ in range(20):
            t0 = time.perf_counter()
            await store.top_streams("t0", limit)
            ts.append(time.perf_counter() - t0)
        print(
            f"top {limit} of a tenant's streams: {1e3 * statistics.median(ts):.2f} ms"
        )
    await store.close()


if __name__ == "__main__":
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"CPU: {cpu()}; load: {load}")
    on_redis(main)
