"""Load generator for the service (behind the later `scjepa bench serve`).

Many synthetic streams POST /ingest concurrently for a fixed time; the report gives
request latency percentiles, readings/s and windows scored/s. Against a running service:

    report = asyncio.run(run_load_url("http://localhost:8000", n_streams=200))

or in process (lifespan included, no network) with :func:`run_load_in_process`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np

from service.config import Settings


@dataclass
class LoadReport:
    requests: int
    errors: int
    readings: int
    windows_scored: int
    duration_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    readings_per_s: float
    windows_per_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def run_load(
    client: httpx.AsyncClient,
    *,
    n_channels: int,
    n_streams: int = 50,
    readings_per_request: int = 10,
    concurrency: int = 16,
    duration_s: float = 10.0,
    seed: int = 0,
    headers: dict[str, str] | None = None,
) -> LoadReport:
    """Each of ``concurrency`` workers cycles over its share of the streams."""
    rng = np.random.default_rng(seed)
    t0 = float(int(time.time()))
    next_ts = dict.fromkeys(range(n_streams), 0)
    latencies: list[float] = []
    counts = {"errors": 0, "readings": 0, "windows": 0}
    deadline = time.monotonic() + duration_s

    async def worker(mine: list[int]) -> None:
        i = 0
        while mine and time.monotonic() < deadline:
            s = mine[i % len(mine)]
            i += 1
            k = next_ts[s]
            next_ts[s] = k + readings_per_request
            values = (
                rng.normal(size=(readings_per_request, n_channels)).round(4).tolist()
            )
            body = {
                "stream": f"load-{s}",
                "readings": [
                    {"ts": t0 + k + j, "values": v} for j, v in enumerate(values)
                ],
            }
            start = time.perf_counter()
            try:
                r = await client.post(
                    "/ingest", json=body, headers=headers, params={"wait": 30}
                )
            except httpx.HTTPError:
                counts["errors"] += 1
                continue
            latencies.append(time.perf_counter() - start)
            if r.status_code != 200:
                counts["errors"] += 1
                continue
            res = r.json()["results"][0]
            counts["readings"] += res["accepted"]
            counts["windows"] += res["windows_scored"]

    began = time.monotonic()
    await asyncio.gather(
        *(worker(list(range(w, n_streams, concurrency))) for w in range(concurrency))
    )
    elapsed = time.monotonic() - began
    ms = np.array(latencies or [np.nan]) * 1000
    return LoadReport(
        requests=len(latencies),
        errors=counts["errors"],
        readings=counts["readings"],
        windows_scored=counts["windows"],
        duration_s=round(elapsed, 3),
        p50_ms=float(np.percentile(ms, 50)),
        p95_ms=float(np.percentile(ms, 95)),
        p99_ms=float(np.percentile(ms, 99)),
        max_ms=float(np.max(ms)),
        readings_per_s=counts["readings"] / elapsed,
        windows_per_s=counts["windows"] / elapsed,
    )


async def run_load_url(url: str, **kwargs: Any) -> LoadReport:
    """Load a running service; the channel count comes from its GET /models."""
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        r = await client.get("/models", headers=kwargs.get("headers"))
        r.raise_for_status()
        n_channels = int(r.json()["models"][0]["manifest"]["n_channels"])
        return await run_load(client, n_channels=n_channels, **kwargs)


async def run_load_in_process(settings: Settings, **kwargs: Any) -> LoadReport:
    """Start the app in this process (lifespan included) and load it without sockets."""
    from service.main import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as c:
            return await run_load(c, n_channels=app.state.model.n_channels, **kwargs)
