"""`scjepa bench soak`: steady mixed load on a real service for N minutes, watching its
memory and Redis' over time.

    scjepa bench soak --artifact artifacts/demo --minutes 30 --json soak.json

Starts a redis-server and ``scjepa serve`` (tenant and admin keys, the rate limit on,
a short idle TTL), both on 127.0.0.1, and sends at fixed rates (open loop, at most
``--max-in-flight`` requests at once, so the load is bounded whatever the service
does): POST /ingest to a fixed set of streams, to new streams (churn: they go idle and
must be reclaimed by the TTL), GET /risk, GET /streams, GET /metrics, GET /healthz,
malformed bodies (422 expected), and POST /admin/reload of the same artifact now and
then. Every ``--sample-s`` it records the service's RSS, Redis' used memory and key
count, and per request kind the count, errors and latency percentiles. The report's
growth per hour is the least-squares slope over the second half of the run (the first
half lets the state fill: dedupe horizon, history, churn population).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from training.bench import (
    check_json,
    load_after,
    machine,
    nonneg_float,
    positive_float,
    positive_int,
    read_manifest,
    service_env,
    write_json,
)
from training.bench.serve import Conn, _wait, free_port, host_port, redis_server

KEY, ADMIN = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
EXPECTED = {  # kind -> statuses that are not errors
    "ingest": {200},
    "churn": {200},
    "risk": {200, 404},
    "streams": {200},
    "metrics": {200},
    "healthz": {200},
    "bad": {422},
    "reload": {200},
}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scjepa_exe() -> str:
    local = Path(sys.executable).parent / "scjepa"
    return str(local) if local.is_file() else "scjepa"


@contextmanager
def served(
    artifact: Path, redis_url: str, env: dict[str, str], log: Path
) -> Iterator[tuple[str, int]]:
    """``scjepa serve`` on a free loopback port: (url, pid)."""
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    full |= {"SCJEPA_ARTIFACT": str(artifact), "SCJEPA_REDIS_URL": redis_url} | env
    with log.open("w") as out:
        proc = subprocess.Popen(
            [scjepa_exe(), "serve", "--host", "127.0.0.1", "--port", str(port),
             "--log-level", "warning"],
            env=full, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: httpx.get(url + "/readyz", timeout=1).raise_for_status(), 90)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(15)


def redis_memory(url: str) -> dict[str, float]:
    import redis

    r = redis.Redis.from_url(url)
    info = r.info("memory")
    out = {
        "used_mb": info["used_memory"] / 2**20,
        "redis_rss_mb": info["used_memory_rss"] / 2**20,
        "keys": float(r.dbsize()),
    }
    r.close()
    return out


class Load:
    """The request mix, its pacing and its counts."""

    def __init__(self, url: str, args: argparse.Namespace, n_channels: int) -> None:
        self.url, self.args, self.v = url, args, n_channels
        self.rng = random.Random(0)
        self.t0 = float(int(time.time()) - 10**6)  # timestamps well in the past
        self.next_k = [0] * args.streams
        self.churned = 0
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.count: dict[str, int] = defaultdict(int)
        self.examples: dict[str, str] = {}
        self.skipped = 0  # not sent: max in flight reached (the generator saturated)
        self.idle: list[Conn] = []
        self.sem = asyncio.Semaphore(args.max_in_flight)
        self.tasks: set[asyncio.Task[None]] = set()

    def values(self, n: int) -> list[list[float]]:
        x = np.random.default_rng(self.rng.randrange(1 << 30)).normal(size=(n, self.v))
        return x.round(4).tolist()

    def request(self, kind: str) -> tuple[str, str, bytes, dict[str, str]]:
        auth = {"x-api-key": KEY}
        per = self.args.readings_per_request
        if kind == "ingest":
            i = self.rng.randrange(self.args.streams)
            k = self.next_k[i]
            self.next_k[i] = k + per
            readings = [
                {"ts": self.t0 + k + j, "values": v}
                for j, v in enumerate(self.values(per))
            ]
            body = json.dumps({"stream": f"soak-{i}", "readings": readings})
            return "POST", "/ingest", body.encode(), auth
        if kind == "churn":
            self.churned += 1
            readings = [
                {"ts": self.t0 + j, "values": v} for j, v in enumerate(self.values(per))
            ]
            body = json.dumps({"stream": f"churn-{self.churned}", "readings": readings})
            return "POST", "/ingest", body.encode(), auth
        if kind == "risk":
            return (
                "GET",
                f"/risk/soak-{self.rng.randrange(self.args.streams)}",
                b"",
                auth,
            )
        if kind == "streams":
            return "GET", "/streams?limit=100", b"", auth
        if kind == "bad":
            return "POST", "/ingest", b'{"stream": "soak-0", "readings": [', auth
        if kind == "reload":
            return "POST", "/admin/reload", b"", {"x-api-key": ADMIN}
        return "GET", f"/{kind}", b"", {}

    async def one(self, kind: str) -> None:
        method, path, body, headers = self.request(kind)
        reused = bool(self.idle)
        conn = self.idle.pop() if reused else Conn(*host_port(self.url))
        t = time.perf_counter()
        try:
            try:
                status, reply = await asyncio.wait_for(
                    conn.request(method, path, body, headers), 30
                )
            except (ConnectionResetError, BrokenPipeError):
                if not reused:
                    raise
                # the server closed this kept-alive connection as it sat idle (5 s),
                # as we reused it: what an HTTP client does is retry on a new one
                await conn.close()
                conn = Conn(*host_port(self.url))
                status, reply = await asyncio.wait_for(
                    conn.request(method, path, body, headers), 30
                )
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as e:
            self.errors[kind] += 1
            self.examples.setdefault(kind, repr(e))
            await conn.close()
            return
        finally:
            self.sem.release()
        self.lat[kind].append(time.perf_counter() - t)
        self.count[kind] += 1
        if status not in EXPECTED[kind]:
            self.errors[kind] += 1
            self.examples.setdefault(kind, f"{status} {reply[:200]!r}")
        self.idle.append(conn)

    async def ticker(self, kind: str, rate: float, until: float) -> None:
        """Send ``kind`` at ``rate`` a second until ``until`` (open loop)."""
        if rate <= 0:
            return
        start, i = time.perf_counter(), 0
        while (now := time.perf_counter()) < until:
            due = start + i / rate
            if now < due:
                await asyncio.sleep(due - now)
            i += 1
            if self.sem.locked():
                self.skipped += 1
                continue
            await self.sem.acquire()
            task = asyncio.create_task(self.one(kind))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def take(self) -> dict[str, Any]:
        """Counts and latency percentiles since the last take."""
        out: dict[str, Any] = {}
        for kind in sorted(set(self.count) | set(self.errors)):
            ms = 1e3 * np.asarray(self.lat[kind] or [np.nan])
            out[kind] = {
                "n": self.count[kind],
                "errors": self.errors[kind],
                "p50_ms": round(float(np.percentile(ms, 50)), 2),
                "p99_ms": round(float(np.percentile(ms, 99)), 2),
                "max_ms": round(float(np.max(ms)), 2),
            }
        self.lat.clear()
        self.count.clear()
        self.errors.clear()
        return out


def slope_per_hour(t: list[float], y: list[float]) -> float:
    if len(t) < 3:
        return float("nan")
    return float(np.polyfit(np.asarray(t), np.asarray(y), 1)[0] * 3600)


async def drive(
    url: str, pid: int, redis_url: str, args: argparse.Namespace, n_channels: int
) -> dict[str, Any]:
    load = Load(url, args, n_channels)
    seconds = 60 * args.minutes
    began = time.perf_counter()
    until = began + seconds
    rates = {
        "ingest": args.rate, "churn": args.churn, "risk": args.risk_rate,
        "streams": 1.0, "metrics": 0.2, "healthz": 1.0, "bad": 0.5,
        "reload": 1 / args.reload_every_s if args.reload_every_s > 0 else 0.0,
    }  # fmt: skip
    tickers = [asyncio.create_task(load.ticker(k, r, until)) for k, r in rates.items()]
    samples: list[dict[str, Any]] = []
    totals: dict[str, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    all_lat: dict[str, list[float]] = defaultdict(list)
    while (now := time.perf_counter()) < until + args.sample_s / 2:
        await asyncio.sleep(min(args.sample_s, max(0.0, until - now) + 0.01))
        for kind, ms in load.lat.items():
            all_lat[kind] += ms
        window = load.take()
        mem = await asyncio.to_thread(redis_memory, redis_url)
        sample = {
            "t_s": round(time.perf_counter() - began, 1),
            "service_rss_mb": round(rss_mb(pid), 1),
            "redis_used_mb": round(mem["used_mb"], 2),
            "redis_rss_mb": round(mem["redis_rss_mb"], 1),
            "redis_keys": int(mem["keys"]),
            "skipped": load.skipped,
            "requests": window,
        }
        samples.append(sample)
        for kind, w in window.items():
            totals[kind]["n"] += w["n"]
            totals[kind]["errors"] += w["errors"]
        errs = sum(w["errors"] for w in window.values())
        n = sum(w["n"] for w in window.values())
        print(
            f"{sample['t_s']:>7.0f} s  service RSS {sample['service_rss_mb']:7.1f} MB  "
            f"Redis {sample['redis_used_mb']:7.2f} MB ({sample['redis_keys']} keys)  "
            f"{n} requests, {errs} errors, ingest p99 "
            f"{window.get('ingest', {}).get('p99_ms', float('nan'))} ms",
            flush=True,
        )
        if now >= until:
            break
    for t in tickers:
        t.cancel()
    await asyncio.gather(*load.tasks, return_exceptions=True)
    for c in load.idle:
        await c.close()
    half = [s for s in samples if s["t_s"] >= seconds / 2]
    ts = [s["t_s"] for s in half]
    summary: dict[str, Any] = {
        "minutes": args.minutes,
        "samples": len(samples),
        "service_rss_mb": {
            "first": samples[0]["service_rss_mb"] if samples else None,
            "at_half": half[0]["service_rss_mb"] if half else None,
            "last": samples[-1]["service_rss_mb"] if samples else None,
            "max": max(s["service_rss_mb"] for s in samples) if samples else None,
            "growth_mb_per_h_second_half": round(
                slope_per_hour(ts, [s["service_rss_mb"] for s in half]), 2
            ),
        },
        "redis_used_mb": {
            "first": samples[0]["redis_used_mb"] if samples else None,
            "at_half": half[0]["redis_used_mb"] if half else None,
            "last": samples[-1]["redis_used_mb"] if samples else None,
            "max": max(s["redis_used_mb"] for s in samples) if samples else None,
            "growth_mb_per_h_second_half": round(
                slope_per_hour(ts, [s["redis_used_mb"] for s in half]), 2
            ),
        },
        "requests": {
            kind: {
                "n": int(v["n"]),
                "errors": int(v["errors"]),
                "p50_ms": round(
                    float(
                        np.percentile(1e3 * np.asarray(all_lat[kind] or [np.nan]), 50)
                    ),
                    2,
                ),
                "p95_ms": round(
                    float(
                        np.percentile(1e3 * np.asarray(all_lat[kind] or [np.nan]), 95)
                    ),
                    2,
                ),
                "p99_ms": round(
                    float(
                        np.percentile(1e3 * np.asarray(all_lat[kind] or [np.nan]), 99)
                    ),
                    2,
                ),
            }
            for kind, v in sorted(totals.items())
        },
        "errors": int(sum(v["errors"] for v in totals.values())),
        "error_examples": load.examples,
        "skipped": load.skipped,
        "churn_streams": load.churned,
    }
    # the baseline of each memory figure: the same process at half time, once the
    # state has filled; the ratio holds whatever the machine's speed
    summary["baseline"] = "each memory figure at half time (at_half)"
    for key in ("service_rss_mb", "redis_used_mb"):
        m = summary[key]
        m["last_vs_at_half"] = (
            round(m["last"] / m["at_half"], 4) if m["at_half"] and m["last"] else None
        )
    return {"summary": summary, "samples": samples}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifact", type=Path, default=Path("artifacts/demo"))
    p.add_argument("--minutes", type=positive_float, default=30.0)
    p.add_argument("--streams", type=positive_int, default=200, help="steady streams")
    p.add_argument(
        "--rate", type=nonneg_float, default=40.0, help="POST /ingest per second"
    )
    p.add_argument("--readings-per-request", type=positive_int, default=10)
    p.add_argument(
        "--churn", type=nonneg_float, default=1.0, help="new streams per second"
    )
    p.add_argument(
        "--risk-rate", type=nonneg_float, default=80.0, help="GET /risk per second"
    )
    p.add_argument(
        "--reload-every-s",
        type=nonneg_float,
        default=300.0,
        help="POST /admin/reload every this many seconds (0: never)",
    )
    p.add_argument("--sample-s", type=positive_float, default=15.0)
    p.add_argument("--max-in-flight", type=positive_int, default=64)
    p.add_argument(
        "--ttl-s", type=positive_int, default=120, help="the service's idle TTL"
    )
    p.add_argument(
        "--service-env", action="append", default=[], metavar="SCJEPA_X=VALUE"
    )
    p.add_argument("--json", type=Path, help="write the results here")


def run(args: argparse.Namespace) -> int:
    manifest = read_manifest(args.artifact)
    check_json(args.json)
    ran_on = machine()  # cpu, cores, load_before, commit
    env = {
        "SCJEPA_API_KEYS": f"soak:{KEY},@admin:{ADMIN}",
        "SCJEPA_RATE_LIMIT_RPS": "100000",
        "SCJEPA_STREAM_TTL_S": str(args.ttl_s),
        "SCJEPA_DEDUPE_HORIZON": "1000",
        "SCJEPA_HISTORY_LEN": "20",
        "SCJEPA_HOP": "50",
        "SCJEPA_MAX_STREAMS_PER_TENANT": "1000000",
    } | service_env(args.service_env)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"scjepa-soak-{os.getpid()}.log"
    with (
        redis_server() as redis_url,
        served(args.artifact, redis_url, env, log) as (
            url,
            pid,
        ),
    ):
        print(
            f"soak: {url} (pid {pid}), Redis {redis_url}, {args.minutes} min; log {log}"
        )
        out = asyncio.run(drive(url, pid, redis_url, args, int(manifest["n_channels"])))
    out["args"] = {k: str(v) for k, v in vars(args).items() if k != "func"}
    out["service_env"] = {k: v for k, v in env.items() if k != "SCJEPA_API_KEYS"}
    out |= ran_on | {"load_after": load_after()}
    s = out["summary"]
    print(
        f"soak done: {s['errors']} errors; service RSS {s['service_rss_mb']['first']} -> "
        f"{s['service_rss_mb']['last']} MB (second half "
        f"{s['service_rss_mb']['growth_mb_per_h_second_half']:+.1f} MB/h); Redis "
        f"{s['redis_used_mb']['first']} -> {s['redis_used_mb']['last']} MB (second half "
        f"{s['redis_used_mb']['growth_mb_per_h_second_half']:+.2f} MB/h)"
    )
    for kind, r in s["requests"].items():
        print(
            f"  {kind:<8} {r['n']:>8} requests, {r['errors']} errors, p50 "
            f"{r['p50_ms']} ms, p95 {r['p95_ms']} ms, p99 {r['p99_ms']} ms"
        )
    if args.json:
        write_json(args.json, out)
    return 0 if s["errors"] == 0 else 1
