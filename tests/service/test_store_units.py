"""Window arithmetic, the fill rule on both stores, the micro-batcher, and the
no-torch rule."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from support.service_helpers import RedisServer

from service.batcher import Batcher
from service.config import Settings
from service.inference import Scores
from service.store import (
    AppendResult,
    Store,
    completed_ends,
    fill_leading,
    forward_fill,
)
from service.store.memory import MemoryStore
from service.store.redis_store import RedisStore

T0 = 1_700_000_000.0


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
    # plain keys are kept only as their SHA-256, under the default tenant
    hashed = [f"default:sha256:{hashlib.sha256(k).hexdigest()}" for k in (b"k1", b"k2")]
    assert (s.api_keys, s.hop, s.max_batch, s.redis_url) == (
        hashed,
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


def reference_windows(
    ts: np.ndarray, values: np.ndarray, window: int, hop: int
) -> dict[int, tuple[float, float, np.ndarray]]:
    """The rule of service/store/__init__.py written out plainly over a whole accepted
    series: each missing value is the channel's last observed one (NaN before its first)."""
    filled = values.astype(np.float32).copy()
    for v in range(filled.shape[1]):
        last = np.nan
        for i in range(len(filled)):
            if np.isnan(filled[i, v]):
                filled[i, v] = last
            else:
                last = filled[i, v]
    return {
        n: (float(ts[n - window]), float(ts[n - 1]), filled[n - window : n])
        for n in completed_ends(0, len(ts), window, hop)
    }


def test_forward_fill() -> None:
    nan = np.nan
    x = np.array([[nan, 1, nan], [2, nan, nan], [nan, nan, nan]], dtype=np.float32)
    want = [[nan, 1, nan], [2, 1, nan], [2, 1, nan]]
    np.testing.assert_array_equal(forward_fill(x, None), want)
    prev = np.array([5, 6, nan], dtype=np.float32)
    np.testing.assert_array_equal(
        forward_fill(x, prev), [[5, 1, nan], [2, 1, nan], [2, 1, nan]]
    )
    assert forward_fill(x[:0], prev).shape == (0, 3)
    assert forward_fill(x, None) is not x and np.isnan(x[1, 1])  # input untouched


@pytest.mark.parametrize(("window", "hop", "max_windows"), [(20, 7, 50), (20, 20, 2)])
def test_both_stores_cut_identical_windows(
    redis_server: RedisServer, window: int, hop: int, max_windows: int
) -> None:
    """Gaps at the start, across window and request boundaries, a channel never
    observed, with duplicates and late readings mixed in: the same windows from both
    stores, and the ones the rule defines."""
    rng = np.random.default_rng(1)
    n, v = 160, 4
    ts = T0 + np.arange(n, dtype=np.float64)
    x = np.round(rng.normal(size=(n, v)), 4).astype(np.float32)
    x[:7, 0] = np.nan  # a leading gap
    x[15:48, 1] = np.nan  # a gap over window and request boundaries
    x[rng.random(n) < 0.3, 2] = np.nan  # scattered
    x[:, 3] = np.nan  # never observed
    cuts = np.sort(rng.choice(np.arange(1, n), size=12, replace=False))
    calls = []
    for a, b in zip([0, *cuts], [*cuts, n], strict=True):
        t, vals = ts[a:b], x[a:b]
        if a >= 3:  # a retry of earlier readings and a late one with other values
            t = np.concatenate([ts[a - 3 : a - 1], [ts[a - 1] - 0.5], t])
            vals = np.concatenate([x[a - 3 : a - 1], np.full((1, v), 9.0), vals])
        calls.append((t, vals.astype(np.float32)))

    async def feed(store: Store) -> list[AppendResult]:
        out = []
        try:
            for t, vals in calls:
                res = await store.append(
                    "default", "s", t, vals, window=window, hop=hop,
                    max_windows=max_windows,
                )  # fmt: skip
                out.append(res)
            return out
        finally:
            await store.close()

    memory = asyncio.run(feed(MemoryStore(ttl_s=600, history_len=10)))
    redis_store = RedisStore(redis_server.url, prefix=uuid.uuid4().hex, ttl_s=600,
                             history_len=10, dedupe_horizon=10_000, timeout_s=5.0)  # fmt: skip
    redis = asyncio.run(feed(redis_store))
    want = reference_windows(ts, x, window, hop)
    got = 0
    for m, r in zip(memory, redis, strict=True):
        counts = (m.accepted, m.duplicates, m.late, m.total, m.completed)
        assert counts == (r.accepted, r.duplicates, r.late, r.total, r.completed)
        assert [w.n for w in m.windows] == [w.n for w in r.windows]
        for wm, wr in zip(m.windows, r.windows, strict=True):
            start, end, values = want[wm.n]
            assert (wm.start_ts, wm.end_ts) == (wr.start_ts, wr.end_ts) == (start, end)
            np.testing.assert_array_equal(wm.values, values)
            np.testing.assert_array_equal(wr.values, values)
            np.testing.assert_array_equal(
                fill_leading(wm.values), fill_leading(wr.values)
            )
            assert not np.isnan(fill_leading(wr.values)).any()
            got += 1
    assert sum(r.late for r in redis) == sum(a >= 3 for a in [0, *cuts])
    assert (
        got >= 4
        and np.isnan(np.stack([w.values for r in redis for w in r.windows])).any()
    )
