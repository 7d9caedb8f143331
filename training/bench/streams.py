"""`scjepa bench streams`: many distinct streams, what each costs, and that the idle TTL
gives it back.

    scjepa bench streams --artifact artifacts/demo --streams 100000 --json streams.json

Starts a redis-server and ``scjepa serve`` on 127.0.0.1 (Redis store, idle TTL
``--ttl-s``), creates ``--streams`` streams of ``--readings`` readings each (batched
POST /ingest, ``--concurrency`` clients), and reports Redis' used memory and the
service's RSS per stream (``MEMORY USAGE`` of one stream's keys too), the latency of
GET /metrics, GET /streams (a page), GET /risk and POST /ingest at that count, then
stops sending, waits out the TTL while a scraper polls /metrics and /streams (as
Prometheus and a dashboard would), and reports how much came back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from training import strict_json
from training.bench import (
    check_json,
    load_after,
    machine,
    positive_int,
    read_manifest,
    write_json,
)
from training.bench.serve import Conn, host_port, redis_server
from training.bench.soak import redis_memory, rss_mb, served


def median_ms(lat: list[float]) -> float:
    return round(1e3 * float(np.median(lat)), 3)


async def create(url: str, n: int, readings: int, v: int, concurrency: int) -> float:
    per_request = max(1, min(500, 10_000 // readings))
    vals = np.random.default_rng(0).normal(size=(readings, v)).round(4).tolist()
    t0 = float(int(time.time()) - 10**6)
    rows = [{"ts": t0 + j, "values": vals[j]} for j in range(readings)]
    starts = list(range(0, n, per_request))

    async def worker(mine: list[int]) -> None:
        conn = Conn(*host_port(url))
        for a in mine:
            streams = [
                {"stream": f"s-{i:06d}", "readings": rows}
                for i in range(a, min(n, a + per_request))
            ]
            body = json.dumps({"streams": streams}).encode()
            status, reply = await conn.request("POST", "/ingest", body)
            assert status == 200, reply[:300]
        await conn.close()

    t = time.perf_counter()
    await asyncio.gather(*(worker(starts[w::concurrency]) for w in range(concurrency)))
    return time.perf_counter() - t


async def timed(url: str, method: str, paths: list[str], body: bytes = b"") -> float:
    conn, lat = Conn(*host_port(url)), []
    for p in paths:
        t = time.perf_counter()
        status, reply = await conn.request(method, p, body)
        lat.append(time.perf_counter() - t)
        assert status < 500, reply[:300]
    await conn.close()
    return median_ms(lat)


def stream_key_bytes(
    redis_url: str, prefix: str = "scjepa", stream: str = "s-000000"
) -> dict[str, int]:
    """MEMORY USAGE of each key of one stream (tenant default)."""
    import redis

    from service.store.redis_store import partition

    r = redis.Redis.from_url(redis_url)
    tag = f"{prefix}:{{p{partition('default', stream, 16)}}}:default/{stream}"
    out = {
        k: int(r.memory_usage(f"{tag}:{k}", samples=0) or 0)
        for k in ("rows", "seen", "state", "risk")
    }
    r.close()
    return out


def long_lived_bytes(redis_url: str, channels: int = 25) -> dict[str, Any]:
    """Redis bytes of one long-lived stream, written through the service's store:
    60,000 readings of ``channels`` values (past the default dedupe horizon), a full
    risk history (500 records of 5 top channels, as the scorer writes them); and the
    dedupe horizon as the sorted set it used to be (10,000 members), for comparison."""
    import numpy as np
    import redis

    from service.schemas import ChannelShare, ModelRef, RiskRecord
    from service.store import Record
    from service.store.redis_store import RedisStore

    t0 = 1_700_000_000.0

    async def fill() -> None:
        store = RedisStore(redis_url, prefix="long", ttl_s=3600, history_len=500,
                           dedupe_horizon=10_000, timeout_s=10.0, partitions=16)  # fmt: skip
        rng = np.random.default_rng(0)
        for k in range(60):
            ts = t0 + np.arange(k * 1000, (k + 1) * 1000, dtype=np.float64)
            x = rng.normal(size=(1000, channels)).astype(np.float32)
            await store.append("default", "s-000000", ts, x, window=100, hop=100,
                               max_queued=10**6)  # fmt: skip
        # the scorer's record (service.worker.records_of) with float32 numbers at
        # their full printed length, the novelty included
        f32 = lambda v: float(np.float32(v))  # noqa: E731
        rec = RiskRecord(
            n=0, risk=f32(0.1228), threshold=f32(0.3084), alert=False,
            window_start=t0, window_end=t0 + 99,
            top_channels=[ChannelShare(name=f"ch{i}", share=0.123457) for i in range(5)],
            codes=[1, 2, 3, 4, 5], novelty=f32(0.5123),
            model=ModelRef(name="m", version="1"), computed_at=datetime.now(UTC),
        )  # fmt: skip
        recs = [
            Record(n, rec.model_copy(update={"n": n}).model_dump_json(), rec.risk,
                   rec.novelty, (t0 + n - 100, t0 + n - 1), rec.alert)
            for n in range(100, 50_100, 100)
        ]  # fmt: skip
        state = store._key("default", "s-000000", "state")
        epoch = int(await store.client.hget(state, "epoch"))  # the windows' epoch
        await store.put_scored([("default", "s-000000", epoch, recs)])
        await store.close()

    asyncio.run(fill())
    now = stream_key_bytes(redis_url, "long")
    r = redis.Redis.from_url(redis_url)
    ts = t0 + np.arange(10_000, dtype=np.float64)
    for a in range(0, 10_000, 1000):
        r.zadd("long:zset-seen", {t.tobytes(): float(t) for t in ts[a : a + 1000]})
    zset = int(r.memory_usage("long:zset-seen", samples=0) or 0)
    r.close()
    total = sum(now.values())
    before = total - now["seen"] + zset
    return {
        "channels": channels,
        "bytes_by_key": now,
        "bytes_per_stream": total,
        "seen_as_sorted_set": zset,
        "bytes_per_stream_with_sorted_set": before,
        "streams_per_gib": round(2**30 / total),
        "streams_per_gib_with_sorted_set": round(2**30 / before),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifact", type=Path, default=Path("artifacts/demo"))
    p.add_argument("--streams", type=positive_int, default=100_000)
    p.add_argument(
        "--readings", type=positive_int, default=10, help="readings per stream"
    )
    p.add_argument("--concurrency", type=positive_int, default=4)
    p.add_argument("--ttl-s", type=positive_int, default=60)
    p.add_argument(
        "--long-lived",
        action="store_true",
        help="only measure Redis bytes of one long-lived stream (60,000 readings, a "
        "full risk history) and streams per GiB; no service",
    )
    p.add_argument("--json", type=Path, help="write the results here")


def run(args: argparse.Namespace) -> int:
    check_json(args.json)
    ran_on = machine()  # cpu, cores, load_before, commit
    if args.long_lived:
        with redis_server() as redis_url:
            res = ran_on | long_lived_bytes(redis_url) | {"load_after": load_after()}
        print(strict_json.dumps(res, indent=1))
        if args.json:
            write_json(args.json, res)
        return 0
    v = int(read_manifest(args.artifact)["n_channels"])
    env = {
        "SCJEPA_STREAM_TTL_S": str(args.ttl_s),
        "SCJEPA_MAX_STREAMS_PER_TENANT": str(2 * args.streams),
    }
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"scjepa-streams-{os.getpid()}.log"
    out: dict[str, Any] = ran_on | {"args": {k: str(x) for k, x in vars(args).items()}}
    with (
        redis_server() as redis_url,
        served(args.artifact, redis_url, env, log) as (
            url,
            pid,
        ),
    ):
        run_async = asyncio.run
        run_async(create(url, 1, args.readings, v, 1))  # warm-up: one stream
        base = {"service_rss_mb": rss_mb(pid), **redis_memory(redis_url)}
        m0 = run_async(timed(url, "GET", ["/metrics"] * 5))
        seconds = run_async(
            create(url, args.streams, args.readings, v, args.concurrency)
        )
        time.sleep(min(6.0, args.ttl_s / 3))  # the registry memo's prune interval
        full = {"service_rss_mb": rss_mb(pid), **redis_memory(redis_url)}
        n = args.streams
        out["create_s"] = round(seconds, 1)
        out["streams_per_s"] = round(n / seconds)
        out["baseline"], out["at_n"] = base, full
        out["redis_bytes_per_stream"] = round(
            (full["used_mb"] - base["used_mb"]) * 2**20 / n
        )
        out["service_bytes_per_stream"] = round(
            (full["service_rss_mb"] - base["service_rss_mb"]) * 2**20 / n
        )
        out["memory_usage_one_stream"] = stream_key_bytes(redis_url)
        out["keys_per_stream"] = round((full["keys"] - base["keys"]) / n, 2)
        body = json.dumps(
            {
                "stream": "s-000001",
                "readings": [{"ts": float(int(time.time())), "values": [0.0] * v}],
            }
        ).encode()
        out["latency_ms_at_n"] = {
            "metrics_at_1": m0,
            "metrics": run_async(timed(url, "GET", ["/metrics"] * 10)),
            "streams_page_1000": run_async(
                timed(url, "GET", ["/streams?limit=1000"] * 10)
            ),
            "risk": run_async(
                timed(
                    url,
                    "GET",
                    [f"/risk/s-{i:06d}" for i in range(0, n, max(1, n // 100))],
                )
            ),
            "ingest_one_reading": run_async(timed(url, "POST", ["/ingest"] * 20, body)),
        }
        print(strict_json.dumps(out, indent=1), flush=True)
        # idle: wait out the TTL while a scraper polls, as Prometheus would
        t = time.perf_counter()
        deadline = t + args.ttl_s + 120
        after: dict[str, Any] = {}
        while time.perf_counter() < deadline:
            time.sleep(5)
            run_async(timed(url, "GET", ["/metrics", "/streams?limit=1000"]))
            mem = redis_memory(redis_url)
            after = {
                "t_s": round(time.perf_counter() - t),
                "service_rss_mb": rss_mb(pid),
                **mem,
            }
            print(f"idle {after}", flush=True)
            if mem["keys"] <= base["keys"] + 2 and time.perf_counter() - t > args.ttl_s:
                break
        out["after_ttl"] = after
        out["reclaimed_redis_mb"] = round(full["used_mb"] - after["used_mb"], 2)
        # the ratio: what the TTL gave back of what the streams took over the
        # baseline (one stream), measured in the same run
        grew = full["used_mb"] - base["used_mb"]
        out["reclaimed_share"] = (
            round(out["reclaimed_redis_mb"] / grew, 4) if after and grew > 0 else None
        )
        out["load_after"] = load_after()
    if args.json:
        write_json(args.json, out)
    print(
        f"{n} streams of {args.readings} readings: Redis "
        f"{out['redis_bytes_per_stream']} B/stream, service "
        f"{out['service_bytes_per_stream']} B/stream; /metrics "
        f"{out['latency_ms_at_n']['metrics']} ms, /streams page "
        f"{out['latency_ms_at_n']['streams_page_1000']} ms; after the TTL Redis holds "
        f"{after.get('used_mb', float('nan')):.1f} MB ({after.get('keys')} keys, "
        f"baseline {base['used_mb']:.1f} MB, {base['keys']} keys)"
    )
    return 0
