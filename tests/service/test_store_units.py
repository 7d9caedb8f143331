"""Window arithmetic, the fill rule on both stores, the micro-batcher, and the
no-torch rule."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from support.service_helpers import AnyRedis

from service import metrics
from service.batcher import Batcher
from service.config import Settings
from service.inference import Scores
from service.store import (
    AppendResult,
    Record,
    Store,
    WorkItem,
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


def infer(score: Callable[[np.ndarray], Scores]) -> Callable[[np.ndarray], Any]:
    """A batcher's model: ``score`` awaited, as ModelSlot.score is."""

    async def run(x: np.ndarray) -> Scores:
        return score(x)

    return run


def test_batcher_merges_concurrent_requests() -> None:
    calls: list[int] = []

    def score(x: np.ndarray) -> Scores:
        calls.append(len(x))
        s = x.sum(axis=(1, 2))
        return Scores(s, x[:, 0, :], np.zeros((len(x), 1), np.int64))

    async def main() -> list[Scores]:
        b = Batcher(infer(score), max_batch=64, max_wait_s=0.05)
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
        b = Batcher(infer(score), max_batch=2, max_wait_s=0.05)
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
        "import sys, service.main, service.cli, training.demo.replay,"
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


def test_redis_pool_queues_instead_of_failing(any_redis: AnyRedis) -> None:
    """More concurrent operations than pooled connections wait; none fails (one Redis:
    its blocking pool; a Cluster: the store's bound on commands in flight)."""

    async def burst() -> None:
        store = RedisStore(any_redis.url, prefix="pooltest", ttl_s=60, history_len=10,
                           dedupe_horizon=100, timeout_s=30.0, max_connections=2)  # fmt: skip
        try:
            # a non-blocking pool of 2 raises MaxConnectionsError here
            await asyncio.gather(*(store.ping() for _ in range(200)))
        finally:
            await store.close()

    asyncio.run(burst())


def test_groups_already_there_are_no_store_error(any_redis: AnyRedis) -> None:
    """Before: every scorer start (a call a queue reader) counted each existing
    group's BUSYGROUP reply in scjepa_store_errors_total{op="work"}, 16 a start, and
    two restarts fired the critical ScjepaStoreErrors page with nothing wrong."""
    errors = metrics.STORE_ERRORS.labels(op="work")

    async def twice() -> None:
        store = RedisStore(any_redis.url, prefix=uuid.uuid4().hex, ttl_s=60,
                           history_len=10, dedupe_horizon=1000, timeout_s=5.0,
                           partitions=4)  # fmt: skip
        try:
            await store.ensure_groups()
            before = errors._value.get()
            await store.ensure_groups()
            await store.ensure_groups()
            assert errors._value.get() == before
        finally:
            await store.close()

    asyncio.run(twice())


def test_a_burst_of_every_kind_of_call_queues_for_the_pool(any_redis: AnyRedis) -> None:
    """Many times more concurrent calls than connections, by every path through the
    store (appends of several streams, whose script calls run one a stream on a
    Cluster; pipelined reads; single commands and read scripts): each waits its turn
    and succeeds, every reading is stored once and every window queued once. (A long
    timeout: the subject is waiting instead of failing, not speed on a busy machine.)"""
    ts, x = T0 + np.arange(100.0), np.ones((100, 2), np.float32)
    names = [[f"c{k}s{i}" for i in range(12)] for k in range(20)]  # 12 a call

    async def burst() -> tuple[list[Any], list[WorkItem]]:
        store = RedisStore(any_redis.url, prefix=uuid.uuid4().hex, ttl_s=60,
                           history_len=10, dedupe_horizon=1000, timeout_s=30.0,
                           max_connections=2, partitions=4)  # fmt: skip
        try:
            await store.ensure_groups()
            calls: list[Any] = []
            for streams in names:  # 240 script calls at once
                batch = [(s, ts, x) for s in streams]
                calls.append(
                    store.append_many("t", batch, window=50, hop=50, max_queued=9999)
                )
            calls += [store.ping() for _ in range(60)]
            calls += [store.latest("t", s) for s in names[0] * 5]
            calls += [store.state("t", s) for s in names[1] * 5]
            calls += [store.queue_stats() for _ in range(20)]
            out = await asyncio.gather(*calls)
            return out, await store.read_work("c", 1000, 0)
        finally:
            await store.close()

    out, items = asyncio.run(burst())
    appended = [r for call in out[: len(names)] for r in call]
    assert [(r.accepted, r.total, r.queued) for r in appended] == [
        (100, 100, [50, 100])
    ] * 240
    assert sorted((it.stream, it.window.n) for it in items) == sorted(
        (s, n) for streams in names for s in streams for n in (50, 100)
    )


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


@pytest.mark.parametrize(("window", "hop", "max_queued"), [(20, 7, 1000), (20, 20, 2)])
def test_both_stores_cut_identical_windows(
    any_redis: AnyRedis, window: int, hop: int, max_queued: int
) -> None:
    """Gaps at the start, across window and request boundaries, a channel never
    observed, with duplicates and late readings mixed in: the same windows queued by
    both stores (the same ones shed past ``max_queued``), and the ones the rule
    defines."""
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

    async def feed(store: Store) -> tuple[list[AppendResult], list[WorkItem]]:
        out = []
        try:
            await store.ensure_groups()
            for t, vals in calls:
                res = await store.append(
                    "default", "s", t, vals, window=window, hop=hop,
                    max_queued=max_queued,
                )  # fmt: skip
                out.append(res)
            return out, await store.read_work("c", 1000, 0)
        finally:
            await store.close()

    memory, m_items = asyncio.run(feed(MemoryStore(ttl_s=600, history_len=10)))
    redis_store = RedisStore(any_redis.url, prefix=uuid.uuid4().hex, ttl_s=600,
                             history_len=10, dedupe_horizon=10_000, timeout_s=5.0,
                             partitions=1)  # fmt: skip
    redis, r_items = asyncio.run(feed(redis_store))
    want = reference_windows(ts, x, window, hop)
    for m, r in zip(memory, redis, strict=True):
        counts = (m.accepted, m.duplicates, m.late, m.total, m.completed)
        assert counts == (r.accepted, r.duplicates, r.late, r.total, r.completed)
        assert (m.queued, m.shed) == (r.queued, r.shed)
        assert m.completed == len(m.queued) + m.shed
    assert [it.window.n for it in m_items] == [it.window.n for it in r_items]
    assert [it.window.n for it in r_items] == [n for r in redis for n in r.queued]
    for im, ir in zip(m_items, r_items, strict=True):
        wm, wr = im.window, ir.window
        assert (im.tenant, im.stream) == (ir.tenant, ir.stream) == ("default", "s")
        start, end, values = want[wm.n]
        assert (wm.start_ts, wm.end_ts) == (wr.start_ts, wr.end_ts) == (start, end)
        np.testing.assert_array_equal(wm.values, values)
        np.testing.assert_array_equal(wr.values, values)
        np.testing.assert_array_equal(fill_leading(wm.values), fill_leading(wr.values))
        assert not np.isnan(fill_leading(wr.values)).any()
    assert sum(r.late for r in redis) == sum(a >= 3 for a in [0, *cuts])
    shed = sum(r.shed for r in redis)
    assert sum(len(r.queued) for r in redis) + shed == len(want)
    assert len(r_items) >= 4
    assert np.isnan(np.stack([it.window.values for it in r_items])).any()


def fresh_store(
    url: str | None,
    *,
    dedupe_horizon: int,
    partitions: int,
    lateness_s: float = 0.0,
) -> Store:
    """An empty store: in memory (``url`` None), or on the Redis at ``url`` under a new
    prefix; TTL 600 s, history 10; the Redis-only knobs apply to the Redis store."""
    if url is None:
        return MemoryStore(ttl_s=600, history_len=10, lateness_s=lateness_s)
    return RedisStore(
        url,
        prefix=uuid.uuid4().hex,
        ttl_s=600,
        history_len=10,
        dedupe_horizon=dedupe_horizon,
        timeout_s=5.0,
        partitions=partitions,
        lateness_s=lateness_s,
    )


def test_work_queue_claims_and_first_write_wins(store_url: str | None) -> None:
    """An item read and not acknowledged is claimed by another consumer after the
    timeout (not before); a window's record written twice is kept once (the first);
    acknowledged items leave the queue."""

    async def main() -> None:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=4)
        try:
            await store.ensure_groups()
            await store.register("t", ["a", "b"], 10)
            for s in ("a", "b"):
                x = np.ones((30, 2), np.float32)
                await store.append("t", s, T0 + np.arange(30.0), x, window=10, hop=10,
                                   max_queued=100)  # fmt: skip
            assert (await store.queue_stats()).depth == 6
            first = await store.read_work("dies", 4, 0.1)
            rest = await store.read_work("lives", 10, 0.1)
            assert len(first) + len(rest) == 6
            assert await store.read_work("lives", 10, 0) == []  # each delivered once
            assert await store.claim_work("lives", 5.0, 10) == []  # not idle long yet
            await asyncio.sleep(0.3)
            claimed = await store.claim_work("lives", 0.2, 10)
            assert {i.id for i in claimed} >= {i.id for i in first}
            recs = [
                (
                    it.tenant,
                    it.stream,
                    it.epoch,
                    [Record(it.window.n, f"first-{it.window.n}", 0.5, None)],
                )
                for it in first
            ]
            assert await store.put_scored(recs) == [[True]] * len(first)
            again = [
                (t, s, e, [Record(n, "second", 0.9, None)])
                for t, s, e, [(n, *_)] in recs
            ]
            # the scorer's whole write: records, then the acknowledgements and news
            ack = [i.id for i in first]
            flags = await store.put_scored(again, ack=ack, publish=True)
            assert flags == [[False]] * len(first)
            assert (await store.queue_stats()).depth == len(rest)  # first: acked
            for t, s, _, [(n, rec, *_)] in recs:
                assert await store.scored(t, [(s, [n, 999])]) == [{n: rec}]
            await store.ack_work([i.id for i in rest])
            stats = await store.queue_stats()
            assert (stats.depth, stats.oldest_age_s) == (0, 0.0)
        finally:
            await store.close()

    asyncio.run(main())


def test_an_error_reply_to_the_scorers_write_is_store_unavailable(
    any_redis: AnyRedis,
) -> None:
    """The scorer's second round trip (newest risks, acknowledgements, news) is packed
    on the store's own connections: an error reply to an acknowledgement (here
    WRONGTYPE: the partition made a string) fails the call as StoreUnavailable,
    counted under its operation, as the pipeline's did; the records of the first
    round trip stay. An error reply to the newest-risk index only (a Redis at
    maxmemory refuses its ZADD, not XACK) is counted, not raised: the windows are
    acknowledged, done."""
    from service import metrics
    from service.store import StoreUnavailable

    async def main() -> None:
        store = fresh_store(any_redis.url, dedupe_horizon=100, partitions=2)
        assert isinstance(store, RedisStore)
        errors = metrics.STORE_ERRORS.labels(op="put_risks")
        try:
            await store.ensure_groups()
            await store.register("t", ["a"], 10)
            x = np.ones((20, 2), np.float32)
            await store.append("t", "a", T0 + np.arange(20.0), x, window=10, hop=10,
                               max_queued=100)  # fmt: skip
            first, second = await store.read_work("c", 10, 0.1)
            await store.client.set(store._global("latest"), "not a sorted set")
            before = errors._value.get()
            rec = [("t", "a", first.epoch, [Record(first.window.n, "rec", 0.5, None)])]
            assert await store.put_scored(rec, ack=[first.id], publish=True) == [[True]]
            assert errors._value.get() == before + 1
            assert (await store.queue_stats()).depth == 1  # acknowledged: gone

            await store.client.delete(store._global("latest"))
            work = store.work_keys[int(second.id.partition("-")[0])]
            await store.client.set(work, "not a stream")
            rec = [
                ("t", "a", second.epoch, [Record(second.window.n, "rec2", 0.5, None)])
            ]
            with pytest.raises(StoreUnavailable, match="WRONGTYPE"):
                await store.put_scored(rec, ack=[second.id], publish=True)
            assert await store.scored("t", [("a", [10, 20])]) == [
                {10: "rec", 20: "rec2"}
            ]
        finally:
            await store.close()

    asyncio.run(main())


def test_a_read_takes_at_most_count_windows(store_url: str | None) -> None:
    """A scorer's read brings at most ``count`` windows (each stays pending on it until
    acknowledged: an unbounded read of a deep queue waited past the claim timeout and
    was scored twice), whether they are spread over the partitions or piled in one
    (a short first pass is topped up from the partitions that had more)."""

    async def main() -> tuple[list[int], int]:
        store = fresh_store(store_url, dedupe_horizon=1000, partitions=4)
        try:
            await store.ensure_groups()
            streams = [f"s{i}" for i in range(12)]
            await store.register("t", [*streams, "solo"], 100)
            x = np.ones((100, 2), np.float32)
            for s in streams:  # 10 windows each, over the 4 partitions
                await store.append("t", s, T0 + np.arange(100.0), x, window=10, hop=10,
                                   max_queued=1000)  # fmt: skip
            sizes = []
            while items := await store.read_work("c", 16, 0):
                sizes.append(len(items))
            await store.append("t", "solo", T0 + np.arange(100.0), x, window=10,
                               hop=10, max_queued=1000)  # fmt: skip
            return sizes, len(await store.read_work("c", 8, 0))
        finally:
            await store.close()

    sizes, solo = asyncio.run(main())
    assert sum(sizes) == 120 and max(sizes) == 16, sizes
    assert solo == 8  # one partition's share is 2 of 8: topped up


def test_dedupe_horizon_is_packed_and_bounded(any_redis: AnyRedis) -> None:
    """The accepted timestamps rest as 8 bytes each, trimmed to the horizon (with a
    slack of a quarter); a retry inside the horizon counts as duplicates, older
    readings as late."""
    prefix = uuid.uuid4().hex

    async def main() -> list[AppendResult]:
        store = RedisStore(any_redis.url, prefix=prefix, ttl_s=600, history_len=10,
                           dedupe_horizon=256, timeout_s=5.0, partitions=1)  # fmt: skip
        out = []
        try:
            for k in range(10):
                ts = T0 + np.arange(100 * k, 100 * (k + 1), dtype=np.float64)
                out.append(await store.append(
                    "t", "s", ts, np.zeros((100, 1), np.float32), window=10,
                    hop=1000, max_queued=10,
                ))  # fmt: skip
            retry = T0 + np.arange(900, 1000, dtype=np.float64)  # inside the horizon
            out.append(await store.append("t", "s", retry, np.zeros((100, 1),
                       np.float32), window=10, hop=1000, max_queued=10))  # fmt: skip
            old = T0 + np.arange(0, 100, dtype=np.float64)  # past it: late
            out.append(await store.append("t", "s", old, np.zeros((100, 1),
                       np.float32), window=10, hop=1000, max_queued=10))  # fmt: skip
        finally:
            await store.close()
        return out

    out = asyncio.run(main())
    assert (out[-2].duplicates, out[-2].late) == (100, 0)
    assert (out[-1].duplicates, out[-1].late) == (0, 100)
    r = any_redis.client()
    (key,) = list(r.scan_iter(f"{prefix}:*:seen"))
    seen = np.frombuffer(r.get(key), "<f8")
    assert 256 <= len(seen) <= 256 + 64 + 100
    np.testing.assert_array_equal(seen, T0 + np.arange(1000 - len(seen), 1000))


def test_allowed_lateness_merges_out_of_order_readings(store_url: str | None) -> None:
    """With SCJEPA_ALLOWED_LATENESS_S = 30, batches arriving out of order within 30 s
    are merged in timestamp order: the windows equal those of in-order arrival; a
    reading at or below the watermark (newest - 30 s) is late; a retry of a held
    reading is a duplicate."""
    rng = np.random.default_rng(3)
    x = np.round(rng.normal(size=(200, 2)), 4).astype(np.float32)
    ts = T0 + np.arange(200, dtype=np.float64)
    # 10-reading batches, each pair swapped: 10-19 before 0-9, 30-39 before 20-29, ...
    order = [b + d for b in range(0, 20, 2) for d in (1, 0)]

    async def main() -> tuple[list[AppendResult], list[WorkItem]]:
        store = fresh_store(
            store_url, dedupe_horizon=1000, partitions=1, lateness_s=30.0
        )
        out = []
        try:
            await store.ensure_groups()
            for b in order:
                sl = slice(10 * b, 10 * b + 10)
                out.append(await store.append("t", "s", ts[sl], x[sl], window=50,
                                              hop=50, max_queued=100))  # fmt: skip
            again = slice(185, 195)  # held readings sent again: duplicates
            out.append(await store.append("t", "s", ts[again], x[again], window=50,
                                          hop=50, max_queued=100))  # fmt: skip
            old = np.array([T0 + 150.5])  # at or below the watermark (199 - 30): late
            out.append(await store.append("t", "s", old, x[:1], window=50, hop=50,
                                          max_queued=100))  # fmt: skip
            return out, await store.read_work("c", 100, 0)
        finally:
            await store.close()

    out, items = asyncio.run(main())
    assert sum(r.accepted for r in out) == 200
    assert sum(r.late for r in out[:-2]) == 0  # out of order, within the lateness
    assert (out[-2].duplicates, out[-1].late) == (10, 1)
    assert out[-1].total == 170 and out[-1].held == 30  # 170..199 wait for more
    assert [it.window.n for it in items] == [50, 100, 150]
    for it in items:
        n = it.window.n
        np.testing.assert_array_equal(it.window.values, x[n - 50 : n])
        assert it.window.end_ts == ts[n - 1]


def test_in_order_calls_match_the_memory_store(any_redis: AnyRedis) -> None:
    """The append script's common call (timestamps increasing, all new, none missing,
    no lateness: stored as sent, no per-reading work) between calls that take the
    reading-by-reading path (a gap to fill, a retry overlapping the newest, readings
    out of order in one call): the same counts and windows as the memory store and
    the rule, on two streams written in one pipeline."""
    rng = np.random.default_rng(5)
    n, v = 120, 3
    ts = T0 + np.arange(n, dtype=np.float64)
    x = np.round(rng.normal(size=(n, v)), 4).astype(np.float32)
    x[47, 1] = np.nan  # one call with a missing value: filled from reading 46
    calls = [(ts[a:b], x[a:b]) for a, b in [(0, 25), (25, 40), (40, 60)]]
    calls.append((ts[55:80], x[55:80]))  # overlaps: 5 duplicates, then new readings
    calls.append((ts[[90, 80, 81]], x[[90, 80, 81]]))  # out of order: 2 late
    calls += [(ts[a:b], x[a:b]) for a, b in [(91, 100), (100, 120)]]
    kept = np.r_[0:80, 90:120]  # what the rule accepts
    want = reference_windows(ts[kept], x[kept], 20, 10)

    async def feed(store: Store) -> tuple[list[list[AppendResult]], list[WorkItem]]:
        out = []
        try:
            await store.ensure_groups()
            for t, vals in calls:
                out.append(await store.append_many(
                    "t", [("a", t, vals), ("b", t, vals)], window=20, hop=10,
                    max_queued=1000,
                ))  # fmt: skip
            return out, await store.read_work("c", 1000, 0)
        finally:
            await store.close()

    memory, m_items = asyncio.run(feed(fresh_store(None, dedupe_horizon=1000,
                                                   partitions=2)))  # fmt: skip
    redis, r_items = asyncio.run(feed(fresh_store(any_redis.url, dedupe_horizon=1000,
                                                  partitions=2)))  # fmt: skip
    assert [(r.accepted, r.duplicates, r.late) for r, _ in redis] == [
        (25, 0, 0), (15, 0, 0), (20, 0, 0), (20, 5, 0), (1, 0, 2), (9, 0, 0),
        (20, 0, 0),
    ]  # fmt: skip
    assert memory == redis
    for items in (m_items, r_items):
        assert sorted((it.stream, it.window.n) for it in items) == [
            (s, k) for s in "ab" for k in sorted(want)
        ]
        for it in items:
            start, end, values = want[it.window.n]
            assert (it.window.start_ts, it.window.end_ts) == (start, end)
            np.testing.assert_array_equal(it.window.values, values)


def test_scripts_unknown_to_redis_are_loaded_again(any_redis: AnyRedis) -> None:
    """After SCRIPT FLUSH (as after a Redis restart) an append of one stream and one
    of several streams (a pipeline) still store every reading once."""

    async def main() -> list[AppendResult]:
        store = fresh_store(any_redis.url, dedupe_horizon=100, partitions=4)
        x = np.ones((5, 2), np.float32)
        out = []
        try:
            for k, streams in enumerate([["a"], ["a", "b", "c"]]):
                any_redis.client().script_flush()  # every master's, on a Cluster
                t = T0 + np.arange(5.0 * k, 5.0 * k + 5)
                out += await store.append_many(
                    "t", [(s, t, x) for s in streams], window=10, hop=10,
                    max_queued=100,
                )  # fmt: skip
        finally:
            await store.close()
        return out

    out = asyncio.run(main())
    assert [(r.accepted, r.duplicates, r.total) for r in out] == [
        (5, 0, 5), (5, 0, 10), (5, 0, 5), (5, 0, 5),
    ]  # fmt: skip


def test_a_call_cut_short_leaves_no_reply_behind(tmp_path: Path) -> None:
    """A Redis that stops answering (SIGSTOP) while connections are being made, and
    again mid-stream: the ingest calls fail as StoreUnavailable within twice the
    timeout, and once it answers again every call's reply is its own (a connection cut
    mid-handshake or mid-call is closed, not reused with a reply still to come)."""
    import os
    import signal

    from support.service_helpers import RedisServer as Server

    from service.store import StoreUnavailable

    server = Server(tmp_path).start()
    pid = server.proc.pid if server.proc else 0
    x = np.ones((10, 2), np.float32)

    async def append(store: RedisStore, k: int) -> AppendResult:
        t = T0 + np.arange(10.0 * k, 10.0 * k + 10)
        return await store.append("t", "s", t, x, window=100, hop=100, max_queued=10)

    async def stopped(store: RedisStore, k: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await asyncio.gather(append(store, k), append(store, k))
            assert time.monotonic() - start < 5.0  # 2 x 0.2 s, and a loaded machine
        finally:
            os.kill(pid, signal.SIGCONT)

    async def main() -> list[AppendResult]:
        store = RedisStore(server.url, prefix="p", ttl_s=600, history_len=10,
                           dedupe_horizon=1000, timeout_s=0.2)  # fmt: skip
        try:
            await stopped(store, 0)  # no connection yet: cut mid-handshake
            out = [await append(store, 0)]
            await stopped(store, 1)  # cut mid-call
            # the stopped calls ran once Redis went on, or never: sent again below
            return out + [await append(store, k) for k in (1, 2)]
        finally:
            await store.close()

    try:
        out = asyncio.run(main())
    finally:
        server.stop()
    # each reply is its call's: the totals in order, and the call never cut short
    # (k = 2) all new; a cut call may have run (its retry then finds duplicates)
    assert [r.total for r in out] == [10, 20, 30]
    assert out[2] == AppendResult(10, 0, 0, 30, 0, [], 0, 0)
    assert all(r.accepted + r.duplicates == 10 and r.late == 0 for r in out)


def test_the_first_append_after_a_redis_restart_is_stored(tmp_path: Path) -> None:
    """Redis killed (its scripts and data gone) and started again on its port: while
    it is down an append is StoreUnavailable; the first one after is stored, its
    stale connection and the unknown script dealt with inside the call."""
    from support.service_helpers import RedisServer as Server

    from service.store import StoreUnavailable

    server = Server(tmp_path).start()
    x = np.ones((1, 2), np.float32)

    async def append(store: RedisStore, t: float) -> AppendResult:
        ts = np.array([T0 + t])
        return await store.append("t", "s", ts, x, window=10, hop=10, max_queued=10)

    async def main() -> list[AppendResult]:
        store = RedisStore(server.url, prefix="p", ttl_s=600, history_len=10,
                           dedupe_horizon=100, timeout_s=0.5)  # fmt: skip
        try:
            out = [await append(store, 0)]
            server.stop()
            with pytest.raises(StoreUnavailable):
                await append(store, 1)
            server.start()
            return [*out, await append(store, 2), await append(store, 3)]
        finally:
            await store.close()

    try:
        out = asyncio.run(main())
    finally:
        server.stop()
    assert [(r.accepted, r.total) for r in out] == [(1, 1), (1, 1), (1, 2)]


def test_readings_held_when_the_lateness_goes_to_zero_are_merged(
    store_url: str | None,
) -> None:
    """Readings held under SCJEPA_ALLOWED_LATENESS_S = 30 (answered accepted, held)
    and the lateness then set to 0 (a restart; here the store's setting changed): the
    stream's next call merges them in before its own, so no accepted reading is lost
    and the windows are those of in-order arrival; a retry of them is a duplicate."""
    rng = np.random.default_rng(9)
    x = np.round(rng.normal(size=(140, 2)), 4).astype(np.float32)
    ts = T0 + np.arange(140, dtype=np.float64)

    async def main() -> tuple[list[AppendResult], list[WorkItem]]:
        store = fresh_store(store_url, dedupe_horizon=1000, partitions=1,
                            lateness_s=30.0)  # fmt: skip
        out = []
        try:
            await store.ensure_groups()

            async def add(a: int, b: int) -> None:
                out.append(await store.append("t", "s", ts[a:b], x[a:b], window=50,
                                              hop=50, max_queued=100))  # fmt: skip

            await add(0, 120)  # 90..119 held: newer than the watermark 119 - 30
            store.lateness_s = 0.0  # type: ignore[attr-defined]
            await add(120, 130)
            await add(90, 120)  # the held ones sent again
            await add(130, 140)  # and on as usual
            return out, await store.read_work("c", 100, 0)
        finally:
            await store.close()

    out, items = asyncio.run(main())
    got = [(r.accepted, r.held, r.total) for r in out]
    assert got == [(120, 30, 90), (10, 0, 130), (0, 0, 130), (10, 0, 140)], out
    assert (out[2].accepted, out[2].duplicates, out[2].late) == (0, 30, 0)
    assert [it.window.n for it in items] == [50, 100]
    for it in items:
        n = it.window.n
        np.testing.assert_array_equal(it.window.values, x[n - 50 : n])


def test_work_items_carry_the_streams_epoch(store_url: str | None) -> None:
    """Every window carries its stream's epoch; a stream that starts over (here a
    model of another layout, SCJEPA_LAYOUT_CHANGE=fresh) has a later one, its window
    numbers beginning again."""

    async def main() -> list[tuple[int, int]]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        out = []
        try:
            await store.ensure_groups()
            for k, layout in enumerate(["w10/v2/a", "w10/v2/a", "w10/v2/b"]):
                store.layout = layout  # type: ignore[attr-defined]
                t = T0 + 20 * k + np.arange(20.0)
                await store.append("t", "s", t, np.ones((20, 2), np.float32),
                                   window=10, hop=10, max_queued=100)  # fmt: skip
                out += [(it.epoch, it.window.n)
                        for it in await store.read_work("c", 10, 0)]  # fmt: skip
        finally:
            await store.close()
        return out

    got = asyncio.run(main())
    assert [n for _, n in got] == [10, 20, 30, 40, 10, 20]
    epochs = [e for e, _ in got]
    assert epochs[0] > 1_600_000_000 * 10**6  # the clock, in microseconds
    assert len(set(epochs[:4])) == 1 and epochs[4] == epochs[5] > epochs[0]


def test_a_refused_registration_notes_nothing(store_url: str | None) -> None:
    """A request whose new streams would take the tenant past its quota is refused
    whole: its allowed new streams are not registered either (they held quota places
    and were listed, with no readings, until the TTL)."""

    async def main() -> tuple[list[str], list[str], list[str], list[str]]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        try:
            first = await store.register("t", ["a"], 2)
            refused = await store.register("t", ["a", "b", "c"], 2)
            listed = await store.streams("t", None, 10)
            then = await store.register("t", ["d"], 2)
            return first, refused, listed, then
        finally:
            await store.close()

    assert asyncio.run(main()) == ([], ["c"], ["a"], [])


def test_a_stream_whose_rows_were_evicted_goes_on(any_redis: AnyRedis) -> None:
    """A stream's buffered rows lost while its state stayed (a Redis under an LRU
    maxmemory-policy evicts key by key): its next appends are stored and counted,
    and windows are cut again once a window of rows is held, from those rows only.
    The script failed on the missing rows (every ingest of the stream 503 after its
    readings were pushed untrimmed), and later cut windows from the wrong rows."""
    x = np.arange(400 * 2, dtype=np.float32).reshape(400, 2)
    ts = T0 + np.arange(400.0)

    async def main() -> tuple[list[AppendResult], list[WorkItem], int]:
        store = fresh_store(any_redis.url, dedupe_horizon=1000, partitions=2)
        assert isinstance(store, RedisStore)
        out = []
        try:
            await store.ensure_groups()

            async def add(a: int, b: int) -> None:
                out.append(await store.append("t", "s", ts[a:b], x[a:b], window=50,
                                              hop=10, max_queued=1000))  # fmt: skip

            await add(0, 150)
            while await store.read_work("c", 100, 0):
                pass
            await store.client.delete(store._key("t", "s", "rows"))  # evicted
            for a in range(150, 250, 20):
                await add(a, a + 20)
            rows = await store.client.llen(store._key("t", "s", "rows"))
            return out, await store.read_work("c", 100, 0), rows
        finally:
            await store.close()

    out, items, rows = asyncio.run(main())
    assert [(r.accepted, r.total) for r in out] == [(150, 150)] + [
        (20, 150 + 20 * k) for k in range(1, 6)
    ]
    assert rows == 50  # trimmed to the window again
    # 100 rows held from reading 151 on: the first window is 200, cut from them only
    assert [it.window.n for it in items] == [200, 210, 220, 230, 240, 250]
    for it in items:
        n = it.window.n
        np.testing.assert_array_equal(it.window.values, x[n - 50 : n])


def test_windows_acknowledged_despite_a_failed_gauge_write_are_told(
    any_redis: AnyRedis, artifact_dir: Path
) -> None:
    """The scorer's second round trip (the newest-risk index, the acknowledgements)
    whose index write fails (a Redis at maxmemory refuses that ZADD, OOM, but not
    XACK / XDEL; here the index made another type): the windows' records are
    written and acknowledged, so they are done, counted and told to the listeners.
    The call raised: nobody was told, and, acknowledged, nothing claimed them again."""
    from fastapi.testclient import TestClient

    from service import metrics
    from service.main import create_app
    from service.worker import ScoredWindow

    settings = Settings(artifact=artifact_dir, redis_url=any_redis.url,
                        key_prefix=f"t{uuid.uuid4().hex[:8]}", claim_timeout_s=0.3,
                        hop=10)  # fmt: skip
    heard: list[int] = []

    async def listen(windows: Any) -> None:
        heard.extend(w.window_n for w in windows if isinstance(w, ScoredWindow))

    scored = metrics.WINDOWS_SCORED.labels(tenant="default")._value
    with TestClient(create_app(settings)) as client:
        app: Any = client.app
        app.state.worker.listeners.append(listen)
        any_redis.client().set(f"{settings.key_prefix}:{{global}}:latest", "not a zset")
        before = scored.get()
        body = {"stream": "s", "readings": [{"ts": T0 + i, "values": [1, 2, 3, float(i)]}
                                            for i in range(120)]}  # fmt: skip
        r = client.post("/ingest", json=body)
        assert r.status_code == 200 and r.json()["results"][0]["windows_queued"] == 3
        deadline = time.monotonic() + 10
        while sorted(set(heard)) != [100, 110, 120]:
            assert time.monotonic() < deadline, heard
            time.sleep(0.05)
        assert scored.get() - before >= 3
        r = client.get("/metrics")
        assert 'scjepa_store_errors_total{op="put_risks"}' in r.text


def test_a_stream_started_over_ignores_its_previous_lifes_records(
    any_redis: AnyRedis,
) -> None:
    """Redis lost a stream's data (restarted without persistence) while a scorer held
    its windows: the scorer's late write finds no state and writes nothing (it put the
    old records back, with no state). Records of the old life left behind anyway (an
    eviction that took the state and not the risks) are dropped when the stream starts
    over: its window numbers begin again, and its own records are its newest (the old
    ones won the first write and stayed GET /risk's newest until the new count passed
    theirs)."""
    x = np.ones((150, 2), np.float32)
    ts = T0 + np.arange(150.0)

    async def main() -> tuple[list[list[bool]], list[list[bool]], str | None, int]:
        store = fresh_store(any_redis.url, dedupe_horizon=1000, partitions=2)
        assert isinstance(store, RedisStore)
        try:
            await store.ensure_groups()
            await store.append("t", "s", ts[:100], x[:100], window=10, hop=10,
                               max_queued=100)  # fmt: skip
            old = await store.read_work("c", 100, 0)  # held by a scorer
            await store.client.delete(*[store._key("t", "s", k) for k in
                                        ("rows", "seen", "state", "risk")])  # fmt: skip
            late = await store.put_scored([("t", "s", old[0].epoch, [Record(it.window.n,
                                           f"old-{it.window.n}", 0.9, None) for it in old])])  # fmt: skip
            await store.client.zadd(store._key("t", "s", "risk"),
                                    {f"left-{n}": n for n in range(10, 101, 10)})  # fmt: skip
            await store.append("t", "s", ts[100:], x[100:], window=10, hop=10,
                               max_queued=100)  # fmt: skip
            new = await store.read_work("c", 100, 0)
            flags = await store.put_scored([("t", "s", new[0].epoch, [Record(it.window.n,
                                             f"new-{it.window.n}", 0.1, None) for it in new])])  # fmt: skip
            state, rec = await store.latest("t", "s")
            assert state is not None
            return late, flags, rec, state.total
        finally:
            await store.close()

    late, flags, rec, n = asyncio.run(main())
    assert late == [[False] * 10]
    assert n == 50 and flags == [[True] * 5]
    assert rec == "new-50"


def test_a_late_write_of_a_stream_started_over_is_refused(
    store_url: str | None,
) -> None:
    """A scorer held a stream's windows while the stream started over (a model of
    another layout, SCJEPA_LAYOUT_CHANGE=fresh) and its new life cut windows of the
    same numbers: the late write of the old epoch writes nothing, and the new life's
    records are written and are GET /risk's (the first write won: the old records
    took the new life's windows 10 and 20, and the new ones were refused)."""

    async def main() -> tuple[
        list[list[bool]], list[list[bool]], dict[int, str], str | None
    ]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        try:
            await store.ensure_groups()
            feed = [("w10/v2/a", T0), ("w10/v2/b", T0 + 100)]
            held = []
            for layout, t0 in feed:
                store.layout = layout  # type: ignore[attr-defined]
                await store.append("t", "s", t0 + np.arange(20.0),
                                   np.ones((20, 2), np.float32), window=10, hop=10,
                                   max_queued=100)  # fmt: skip
                held.append(await store.read_work("c", 10, 0))
            old, new = held
            assert (
                [it.window.n for it in old] == [it.window.n for it in new] == [10, 20]
            )
            assert new[0].epoch > old[0].epoch

            def recs(items: list[WorkItem], tag: str) -> list[Record]:
                return [
                    Record(it.window.n, f"{tag}-{it.window.n}", 0.5, None)
                    for it in items
                ]

            late = await store.put_scored([("t", "s", old[0].epoch, recs(old, "old"))])
            flags = await store.put_scored([("t", "s", new[0].epoch, recs(new, "new"))])
            (got,) = await store.scored("t", [("s", [10, 20])])
            _, newest = await store.latest("t", "s")
            return late, flags, got, newest
        finally:
            await store.close()

    late, flags, got, newest = asyncio.run(main())
    assert late == [[False, False]] and flags == [[True, True]]
    assert got == {10: "new-10", 20: "new-20"} and newest == "new-20"


def test_memory_store_pages_past_expired_streams() -> None:
    """Before: past the 1,000 idle streams dropped a call, expired names were cut
    from the page after it was sliced: a page of none (with live streams left) and
    GET /streams answered next: null."""
    store = MemoryStore(ttl_s=1, history_len=10)

    async def main() -> tuple[list[str], list[str]]:
        old = [f"a{i:05d}" for i in range(3500)]
        assert await store.register("t", old, 10_000) == []
        time.sleep(1.2)
        new = [f"b{i:02d}" for i in range(30)]
        assert await store.register("t", new, 10_000) == []
        return new, await store.streams("t", None, 10)

    new, page = asyncio.run(main())
    assert page == new[:10]
