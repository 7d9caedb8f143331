"""`scjepa bench serve`: the running service over loopback, with a real redis-server.

    scjepa bench serve --artifact artifacts/msl --json docs/bench-serve.json

Three measurements, each against its own ceiling measured in the same run:
1. ingest: readings/s through POST /ingest (batched requests, scoring off) vs bare Redis
   doing the same appends (one pipelined RPUSH + LTRIM + EXPIRE per request);
2. scoring: windows/s with hop 100 and many streams vs the artifact's standalone
   onnxruntime throughput at the service's batch size and thread count;
3. GET /risk latency p50/p99 at a fixed request rate while (2) runs.
The load generator sends pre-serialised bodies, so its own JSON cost stays out of the
service's numbers. Everything binds to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server() -> Any:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit(
            "bench serve needs redis-server on the PATH (apt-get install redis-server)"
        )
    port, tmp = free_port(), tempfile.mkdtemp()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            tmp,
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait(lambda: socket.create_connection(("127.0.0.1", port), 0.2).close())
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def service(artifact: Path, redis_url: str, env: dict[str, str]) -> Any:
    port = free_port()
    full = (
        os.environ
        | {"SCJEPA_ARTIFACT": str(artifact), "SCJEPA_REDIS_URL": redis_url}
        | env
    )
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        "service.main:create_app",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]
    proc = subprocess.Popen(cmd, env=full)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(
            lambda: httpx.get(url + "/readyz", timeout=1).raise_for_status(), timeout=60
        )
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _wait(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Conn:
    """One keep-alive HTTP/1.1 connection on raw asyncio streams.

    The load generator shares the 2 cores with the service and Redis; httpx costs
    about a millisecond of CPU per request, which the service's figures would pay for.
    This client writes pre-built requests and reads Content-Length responses (what
    uvicorn sends), nothing more.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b""
    ) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port
            )
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\n"
        if body:
            head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


def host_port(url: str) -> tuple[str, int]:
    u = httpx.URL(url)
    return u.host, int(u.port or 80)


Body = tuple[int, bytes]  # (stream index, pre-serialised POST /ingest body)


def make_bodies(
    n_streams: int,
    per_request: int,
    n_requests: int,
    n_channels: int,
    seed: int = 0,
    name: str = "bench",
) -> list[Body]:
    """Bodies cycling over streams ``{name}-{i}``, timestamps increasing per stream."""
    rng = np.random.default_rng(seed)
    vals = rng.normal(size=(per_request, n_channels)).round(4).tolist()
    bodies = []
    for i in range(n_requests):
        s, k = i % n_streams, (i // n_streams) * per_request
        readings = [{"ts": float(k + j), "values": v} for j, v in enumerate(vals)]
        body = json.dumps({"stream": f"{name}-{s}", "readings": readings}).encode()
        bodies.append((s, body))
    return bodies


async def drive(url: str, bodies: list[Body], concurrency: int) -> dict[str, float]:
    """POST every body once with ``concurrency`` clients. Each stream belongs to one
    client, which sends its bodies in order (as a real sender does), so nothing is late.
    """
    lat: list[float] = []
    counts = {"readings": 0, "windows": 0, "errors": 0, "duplicates": 0, "late": 0}
    queues: list[list[bytes]] = [[] for _ in range(concurrency)]
    for s, body in bodies:
        queues[s % concurrency].append(body)

    async def worker(conn: Conn, queue: list[bytes]) -> None:
        for body in queue:
            t = time.perf_counter()
            status, reply = await conn.request("POST", "/ingest", body)
            lat.append(time.perf_counter() - t)
            if status != 200:
                counts["errors"] += 1
                continue
            res = json.loads(reply)["results"][0]
            counts["readings"] += res["accepted"]
            counts["windows"] += res["windows_scored"]
            counts["duplicates"] += res["duplicates"]
            counts["late"] += res["rejected"]

    queues = [q for q in queues if q]  # fewer streams than clients: some stay idle
    conns = [Conn(*host_port(url)) for _ in queues]
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c, q) for c, q in zip(conns, queues, strict=True)))
    dt = time.perf_counter() - t0
    for c in conns:
        await c.close()
    ms = 1e3 * np.asarray(lat)
    return {
        "seconds": dt,
        "requests": len(lat),
        "errors": counts["errors"],
        "duplicates": counts["duplicates"],
        "late": counts["late"],
        "readings_per_s": counts["readings"] / dt,
        "windows_per_s": counts["windows"] / dt,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


async def bare_redis(
    redis_url: str,
    n_streams: int,
    per_request: int,
    n_requests: int,
    n_channels: int,
    concurrency: int,
) -> dict[str, float]:
    """The ceiling: the same appends straight into Redis, one pipeline per request."""
    import redis.asyncio as aioredis

    r = aioredis.from_url(redis_url)
    row = np.zeros(n_channels + 1, dtype=np.float64).tobytes()  # ts + values, packed
    batch = [row] * per_request
    todo = list(range(n_requests))

    async def worker() -> None:
        while todo:
            i = todo.pop()
            key = f"ceiling:{{bench-{i % n_streams}}}:buf"
            pipe = r.pipeline(transaction=False)
            pipe.rpush(key, *batch)
            pipe.ltrim(key, -100, -1)
            pipe.expire(key, 3600)
            await pipe.execute()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    dt = time.perf_counter() - t0
    await r.aclose()
    return {"seconds": dt, "readings_per_s": n_requests * per_request / dt}


async def risk_at_rate(
    url: str, streams: list[str], rate: float, seconds: float, timeout: float = 5.0
) -> dict[str, float]:
    """GET /risk/{stream} at a fixed request rate (open loop: a request is sent when it
    is due, on an idle connection or a new one); latency percentiles. A request slower
    than ``timeout`` counts as an error (and its latency as ``timeout``)."""
    lat: list[float] = []
    errors = 0
    idle: list[Conn] = []
    opened: list[Conn] = []

    async def one(s: str) -> None:
        nonlocal errors
        conn = idle.pop() if idle else Conn(*host_port(url))
        if conn not in opened:
            opened.append(conn)
        t = time.perf_counter()
        try:
            status, _ = await asyncio.wait_for(
                conn.request("GET", f"/risk/{s}"), timeout
            )
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            errors += 1
            lat.append(timeout)
            return  # the connection is in an unknown state: not reused
        lat.append(time.perf_counter() - t)
        errors += status not in (200, 404)
        idle.append(conn)

    tasks, t0, i = [], time.perf_counter(), 0
    while (now := time.perf_counter() - t0) < seconds:
        due = i / rate
        if now < due:
            await asyncio.sleep(due - now)
        tasks.append(asyncio.create_task(one(streams[i % len(streams)])))
        i += 1
    await asyncio.gather(*tasks)
    for c in opened:
        with contextlib.suppress(OSError):
            await c.close()
    ms = 1e3 * np.asarray(lat)
    return {
        "rate": rate,
        "sent": i,
        "achieved_rate": i / seconds,
        "errors": errors,
        "connections": len(opened),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def batch_stats(url: str) -> dict[str, float]:
    """Mean micro-batch size and onnxruntime time per batch, from the service's /metrics."""
    vals: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        name, _, value = line.partition(" ")
        if name in (
            "scjepa_inference_batch_size_sum",
            "scjepa_inference_batch_size_count",
            "scjepa_inference_duration_seconds_sum",
        ):
            vals[name] = float(value)
    batches = vals.get("scjepa_inference_batch_size_count", 0.0)
    if not batches:
        return {}
    return {
        "batches": batches,
        "mean_batch": vals["scjepa_inference_batch_size_sum"] / batches,
        "inference_busy_s": vals["scjepa_inference_duration_seconds_sum"],
    }


def standalone_windows_per_s(
    artifact: Path, batch: int, threads: int, n_channels: int, seconds: float
) -> float:
    from training.bench_infer import ort_session, time_fn

    sess = ort_session(artifact / "model.onnx", threads, ["CPUExecutionProvider"])
    x = (
        np.random.default_rng(0)
        .normal(size=(batch, 100, n_channels))
        .astype(np.float32)
    )
    return batch / float(
        np.median(time_fn(lambda: sess.run(None, {"window": x}), seconds))
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifact", type=Path, required=True, help="model artifact folder")
    p.add_argument(
        "--streams", type=int, default=200, help="streams for the scoring run"
    )
    p.add_argument("--readings-per-request", type=int, default=100)
    p.add_argument("--requests", type=int, default=2000, help="requests per ingest run")
    p.add_argument("--concurrency", type=int, default=8, help="ingest clients")
    p.add_argument(
        "--score-concurrency",
        type=int,
        default=0,
        help="clients in the scoring run (default 2 x max-batch: enough windows in "
        "flight for full micro-batches, as with many streams)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="onnxruntime intra-op threads (service and standalone)",
    )
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument(
        "--risk-rate",
        type=float,
        default=500.0,
        help="GET /risk requests/s during scoring",
    )
    p.add_argument(
        "--risk-seconds", type=float, default=5.0, help="length of the GET /risk run"
    )
    p.add_argument("--json", type=Path)


def run(args: argparse.Namespace) -> int:
    manifest = json.loads((args.artifact / "manifest.json").read_text())
    v = int(manifest["n_channels"])
    out: dict[str, Any] = {
        "artifact": str(args.artifact),
        "channels": v,
        "cores": os.cpu_count(),
        "args": {k: str(x) for k, x in vars(args).items()},
    }
    base_env = {
        "SCJEPA_INTRA_OP_THREADS": str(args.threads),
        "SCJEPA_MAX_BATCH": str(args.max_batch),
    }
    n, per = args.requests, args.readings_per_request
    score_conc = args.score_concurrency or 2 * args.max_batch
    with redis_server() as redis_url:
        # 1. ingest with scoring off (a hop longer than the run), vs bare Redis
        warm = make_bodies(args.streams, per, n // 10, v, name="warm")
        with service(
            args.artifact,
            redis_url,
            base_env | {"SCJEPA_HOP": str(10**9), "SCJEPA_KEY_PREFIX": "ingest"},
        ) as url:
            asyncio.run(drive(url, warm, args.concurrency))  # warm-up
            ing = asyncio.run(
                drive(
                    url, make_bodies(args.streams, per, n, v, seed=1), args.concurrency
                )
            )
        ceil = asyncio.run(
            bare_redis(redis_url, args.streams, per, n, v, args.concurrency)
        )
        ing["vs_bare_redis"] = ing["readings_per_s"] / ceil["readings_per_s"]
        out["ingest"], out["bare_redis"] = ing, ceil
        print(
            f"ingest: {ing['readings_per_s']:,.0f} readings/s ({ing['vs_bare_redis']:.0%} of bare Redis {ceil['readings_per_s']:,.0f}/s), p99 {ing['p99_ms']:.1f} ms",
            flush=True,
        )

        # 2 + 3. scoring (hop 100: each request of 100 readings completes a window) with GET /risk at a fixed rate
        per_s = 100
        bodies = make_bodies(args.streams, per_s, n, v, seed=2)
        with service(
            args.artifact,
            redis_url,
            base_env | {"SCJEPA_HOP": "100", "SCJEPA_KEY_PREFIX": "score"},
        ) as url:
            asyncio.run(
                drive(url, bodies[: args.streams], score_conc)
            )  # first window per stream

            async def both() -> tuple[dict[str, float], dict[str, float]]:
                load = asyncio.create_task(
                    drive(url, bodies[args.streams :], score_conc)
                )
                await asyncio.sleep(0.5)
                risk = await risk_at_rate(
                    url,
                    [f"bench-{i}" for i in range(args.streams)],
                    args.risk_rate,
                    args.risk_seconds,
                )
                return await load, risk

            scored, risk = asyncio.run(both())
            scored |= batch_stats(url)
        alone = standalone_windows_per_s(
            args.artifact, args.max_batch, args.threads, v, min(3.0, args.risk_seconds)
        )
        scored["standalone_onnxruntime_windows_per_s"] = alone
        scored["vs_standalone"] = scored["windows_per_s"] / alone
        out["scoring"], out["risk_during_scoring"] = scored, risk
        print(
            f"scoring: {scored['windows_per_s']:.1f} windows/s ({scored['vs_standalone']:.0%} of standalone onnxruntime {alone:.1f}/s at batch {args.max_batch}), mean micro-batch {scored.get('mean_batch', 0):.1f}",
            flush=True,
        )
        print(
            f"GET /risk at {risk['achieved_rate']:.0f}/s during scoring: p50 {risk['p50_ms']:.2f} ms, p99 {risk['p99_ms']:.2f} ms, errors {risk['errors']}",
            flush=True,
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0
