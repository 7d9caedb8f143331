"""Window arithmetic, leading-gap fill, the micro-batcher, and the no-torch rule."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from service.batcher import Batcher
from service.config import Settings
from service.inference import Scores
from service.store import completed_ends, fill_leading


@pytest.mark.parametrize("window", [1, 5, 100])
@pytest.mark.parametrize("hop", [1, 3, 10, 100])
def test_completed_ends_matches_the_definition(window: int, hop: int) -> None:
    for n0 in range(0, 130, 7):
        for k in (0, 1, 2, 13, 101):
            want = [n for n in range(n0 + 1, n0 + k + 1)
                    if n >= window and (n - window) % hop == 0]  # fmt: skip
            assert completed_ends(n0, n0 + k, window, hop) == want


def test_fill_leading() -> None:
    x = np.array([[np.nan, np.nan], [np.nan, 1.0], [2.0, 3.0]], dtype=np.float32)
    np.testing.assert_array_equal(fill_leading(x), [[2, 1], [2, 1], [2, 3]])
    never = np.full((3, 1), np.nan, dtype=np.float32)
    np.testing.assert_array_equal(fill_leading(never), np.zeros((3, 1)))


def test_batcher_merges_concurrent_requests() -> None:
    calls: list[int] = []

    def score(x: np.ndarray) -> Scores:
        calls.append(len(x))
        s = x.sum(axis=(1, 2))
        return Scores(s, x[:, 0, :], np.zeros((len(x), 1), np.int64))

    async def main() -> list[Scores]:
        b = Batcher(score, max_batch=64, max_wait_s=0.05)
        b.start()
        try:
            jobs = [
                np.full((k, 2, 3), float(i), np.float32)
                for i, k in enumerate((1, 3, 2))
            ]
            return list(await asyncio.gather(*(b.score(j) for j in jobs)))
        finally:
            await b.stop()

    out = asyncio.run(main())
    assert calls == [6]  # one onnxruntime call for the three submissions
    assert [len(s) for s in out] == [1, 3, 2]
    for i, s in enumerate(out):
        np.testing.assert_array_equal(s.risk, np.full(len(s), 6.0 * i))


def test_batcher_respects_max_batch_and_reports_errors() -> None:
    calls: list[int] = []

    def score(x: np.ndarray) -> Scores:
        calls.append(len(x))
        if (x < 0).any():
            raise ValueError("negative")
        return Scores(x[:, 0, 0], x[:, 0, :], np.zeros((len(x), 1), np.int64))

    async def main() -> None:
        b = Batcher(score, max_batch=2, max_wait_s=0.05)
        b.start()
        try:
            ones = np.ones((1, 1, 1), np.float32)
            await asyncio.gather(*(b.score(ones) for _ in range(4)))
            with pytest.raises(ValueError, match="negative"):
                await b.score(-ones)
            assert (await b.score(ones)).risk[0] == 1.0  # still running after a failure
        finally:
            await b.stop()

    asyncio.run(main())
    assert max(calls[:2]) == 2 and sum(calls[:2]) == 4


def test_service_never_imports_torch() -> None:
    code = (
        "import sys, service.main, service.cli, training.demo.replay, training.bench.loadtest,"
        " service.store.redis_store, training.cli;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_settings_from_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env file
    monkeypatch.setenv("SCJEPA_API_KEYS", "k1, k2,")
    monkeypatch.setenv("SCJEPA_HOP", "")  # empty = unset = the manifest's hop
    monkeypatch.setenv("SCJEPA_MAX_BATCH", "8")
    monkeypatch.setenv("SCJEPA_REDIS_URL", "redis://r:6379/0")
    s = Settings()
    assert (s.api_keys, s.hop, s.max_batch, s.redis_url) == (
        ["k1", "k2"],
        None,
        8,
        "redis://r:6379/0",
    )
    monkeypatch.setenv("SCJEPA_HOP", "0")
    with pytest.raises(ValidationError, match="hop"):
        Settings()


def test_redis_pool_queues_instead_of_failing(redis_server) -> None:  # type: ignore[no-untyped-def]
    """More concurrent operations than pooled connections wait; none fails."""
    from service.store.redis_store import RedisStore

    async def burst() -> None:
        store = RedisStore(redis_server.url, prefix="pooltest", ttl_s=60, history_len=10,
                           dedupe_horizon=100, timeout_s=5.0, max_connections=2)  # fmt: skip
        try:
            # a non-blocking pool of 2 raises MaxConnectionsError here
            await asyncio.gather(*(store.ping() for _ in range(200)))
        finally:
            await store.close()

    asyncio.run(burst())
