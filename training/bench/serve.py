"""`scjepa bench serve`: the running service over loopback, with a real redis-server.

    scjepa bench serve --artifact artifacts/msl --json docs/notebook/bench/serve.json

Four measurements, each against its own ceiling measured in the same run:
1. ingest: readings/s through POST /ingest (batched requests, scoring off) vs bare Redis
   doing the same writes (one pipeline per request), with JSON bodies and with
   MessagePack ones (``--ingest-body``);
2. the scorer tier's throughput with the queue never empty (windows queued first, then
   drained) vs the artifact's standalone throughput in the service's own runtime
   (service/inference.py: same batch size, threads and onnxruntime calls per batch),
   without HTTP or Redis;
3. scoring end to end: windows/s with hop = window and many streams (POST
   /ingest?wait=, so each answer carries its window's score: bound by each window's
   round trip, as many clients as are waiting);
4. GET /risk latency p50/p99 at a fixed request rate while (3) runs, and while windows
   are scored at --scoring-fraction of the capacity: the lower of (2) and (3), i.e.
   what the API passes through or what the scorer tier scores, whichever is less.
With ``--roles split`` (the default) the service runs as the deployment does: an API
process (``--role api``) and a scorer process (``--role scorer``, ``nice``d by
--scorer-nice); ``--roles all`` runs both in one process (the embedded case).
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
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np

from training.bench import (
    load_after,
    machine,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    read_manifest,
    write_json,
)
from training.bench import service_env as parse_service_env
from training.errors import UserError

JSON, MSGPACK = "application/json", "application/msgpack"  # POST /ingest bodies
MEDIA = {"json": JSON, "msgpack": MSGPACK}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server() -> Any:
    exe = shutil.which("redis-server")
    if exe is None:
        raise UserError(
            "this bench needs redis-server on the PATH (apt-get install redis-server)"
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
        proc.terminate()  # a scorer finishes the batches it holds first
        proc.wait(120)
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def service(
    artifact: Path,
    redis_url: str,
    env: dict[str, str],
    roles: str = "all",
    scorer_nice: int = 0,
) -> Any:
    """(API URL, scorer's URL: its /metrics); ``roles`` "split": an API process and a
    scorer process (niced by ``scorer_nice``), "all": one process doing both."""
    if roles == "all":
        with _process(artifact, redis_url, env | {"SCJEPA_ROLE": "all"}) as url:
            yield url, url
        return
    scorer_env = env | {"SCJEPA_ROLE": "scorer"}
    with (
        _process(artifact, redis_url, scorer_env, nice=scorer_nice) as scorer,
        _process(artifact, redis_url, env | {"SCJEPA_ROLE": "api"}) as url,
    ):
        yield url, scorer


@contextmanager
def _process(
    artifact: Path,
    redis_url: str,
    env: dict[str, str],
    nice: int = 0,
    pids: list[int] | None = None,
) -> Any:
    """A service process on a free port (its pid appended to ``pids``); yields its URL
    once it is ready."""
    port = free_port()
    full = (
        os.environ
        | {"SCJEPA_ARTIFACT": str(artifact), "SCJEPA_REDIS_URL": redis_url}
        | env
    )
    cmd = [
        *(["nice", "-n", str(nice)] if nice else []),
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
    proc = subprocess.Popen(cmd, env=full)  # nice execs: the same pid
    if pids is not None:
        pids.append(proc.pid)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(
            lambda: httpx.get(url + "/readyz", timeout=1).raise_for_status(), timeout=60
        )
        yield url
    finally:
        proc.terminate()  # a scorer finishes the batches it holds first
        proc.wait(120)


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

    The load generator shares the machine's cores with the service and Redis; httpx's
    own CPU cost per request would be charged to the service's figures. This client
    writes pre-built requests and reads Content-Length responses (what uvicorn sends),
    nothing more.
    """

    def __init__(self, host: str, port: int, content_type: str = JSON) -> None:
        self.host, self.port, self.content_type = host, port, content_type
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        if body:
            head += (
                f"content-type: {self.content_type}\r\ncontent-length: {len(body)}\r\n"
            )
        req = head.encode() + b"\r\n" + body
        while True:
            fresh = self.writer is None
            if fresh:
                self.reader, self.writer = await asyncio.open_connection(
                    self.host, self.port
                )
            assert self.reader is not None and self.writer is not None
            self.writer.write(req)
            if line := await self.reader.readline():
                break
            # End of stream before a status line: the server closed the connection
            # while it sat idle (uvicorn's keep-alive timeout is 5 s), before reading
            # this request. Reopen once, as HTTP clients do; a new connection that
            # answers nothing is an error.
            await self.close()
            if fresh:
                raise ConnectionResetError(f"{self.host}:{self.port} sent no response")
        status = int(line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        writer, self.reader, self.writer = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


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
    start: int = 0,
    media: str = JSON,
) -> list[Body]:
    """Bodies cycling over streams ``{name}-{i}``, timestamps increasing per stream;
    ``start`` continues an earlier list of ``start`` bodies (same streams, later ts).
    ``media``: JSON, or MessagePack columns (service/ingest_body.py), same readings."""
    rng = np.random.default_rng(seed)
    vals = rng.normal(size=(per_request, n_channels)).round(4)
    packed = vals.astype("<f4").tobytes()
    bodies = []
    for i in range(start, start + n_requests):
        s, k = i % n_streams, (i // n_streams) * per_request
        stream = f"{name}-{s}"
        if media == MSGPACK:
            ts = np.arange(k, k + per_request, dtype="<f8").tobytes()
            obj = {"stream": stream, "ts": ts, "values": packed}
            bodies.append((s, msgspec.msgpack.encode(obj)))
            continue
        rows = vals.tolist()
        readings = [{"ts": float(k + j), "values": v} for j, v in enumerate(rows)]
        body = json.dumps({"stream": stream, "readings": readings}).encode()
        bodies.append((s, body))
    return bodies


async def run_workers(
    url: str,
    queues: list[Any],
    worker: Callable[[Conn, Any], Awaitable[None]],
    media: str = JSON,
) -> None:
    """One keep-alive connection per queue, each driven by ``worker``; closed after."""
    conns = [Conn(*host_port(url), media) for _ in queues]  # connects on first request
    await asyncio.gather(*(worker(c, q) for c, q in zip(conns, queues, strict=True)))
    for c in conns:
        await c.close()


INGEST_COUNTS = (
    ("readings", "accepted"),
    ("windows", "windows_scored"),
    ("duplicates", "duplicates"),
    ("late", "rejected"),
)


SCORED = "/ingest?wait=30"  # the scoring runs: each answer waits for its window's score


async def post_ingest(
    conn: Conn,
    body: bytes,
    lat: list[float],
    counts: dict[str, int],
    path: str = "/ingest",
) -> None:
    """POST one ingest body; its latency to ``lat``, its outcome to the keys of ``counts``."""
    t = time.perf_counter()
    status, reply = await conn.request("POST", path, body)
    lat.append(time.perf_counter() - t)
    if status != 200:
        counts["errors"] += 1
        return
    res = json.loads(reply)["results"][0]
    for key, field in INGEST_COUNTS:
        if key in counts:
            counts[key] += res[field]


async def drive(
    url: str,
    bodies: list[Body],
    concurrency: int,
    path: str = "/ingest",
    media: str = JSON,
) -> dict[str, float]:
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
            await post_ingest(conn, body, lat, counts, path)

    queues = [q for q in queues if q]  # fewer streams than clients: some stay idle
    t0 = time.perf_counter()
    await run_workers(url, queues, worker, media)
    dt = time.perf_counter() - t0
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
    *,
    window: int,
    same_writes: bool = True,
) -> dict[str, Any]:
    """The ceiling: the service's writes straight into Redis, one pipeline per request.

    ``same_writes`` (the default): every write the service's append script makes for a
    request of new readings that completes no window, as plain commands with no logic:
    RPUSH of the packed rows + LTRIM to the window, APPEND of the packed timestamps to
    the dedupe string, HSET of the stream state, EXPIRE of the three keys. Without it
    only the rows are written (RPUSH + LTRIM + EXPIRE): a looser ceiling, recorded
    beside it.
    """
    import redis.asyncio as aioredis

    r = aioredis.from_url(redis_url)
    row = np.zeros(n_channels + 1, dtype=np.float64).tobytes()  # ts + values, packed
    batch = [row] * per_request
    todo = list(range(n_requests))

    async def worker() -> None:
        while todo:
            i = todo.pop()
            s, k = i % n_streams, (i // n_streams) * per_request
            base = f"ceiling:{{bench-{s}}}:"
            pipe = r.pipeline(transaction=False)
            pipe.rpush(base + "rows", *batch)
            pipe.ltrim(base + "rows", -window, -1)
            pipe.expire(base + "rows", 3600)
            if same_writes:
                stamps = np.arange(k, k + per_request, dtype="<f8").tobytes()
                pipe.append(base + "seen", stamps)
                pipe.hset(base + "state", mapping={"n": k + per_request, "last_ts": k})
                pipe.expire(base + "seen", 3600)
                pipe.expire(base + "state", 3600)
            await pipe.execute()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    dt = time.perf_counter() - t0
    await r.flushdb()
    await r.aclose()
    return {
        "seconds": dt,
        "readings_per_s": n_requests * per_request / dt,
        "writes": "rows+seen+state" if same_writes else "rows",
    }


async def drive_at_rate(
    url: str, bodies: list[Body], rate: float, clients: int
) -> dict[str, float]:
    """POST the bodies at a steady ``rate`` requests/s (body i is due at i / rate), the
    way a fleet sends: each stream owned by one of ``clients`` connections, in order.
    A body whose connection is still busy goes out late; ``max_lag_ms`` says by how
    much, so a rate the service does not sustain shows (achieved < rate)."""
    lat: list[float] = []
    lag: list[float] = []
    counts = {"windows": 0, "errors": 0, "late": 0}
    queues: list[list[tuple[int, bytes]]] = [[] for _ in range(clients)]
    for i, (s, body) in enumerate(bodies):
        queues[s % clients].append((i, body))
    queues = [q for q in queues if q]
    t0 = time.perf_counter()

    async def worker(conn: Conn, queue: list[tuple[int, bytes]]) -> None:
        for i, body in queue:
            due = t0 + i / rate
            if (wait := due - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            lag.append(time.perf_counter() - due)
            await post_ingest(conn, body, lat, counts, SCORED)

    await run_workers(url, queues, worker)
    dt = time.perf_counter() - t0
    ms = 1e3 * np.asarray(lat)
    return {
        "rate": rate,
        "seconds": dt,
        "requests": len(lat),
        "errors": counts["errors"],
        "late": counts["late"],
        "windows_per_s": counts["windows"] / dt,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_lag_ms": 1e3 * max(lag),
    }


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


def risk_probe(
    url: str, streams: list[str], rate: float, seconds: float
) -> dict[str, float]:
    """:func:`risk_at_rate` in its own event loop: run in a separate process, so the
    latencies are the service's, not the load generator's event loop's."""
    return asyncio.run(risk_at_rate(url, streams, rate, seconds))


def ignore_sigint() -> None:
    """A worker's initializer: Ctrl-C reaches the whole process group, and the parent
    (which catches it) shuts its workers down, so a worker leaves SIGINT alone rather
    than printing a traceback of its own."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def probe_process() -> Any:
    """A started worker process for :func:`risk_probe` (spawned and imported up front,
    so its start-up is not part of a measurement)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"), initializer=ignore_sigint
    )
    try:
        pool.submit(free_port).result()
        yield pool
    finally:
        pool.shutdown()


def queue_depth(redis_url: str, prefix: str) -> Callable[[], tuple[int, int]]:
    """A probe of the work queue, summed over the prefix's partitions: (depth, queued
    + delivered and not yet acknowledged, as the scorer XDELs what it acknowledges;
    delivered, read by a scorer and not acknowledged)."""
    import redis

    from service.store.redis_store import GROUP

    r = redis.Redis.from_url(redis_url)
    keys = list(r.scan_iter(match=f"{prefix}:*:work", count=1000))

    def depth() -> tuple[int, int]:
        pipe = r.pipeline(transaction=False)
        for k in keys:
            pipe.xlen(k)
            pipe.xpending(k, GROUP)
        out = pipe.execute()
        return sum(out[::2]), sum(int(p["pending"]) for p in out[1::2])

    return depth


def drained(depth: Callable[[], tuple[int, int]], timeout: float = 600.0) -> None:
    """Wait until the work queue is empty and nothing is pending."""
    deadline = time.monotonic() + timeout
    while depth() != (0, 0):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench serve: the scorer left work after {timeout:.0f} s")
        time.sleep(0.05)


def scorer_drain(
    artifact: Path,
    redis_url: str,
    env: dict[str, str],
    bodies: list[Body],
    concurrency: int,
    roles: str,
    scorer_nice: int,
) -> dict[str, Any]:
    """The scorer tier's throughput, counted as standalone onnxruntime counts it: with
    work always waiting. An API-only process queues one window per body (no
    ``?wait``); then the scoring process starts (``roles`` split: ``--role scorer``,
    niced; all: ``--role all``) and the queue's depth is sampled every 20 ms until it
    is empty. windows/s = windows / (empty - last sample before the first read), so
    the model's load and warm-up (before the worker starts) are not counted."""
    import threading

    with _process(artifact, redis_url, env | {"SCJEPA_ROLE": "api"}) as url:
        fill = asyncio.run(drive(url, bodies, concurrency))
    depth = queue_depth(redis_url, env["SCJEPA_KEY_PREFIX"])
    queued = depth()[0]
    samples: list[tuple[float, int, int, float]] = []
    stop = threading.Event()
    pids: list[int] = []

    def sample() -> None:
        while not stop.is_set():
            d, pending = depth()
            cpu = cpu_s(pids[0]) if pids else float("nan")
            samples.append((time.perf_counter(), d, pending, cpu))
            if d == 0:
                return
            time.sleep(0.02)

    probe = threading.Thread(target=sample, daemon=True)
    probe.start()
    role = "scorer" if roles == "split" else "all"
    nice = scorer_nice if roles == "split" else 0
    with _process(
        artifact, redis_url, env | {"SCJEPA_ROLE": role}, nice=nice, pids=pids
    ) as url:
        probe.join(timeout=600)
        stop.set()
        stats = batch_stats(url)
    full = [(t, c) for t, d, pending, c in samples if d == queued and pending == 0]
    empty = [(t, c) for t, d, _, c in samples if d == 0]
    if not full or not empty or queued == 0:
        raise SystemExit(f"bench serve: the scorer did not drain {queued} windows")
    seconds = empty[0][0] - full[-1][0]
    cpu = empty[0][1] - full[-1][1]  # NaN when the process had not started yet
    return {
        "windows": queued,
        "fill_errors": fill["errors"],
        "seconds": seconds,
        "windows_per_s": queued / seconds,
        # the scoring process's own CPU over the same interval (its loop: reads,
        # decoding, writes; with roles split the model runs in a child process, not
        # counted): what bounds one scorer process when the model is fast (a GPU)
        "scorer_cpu_us_per_window": 1e6 * cpu / queued,
        **stats,
    }


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (NaN once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    artifact: Path,
    batch: int,
    threads: int,
    n_channels: int,
    window: int,
    seconds: float,
    cpu_chunk_tokens: int,
    provider: Any = "auto",
    precision: Any = "fp32",
) -> tuple[float, int]:
    """(windows/s, windows per onnxruntime call) of the service's own runtime at
    ``batch``, without HTTP or Redis: the ceiling the service is compared with. It
    runs on the provider and at the precision the service is given (SCJEPA_PROVIDER,
    SCJEPA_PRECISION)."""
    from service.inference import load_model
    from training.bench.infer import time_fn

    model = load_model(
        artifact,
        provider=provider,
        precision=precision,
        intra_op_threads=threads,
        max_batch=batch,
        cpu_chunk_tokens=cpu_chunk_tokens,
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, window, n_channels)).astype(np.float32)
    lat = time_fn(lambda: model.score(x), seconds)
    return batch / float(np.median(lat)), model.run_size


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--artifact", type=Path, required=True, help="model artifact folder")
    p.add_argument(
        "--streams", type=positive_int, default=200, help="streams for the scoring run"
    )
    p.add_argument(
        "--readings-per-request",
        type=positive_int,
        default=100,
        help="readings per POST /ingest in the ingest run (the scoring runs send one "
        "window per request, at hop = window)",
    )
    p.add_argument(
        "--requests", type=positive_int, default=2000, help="requests per ingest run"
    )
    p.add_argument("--concurrency", type=positive_int, default=8, help="ingest clients")
    p.add_argument(
        "--ingest-body",
        default="json,msgpack",
        choices=["json", "msgpack", "json,msgpack"],
        help="body formats of the ingest run, each on its own streams (results: "
        "ingest, ingest_msgpack)",
    )
    p.add_argument(
        "--score-concurrency",
        type=nonneg_int,
        default=0,
        help="clients in the saturating scoring run (default 2 x max-batch: enough "
        "windows in flight for full micro-batches, as with many streams)",
    )
    p.add_argument(
        "--scoring-rate",
        type=nonneg_float,
        default=0.0,
        help="windows/s of the fixed-rate scoring load under which GET /risk is "
        "measured (default: --scoring-fraction of the capacity)",
    )
    p.add_argument(
        "--scoring-fraction",
        type=positive_float,
        default=0.6,
        help="fixed-rate scoring load as a fraction of the capacity measured in the "
        "same run: the lower of the saturated end-to-end rate and the scorer tier's "
        "drain rate",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="onnxruntime intra-op threads (service and standalone)",
    )
    p.add_argument("--max-batch", type=positive_int, default=64)
    p.add_argument(
        "--risk-rate",
        type=positive_float,
        default=500.0,
        help="GET /risk requests/s during scoring",
    )
    p.add_argument(
        "--risk-seconds",
        type=positive_float,
        default=5.0,
        help="length of a GET /risk run",
    )
    p.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="SCJEPA_X=VALUE",
        help="extra service setting (repeatable)",
    )
    p.add_argument(
        "--roles",
        choices=["split", "all"],
        default="split",
        help="split: API and scorer as separate processes (as deployed); all: one "
        "process doing both",
    )
    p.add_argument(
        "--scorer-nice",
        type=int,
        default=10,
        help="nice of the scorer process with --roles split (0: not niced)",
    )
    p.add_argument(
        "--drain-windows",
        type=positive_int,
        default=4000,
        help="windows queued for the scorer-throughput run (queue never empty)",
    )
    p.add_argument("--json", type=Path, help="write the results here")


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """Batch statistics of the requests between two /metrics reads."""
    batches = after.get("batches", 0.0) - before.get("batches", 0.0)
    if batches <= 0:
        return {}
    size = after["mean_batch"] * after["batches"]
    size -= before.get("mean_batch", 0.0) * before.get("batches", 0.0)
    return {"batches": batches, "mean_batch": size / batches}


def _mean_rate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' mean readings/s, each run's figure kept beside it."""
    rates = [r["readings_per_s"] for r in runs]
    return runs[0] | {"readings_per_s": float(np.mean(rates)), "runs": rates}


def _autogroup() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/sched_autogroup_enabled").read_text())
    except (OSError, ValueError):
        return None


def run(args: argparse.Namespace) -> int:
    from service.config import Settings
    from service.inference import CPU_CHUNK_TOKENS

    manifest = read_manifest(args.artifact, ("n_channels", "window"))
    v, w = int(manifest["n_channels"]), int(manifest["window"])
    extra_env = parse_service_env(args.service_env)
    out: dict[str, Any] = {
        "artifact": str(args.artifact),
        "channels": v,
        **machine(),  # cpu, cores, load_before, commit
        "roles": args.roles,
        # 1: the kernel shares CPU between sessions first, so nice acts only between
        # this bench's own processes, not against other sessions' (niced) jobs
        "sched_autogroup": _autogroup(),
        "args": {k: str(x) for k, x in vars(args).items()},
    }
    base_env = {
        "SCJEPA_INTRA_OP_THREADS": str(args.threads),
        "SCJEPA_MAX_BATCH": str(args.max_batch),
    }
    base_env |= extra_env
    n, per = args.requests, args.readings_per_request
    score_conc = args.score_concurrency or 2 * args.max_batch
    names = [f"bench-{i}" for i in range(args.streams)]
    with redis_server() as redis_url, probe_process() as probe:
        # 1. ingest, scoring off: hop longer than the run, and the warm-up sends each
        #    stream's first window of readings, so the one window a stream ever
        #    completes is scored before the measurement.
        warm_n = args.streams * -(-w // per)
        media = [MEDIA[m] for m in args.ingest_body.split(",")]
        split = partial(service, roles=args.roles, scorer_nice=args.scorer_nice)
        # the ceilings are measured before and after the service's run and averaged
        # (a shared machine's speed moves within minutes)
        bare = partial(bare_redis, redis_url, args.streams, per, n, v, args.concurrency)
        ceil_runs = [asyncio.run(bare(window=w))]
        rows_runs = [asyncio.run(bare(window=w, same_writes=False))]
        ings: dict[str, dict[str, Any]] = {}
        with split(
            args.artifact,
            redis_url,
            base_env | {"SCJEPA_HOP": str(10**9), "SCJEPA_KEY_PREFIX": "ingest"},
        ) as (url, _):
            for body in media:  # the same readings, each format on its own streams
                name = "bench" if body == JSON else "bench-msgpack"
                bodies = make_bodies(
                    args.streams, per, warm_n + n, v, seed=1, name=name, media=body
                )
                asyncio.run(drive(url, bodies[:warm_n], args.concurrency, media=body))
                drained(queue_depth(redis_url, "ingest"))  # no scoring during the run
                ings[body] = dict(
                    asyncio.run(
                        drive(url, bodies[warm_n:], args.concurrency, media=body)
                    )
                )
        ceil_runs.append(asyncio.run(bare(window=w)))
        rows_runs.append(asyncio.run(bare(window=w, same_writes=False)))
        ceil, rows = _mean_rate(ceil_runs), _mean_rate(rows_runs)
        out["bare_redis"], out["bare_redis_rows_only"] = ceil, rows
        for body, ing in ings.items():
            ing["readings_per_request"] = per
            ing["body"] = body
            ing["vs_bare_redis"] = ing["readings_per_s"] / ceil["readings_per_s"]
            ing["vs_bare_redis_rows_only"] = (
                ing["readings_per_s"] / rows["readings_per_s"]
            )
            out["ingest" if body == JSON else "ingest_msgpack"] = ing
            print(
                f"ingest ({args.roles}, {body}): {ing['readings_per_s']:,.0f} readings/s "
                f"of {v} channels, {per} a request ({ing['vs_bare_redis']:.0%} of bare "
                f"Redis, same writes, {ceil['readings_per_s']:,.0f}/s; "
                f"{ing['vs_bare_redis_rows_only']:.0%} of rows only, "
                f"{rows['readings_per_s']:,.0f}/s), p99 {ing['p99_ms']:.1f} ms",
                flush=True,
            )

        # 2-4: hop = window, so each request of a window's readings completes a window
        bodies = make_bodies(args.streams, w, args.streams + n, v, seed=2)
        service_env = os.environ | base_env  # what the service processes are given
        chunk_tokens = int(
            base_env.get("SCJEPA_CPU_CHUNK_TOKENS", "") or CPU_CHUNK_TOKENS
        )
        standalone = partial(
            standalone_windows_per_s,
            args.artifact,
            args.max_batch,
            args.threads,
            v,
            w,
            min(3.0, args.risk_seconds),
            chunk_tokens,
            service_env.get(
                "SCJEPA_PROVIDER", Settings.model_fields["provider"].default
            ),
            service_env.get(
                "SCJEPA_PRECISION", Settings.model_fields["precision"].default
            ),
        )
        before_alone, per_call = standalone()

        # 2. the scorer tier's throughput with the queue never empty (no client waits
        #    on a window): the figure compared with standalone onnxruntime
        drain = scorer_drain(
            args.artifact,
            redis_url,
            base_env | {"SCJEPA_HOP": str(w), "SCJEPA_KEY_PREFIX": "drain"},
            make_bodies(args.streams, w, args.drain_windows, v, seed=4),
            args.concurrency,
            args.roles,
            args.scorer_nice,
        )

        # 3 + 4. scoring, saturated, then at a fixed share of the capacity; GET /risk
        #    at a fixed rate during each, from a separate process.
        def with_risk(load: Any) -> tuple[dict[str, Any], dict[str, Any]]:
            async def both() -> tuple[dict[str, Any], dict[str, Any]]:
                task = asyncio.create_task(load)
                await asyncio.sleep(0.5)
                risk = await asyncio.get_running_loop().run_in_executor(
                    probe, risk_probe, url, names, args.risk_rate, args.risk_seconds
                )
                return await task, risk

            return asyncio.run(both())

        with split(
            args.artifact,
            redis_url,
            base_env | {"SCJEPA_HOP": str(w), "SCJEPA_KEY_PREFIX": "score"},
        ) as (url, metrics_url):
            # first window per stream
            asyncio.run(drive(url, bodies[: args.streams], score_conc, SCORED))
            before = batch_stats(metrics_url)
            scored, risk = with_risk(
                drive(url, bodies[args.streams :], score_conc, SCORED)
            )
            after = batch_stats(metrics_url)
            scored |= _delta(after, before)
            scored["inference_busy_s"] = after.get(
                "inference_busy_s", 0.0
            ) - before.get("inference_busy_s", 0.0)

            # the service's capacity: the lower of what the API passes through (the
            # saturated run) and what the scorer tier scores (the drain)
            capacity = min(scored["windows_per_s"], drain["windows_per_s"])
            rate = args.scoring_rate or args.scoring_fraction * capacity
            m = max(1, int(rate * (args.risk_seconds + 1.0)))
            fixed_bodies = make_bodies(
                args.streams, w, m, v, seed=3, start=args.streams + n
            )
            clients = min(args.streams, 32)
            fixed, risk_fixed = with_risk(
                drive_at_rate(url, fixed_bodies, rate, clients)
            )
            fixed |= _delta(batch_stats(metrics_url), after)
            fixed["capacity_windows_per_s"] = capacity
            fixed["fraction_of_capacity"] = rate / max(capacity, 1e-9)
            fixed["clients"] = clients
        after_alone, _ = standalone()
        # the machine is shared: the ceiling is the mean of runs before and after
        alone = (before_alone + after_alone) / 2
        drain["vs_standalone"] = drain["windows_per_s"] / alone
        out["scorer_drain"] = drain
        scored["standalone_onnxruntime_windows_per_s"] = alone
        scored["standalone_before_after"] = [before_alone, after_alone]
        scored["standalone_windows_per_call"] = per_call
        scored["vs_standalone"] = scored["windows_per_s"] / alone
        out["scoring"], out["risk_during_scoring"] = scored, risk
        out["fixed_rate_scoring"], out["risk_during_fixed_rate_scoring"] = (
            fixed,
            risk_fixed,
        )
        out["load_after"] = load_after()
        print(
            f"scoring, {score_conc} clients each waiting for its window (latency-bound): {scored['windows_per_s']:.1f} windows/s ({scored['vs_standalone']:.0%} of standalone onnxruntime {alone:.1f}/s at batch {args.max_batch}), mean micro-batch {scored.get('mean_batch', 0):.1f}",
            flush=True,
        )
        print(
            f"GET /risk at {risk['achieved_rate']:.0f}/s during saturated scoring: p50 {risk['p50_ms']:.2f} ms, p99 {risk['p99_ms']:.2f} ms, errors {risk['errors']}",
            flush=True,
        )
        print(
            f"GET /risk at {risk_fixed['achieved_rate']:.0f}/s during scoring at {rate:.1f} windows/s ({fixed['fraction_of_capacity']:.0%} of capacity {fixed['capacity_windows_per_s']:.1f}; achieved {fixed['windows_per_s']:.1f}, max lag {fixed['max_lag_ms']:.0f} ms): p50 {risk_fixed['p50_ms']:.2f} ms, p99 {risk_fixed['p99_ms']:.2f} ms, errors {risk_fixed['errors']}",
            flush=True,
        )
    print(
        f"scorer tier, queue never empty ({args.roles}): {drain['windows_per_s']:.1f} windows/s ({drain['vs_standalone']:.0%} of standalone onnxruntime {alone:.1f}/s), {drain['windows']} windows, mean micro-batch {drain.get('mean_batch', 0):.1f}, scorer loop {drain['scorer_cpu_us_per_window']:.0f} µs CPU a window",
        flush=True,
    )
    if args.json:
        write_json(args.json, out, indent=2)
    return 0
