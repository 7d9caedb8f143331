"""scjepa_top_stream_risk and scjepa_top_stream_novelty on every store (in memory, one
Redis, a Redis Cluster): the gauges labelled by stream export exactly the
SCJEPA_TOP_STREAMS streams of highest latest risk, and of highest recent novelty (the
input-drift monitor's, smoothed per stream), over every tenant; a stream that leaves
the top N leaves the exposition (no stale value), and N = 0 exports no series."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from support.service_helpers import ClientFactory
from test_store_units import fresh_store

from service.config import Settings
from service.store import NOVELTY_SPAN, Record, Store, recent_novelty
from service.store.redis_store import RedisStore

T0 = 1_700_000_000.0
KEYS = {"acme": "k-acme", "beta": "k-beta"}
OPS = "k-ops"
# two tenants, and /metrics behind an @ops key: the top streams are named there only
KEYED = {"api_keys": [*(f"{t}:{k}" for t, k in KEYS.items()), f"@ops:{OPS}"],
         "ops_key_routes": ["/metrics"]}  # fmt: skip
REFERENCE = Path(__file__).parents[2] / "docs" / "reference"


class Feeder:
    """Constant windows (100 readings, hop 100): the test artifact's risk rises with
    the value's magnitude (sigmoid(w * |value|), w > 0), so each stream's next latest
    risk is chosen by the value sent."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.sent: dict[tuple[str, str], int] = {}

    def send(self, tenant: str, stream: str, value: float, windows: int = 1) -> float:
        """``windows`` windows of ``value``, scored before the answer: the last one's
        risk."""
        start = self.sent.get((tenant, stream), 0)
        self.sent[(tenant, stream)] = start + 100 * windows
        readings = [
            {"ts": T0 + start + i, "values": [value] * 4} for i in range(100 * windows)
        ]
        r = self.client.post(
            "/ingest",
            json={"stream": stream, "readings": readings},
            params={"wait": 20},
            headers={"X-API-Key": KEYS[tenant]},
        )
        assert r.status_code == 200, r.text
        (res,) = r.json()["results"]
        assert res["windows_scored"] == windows, res
        return float(res["risk"])


async def windows_of(store: Store, tenant: str, stream: str, rows: int) -> None:
    """Register ``stream`` and send it ``rows`` readings of ones: its windows of 10
    (hop 10) queued for the test to read and write the records of."""
    await store.register(tenant, [stream], 10)
    await store.append(tenant, stream, T0 + np.arange(float(rows)),
                       np.ones((rows, 2), np.float32), window=10, hop=10,
                       max_queued=100)  # fmt: skip


def top_series(
    client: TestClient, name: str = "scjepa_top_stream_risk"
) -> dict[tuple[str, str], float]:
    """``name`` (a top-streams gauge) as one scrape of GET /metrics exports it."""
    text = client.get("/metrics", headers={"X-API-Key": OPS}).text
    return {
        (s.labels["tenant"], s.labels["stream"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for s in family.samples
    }


def top(risks: dict[tuple[str, str], float], n: int) -> dict[tuple[str, str], float]:
    return dict(sorted(risks.items(), key=lambda kv: -kv[1])[:n])


def test_top_streams_follow_the_latest_risks(make_client: ClientFactory) -> None:
    client = make_client(top_streams=2, **KEYED)
    feed, risks = Feeder(client), {}
    # the same stream name in two tenants: two streams, told apart by the label
    for key, value in ((("acme", "pump"), 0.5), (("beta", "pump"), 1.0),
                       (("acme", "fan"), 1.5)):  # fmt: skip
        risks[key] = feed.send(*key, value)
    assert len(set(risks.values())) == 3
    assert top_series(client) == pytest.approx(top(risks, 2))
    assert set(top_series(client)) == {("acme", "fan"), ("beta", "pump")}

    risks[("acme", "pump")] = feed.send("acme", "pump", 3.0)  # rises to the top
    assert set(top_series(client)) == {("acme", "pump"), ("acme", "fan")}
    assert top_series(client) == pytest.approx(top(risks, 2))  # beta/pump left

    risks[("acme", "fan")] = feed.send("acme", "fan", 0.0)  # falls out
    assert set(top_series(client)) == {("acme", "pump"), ("beta", "pump")}
    assert top_series(client) == pytest.approx(top(risks, 2))

    # a deleted stream leaves it too
    r = client.delete("/streams/pump", headers={"X-API-Key": KEYS["acme"]})
    assert r.status_code == 204
    assert set(top_series(client)) == {("beta", "pump"), ("acme", "fan")}


NOVELTY = "scjepa_top_stream_novelty"


def test_top_streams_by_recent_novelty(
    make_client: ClientFactory, monitored: Path
) -> None:
    """A model with the input-drift monitor: each stream's recent novelty (GET /risk's
    recent_novelty) is the exponentially weighted mean of its windows' novelty, in
    the order scored, from 0.5; scjepa_top_stream_novelty lists the 2 streams where
    it is highest, following it as windows come, and a deleted stream leaves it."""
    client = make_client(artifact=monitored, top_streams=2, **KEYED)
    feed, want = Feeder(client), {}
    weight = 2 / (NOVELTY_SPAN + 1)

    def send(tenant: str, stream: str, value: float, windows: int) -> None:
        feed.send(tenant, stream, value, windows)
        key, head = {"X-API-Key": KEYS[tenant]}, f"/risk/{stream}"
        items = client.get(f"{head}/history?limit={windows}", headers=key).json()
        recent = want.get((tenant, stream), 0.5)
        for item in reversed(items["items"]):  # oldest first
            recent += weight * (item["novelty"] - recent)
        want[(tenant, stream)] = recent
        got = client.get(head, headers=key).json()
        assert got["recent_novelty"] == pytest.approx(recent, abs=1e-12)
        assert got["novelty"] == items["items"][0]["novelty"]  # the latest window's

    # novelty = mean |value| / 10 (support/service_artifact.py)
    send("acme", "pump", 9.95, 3)  # 0.995 three times
    send("beta", "pump", 9.95, 1)
    send("acme", "fan", 1.0, 2)  # 0.1: under 0.5
    assert want[("acme", "pump")] > want[("beta", "pump")] > 0.5 > want[("acme", "fan")]
    assert top_series(client, NOVELTY) == pytest.approx(top(want, 2))
    send("beta", "pump", 20.0, 3)  # 1.0: above acme/pump
    assert list(top_series(client, NOVELTY)) == [("beta", "pump"), ("acme", "pump")]
    assert top_series(client, NOVELTY) == pytest.approx(top(want, 2))
    send("acme", "pump", 0.0, 5)  # falls under acme/fan: leaves
    assert set(top_series(client, NOVELTY)) == {("beta", "pump"), ("acme", "fan")}
    assert top_series(client, NOVELTY) == pytest.approx(top(want, 2))

    r = client.delete("/streams/pump", headers={"X-API-Key": KEYS["beta"]})
    assert r.status_code == 204
    del want[("beta", "pump")]
    assert top_series(client, NOVELTY) == pytest.approx(top(want, 2))
    # the name sent again is a new stream: its recent novelty starts over from 0.5
    send("beta", "pump", 5.0, 1)
    assert want[("beta", "pump")] == pytest.approx(0.5)


@pytest.mark.parametrize("store_kind", ["memory"])
def test_without_a_monitor_no_stream_has_a_recent_novelty(
    make_client: ClientFactory,
) -> None:
    client = make_client(**KEYED)  # the test artifact: no monitor
    Feeder(client).send("acme", "pump", 9.95, 2)
    got = client.get("/risk/pump", headers={"X-API-Key": KEYS["acme"]}).json()
    assert got["novelty"] is None and got["recent_novelty"] is None
    assert set(top_series(client)) == {("acme", "pump")}
    assert top_series(client, NOVELTY) == {}


@pytest.mark.parametrize("store_kind", ["memory"])
def test_an_open_metrics_names_no_stream_of_any_tenant(
    make_client: ClientFactory, monitored: Path
) -> None:
    """With tenants' keys set, an open /metrics would tell anyone the stream names of
    every tenant (acme's GET /risk of beta's stream is a 404): it names none; behind
    an @ops key (SCJEPA_OPS_KEY_ROUTES) the ops key reads them, no tenant key does.
    api.md's tenants section says so."""
    tenants = [f"{t}:{k}" for t, k in KEYS.items()]
    acme = {"X-API-Key": KEYS["acme"]}
    for settings, named in (({"api_keys": tenants}, False), (KEYED, True)):
        client = make_client(artifact=monitored, **settings)
        Feeder(client).send("beta", "pump", 1.0)
        assert client.get("/risk/pump", headers=acme).status_code == 404
        for name in ("scjepa_top_stream_risk", NOVELTY):
            assert set(top_series(client, name)) == (
                {("beta", "pump")} if named else set()
            )
    assert client.get("/metrics", headers=acme).status_code == 401
    text = " ".join((REFERENCE / "api.md").read_text().split())
    assert "names no stream while tenants' keys are set and `/metrics` is open" in text


def test_no_top_streams_when_disabled(make_client: ClientFactory) -> None:
    """N = 0: no series (the store-wide gauges as before)."""
    client = make_client(top_streams=0, **KEYED)
    risk = Feeder(client).send("acme", "pump", 1.0)
    text = client.get("/metrics", headers={"X-API-Key": OPS}).text
    assert top_series(client) == {}
    assert "pump" not in text
    (max_risk,) = [
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "scjepa_max_risk"
        for s in f.samples
    ]
    assert max_risk == pytest.approx(risk)


async def score_four(store: Store) -> None:
    """Four streams of two tenants, one window each scored: a/s1 0.25, a/s2 0.75,
    b/s1 0.75, b/s0 0.5."""
    await store.ensure_groups()
    risks = {("a", "s1"): 0.25, ("a", "s2"): 0.75, ("b", "s1"): 0.75,
             ("b", "s0"): 0.5}  # fmt: skip
    for tenant, stream in risks:
        await windows_of(store, tenant, stream, 10)
    items = await store.read_work("c", 10, 0)
    assert len(items) == 4
    written = await store.put_scored([
        (it.tenant, it.stream, it.epoch, [Record(10, "{}", risks[it.tenant, it.stream], None)])
        for it in items
    ])  # fmt: skip
    assert written == [[True]] * 4


def test_store_summary_top_order_is_the_same_on_every_store(
    store_url: str | None,
) -> None:
    """Highest first; equal risks by the later tenant/stream first (Redis' ZREVRANGE
    order, which the memory store keeps), so each store exports the same top N."""

    async def main() -> None:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        try:
            await score_four(store)
            s = await store.summary(0.5, 3)
            assert s.top == (("b", "s1", 0.75), ("a", "s2", 0.75), ("b", "s0", 0.5))
            assert (s.streams, s.in_alert, s.max_risk) == (4, 3, 0.75)
            none = await store.summary(0.5)
            assert none.top == () and none.max_risk == 0.75
        finally:
            await store.close()

    asyncio.run(main())


def test_streams_in_alert_at_each_tenants_own_threshold(
    store_url: str | None,
) -> None:
    """A tenant served at an operating point of its own (SCJEPA_TENANT_FA_BUDGET) has
    its streams counted in alert at its threshold, below the others' or above it; the
    tenants' highest risks are read as before."""

    async def main() -> list[object]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        try:
            await score_four(store)
            out: list[object] = []
            for own in ({}, {"a": 0.2, "b": 0.8}, {"b": 0.5}, {"a": 0.9}):
                s = await store.summary(0.5, 0, ["a", "b", "c"], own)
                out += [s.in_alert_by_tenant, s.in_alert, s.max_risk_by_tenant]
            return out
        finally:
            await store.close()

    highest = (("a", 0.75), ("b", 0.75), ("c", 0.0))
    assert asyncio.run(main()) == [
        (("a", 1), ("b", 2)), 3, highest,  # every tenant at 0.5
        (("a", 2),), 2, highest,  # a at 0.2 (s1 0.25 too), b at 0.8 (neither)
        (("a", 1), ("b", 2)), 3, highest,  # b's own threshold the same as the model's
        (("b", 2),), 2, highest,  # a at 0.9: none of its streams
    ]  # fmt: skip


@pytest.mark.parametrize("bad", ["-1", "1001", "many"])
def test_top_streams_setting_is_validated(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCJEPA_TOP_STREAMS", bad)
    with pytest.raises(ValidationError, match="top_streams"):
        Settings()


def test_recent_novelty_follows_the_records_written(store_url: str | None) -> None:
    """Each record written folds its novelty into the stream's recent novelty, once
    (a window written again changes nothing: the first write wins), the Redis script
    to the same float as recent_novelty(); a record of a model without the monitor
    removes it (a reload to such a model: no figure of another model's left), from
    the stream's state and the top streams alike."""

    async def main() -> list[object]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        out: list[object] = []

        async def write(stream: str, n: int, novelty: float | None) -> None:
            item = items[stream]
            rec = [(item.tenant, stream, item.epoch, [Record(n, f"{n}", 0.5, novelty)])]
            out.append(await store.put_scored(rec))
            state = await store.state("t", stream)
            assert state is not None
            out.append(state.novelty)
            out.append((await store.summary(0.5, 5)).top_novelty)

        try:
            await store.ensure_groups()
            for stream in ("a", "b"):
                await windows_of(store, "t", stream, 30)
            items = {it.stream: it for it in await store.read_work("c", 10, 0)}
            await write("a", 10, 0.9)
            await write("a", 10, 0.1)  # written again: nothing changes
            await write("b", 10, None)  # no monitor: none
            await write("a", 20, 0.3)
            await write("b", 20, 0.7)
            await write("a", 30, None)  # a model without the monitor: removed
            return out
        finally:
            await store.close()

    a1 = recent_novelty(None, 0.9)
    a2 = recent_novelty(a1, 0.3)
    b2 = recent_novelty(None, 0.7)
    assert a1 == 0.5 + 2 / (NOVELTY_SPAN + 1) * 0.4
    assert asyncio.run(main()) == [
        [[True]], a1, (("t", "a", a1),),
        [[False]], a1, (("t", "a", a1),),
        [[True]], None, (("t", "a", a1),),
        [[True]], a2, (("t", "a", a2),),
        [[True]], b2, (("t", "b", b2), ("t", "a", a2)),
        [[True]], None, (("t", "b", b2),),
    ]  # fmt: skip


@pytest.mark.parametrize("store_kind", ["redis", "cluster"])
def test_notes_of_two_writes_arriving_out_of_order_keep_the_later(
    store_url: str | None,
) -> None:
    """Two scorers write one stream's windows, and the first's note to the gauges'
    indexes reaches Redis after the second's whole write: the indexes keep the second
    write's latest risk and recent novelty (they kept the first's, stale until the
    stream's next write: CI saw a stream stay in scjepa_top_stream_novelty so)."""

    async def main() -> tuple[object, ...]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        real, calls = store._call, []  # type: ignore[attr-defined]
        reached, second_done = asyncio.Event(), asyncio.Event()

        async def call(op: str, coro: object, **kw: object) -> object:
            if op == "put_risks":
                calls.append(op)
                if len(calls) == 2:  # the first write's note: held
                    reached.set()
                    await second_done.wait()
            return await real(op, coro, **kw)

        try:
            await store.ensure_groups()
            await windows_of(store, "t", "a", 20)
            (item, _) = await store.read_work("c", 10, 0)
            store._call = call  # type: ignore[attr-defined]
            first = asyncio.create_task(
                store.put_scored([("t", "a", item.epoch, [Record(10, "10", 0.9, 0.9)])])
            )
            await reached.wait()
            await store.put_scored(
                [("t", "a", item.epoch, [Record(20, "20", 0.2, 0.1)])]
            )
            second_done.set()
            await first
            assert len(calls) == 4  # two round trips each: the hold was reached
            s = await store.summary(0.5, 5)
            state = await store.state("t", "a")
            assert state is not None
            return s.top, s.top_novelty, state.novelty
        finally:
            await store.close()

    recent = recent_novelty(recent_novelty(None, 0.9), 0.1)
    assert asyncio.run(main()) == (
        (("t", "a", 0.2),), (("t", "a", recent),), recent
    )  # fmt: skip


@pytest.mark.parametrize("store_kind", ["redis", "cluster"])
def test_a_scrape_sweeps_the_times_of_streams_gone(store_url: str | None) -> None:
    """A release before the time hashes expires idle streams without them (during a
    roll-out): the entries it leaves are swept by the scrapes, a few at random each;
    a registered stream's stay."""

    async def main() -> tuple[set[bytes], set[bytes]]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        try:
            await store.ensure_groups()
            await windows_of(store, "t", "a", 10)
            (item,) = await store.read_work("c", 10, 0)
            await store.put_scored(
                [("t", "a", item.epoch, [Record(10, "{}", 0.5, 0.9)])]
            )
            hashes = [store._global(k) for k in ("latest_at", "novelty_at")]  # type: ignore[attr-defined]
            for h in hashes:  # as an older release's expiry leaves them
                await store.client.hset(h, mapping={"t/gone": 1, "u/gone": 2})  # type: ignore[attr-defined]
            before = set(await store.client.hkeys(hashes[0]))  # type: ignore[attr-defined]
            await store.summary(0.5, 5)
            after = set(await store.client.hkeys(hashes[0]))  # type: ignore[attr-defined]
            assert after == set(await store.client.hkeys(hashes[1]))  # type: ignore[attr-defined]
            return before, after
        finally:
            await store.close()

    before, after = asyncio.run(main())
    assert before == {b"t/a", b"t/gone", b"u/gone"} and after == {b"t/a"}


@pytest.mark.parametrize("store_kind", ["redis", "cluster"])
def test_each_tenants_highest_risk_and_its_index(store_url: str | None) -> None:
    """Each tenant's highest latest risk comes from its own index of latest risks
    ({global}:latest:TENANT), written with the store-wide one: an entry another
    release left there (a stream gone, or a risk it noted in the store-wide index
    only) is set right by the scrape that meets it at the top, or swept (a few at
    random each scrape), and an idle stream leaves the tenant's index with the
    store-wide ones."""

    async def main() -> list[object]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        assert isinstance(store, RedisStore)
        own = store._tenant_latest("t")
        out: list[object] = []

        async def scrape() -> None:
            s = await store.summary(0.5, 0, ["t", "u", "v"])
            out.append(s.max_risk_by_tenant)
            out.append(await store.client.zrange(own, 0, -1, withscores=True))

        try:
            await store.ensure_groups()
            risks = {("t", "a"): 0.9, ("t", "b"): 0.4, ("u", "c"): 0.7}
            for tenant, stream in risks:
                await windows_of(store, tenant, stream, 10)
            items = await store.read_work("c", 10, 0)
            await store.put_scored([
                (it.tenant, it.stream, it.epoch, [Record(10, "{}", risks[it.tenant, it.stream], None)])
                for it in items
            ])  # fmt: skip
            await scrape()
            # as an older release leaves them: a stream gone, a newer risk noted in
            # the store-wide index only
            await store.client.zadd(own, {"t/gone": 0.99, "t/low": 0.01})
            await store.client.zadd(store._global("latest"), {"t/a": 0.3})
            await scrape()
            # t/a idle past the TTL (not the tenant's highest): the scrape's expiry
            # forgets it
            await store.client.zadd(store._global("streams"), {"t/a": 1.0})
            await scrape()
            return out
        finally:
            await store.close()

    assert asyncio.run(main()) == [
        (("t", 0.9), ("u", 0.7), ("v", 0.0)), [(b"t/b", 0.4), (b"t/a", 0.9)],
        (("t", 0.4), ("u", 0.7), ("v", 0.0)), [(b"t/a", 0.3), (b"t/b", 0.4)],
        (("t", 0.4), ("u", 0.7), ("v", 0.0)), [(b"t/b", 0.4)],
    ]  # fmt: skip


def test_a_tenants_streams_at_highest_risk(
    make_client: ClientFactory, sharp: Path
) -> None:
    """GET /streams/top: the tenant's own live streams of highest latest risk, highest
    first, each with whether it is in alert, following the risks as windows come;
    another tenant's streams, a stream not scored yet and a deleted one are not
    listed; the limit is checked (422 naming it), the key required (401)."""
    client = make_client(artifact=sharp, **KEYED)  # threshold 0.9; zeros ~0.5
    feed, acme = Feeder(client), {"X-API-Key": KEYS["acme"]}

    def top_of(limit: int = 20) -> list[tuple[str, float, bool]]:
        r = client.get("/streams/top", params={"limit": limit}, headers=acme)
        assert r.status_code == 200, r.text
        body = r.json()
        threshold = body["threshold"]
        (loaded,) = client.get("/models", headers=acme).json()["models"]
        assert threshold == loaded["manifest"]["threshold"]
        out = [(s["stream"], s["risk"], s["alert"]) for s in body["streams"]]
        assert all(alert == (risk >= threshold) for _, risk, alert in out)
        return out

    risks = {
        s: feed.send("acme", s, v) for s, v in (("a", 0.0), ("b", 1.0), ("c", 0.5))
    }
    feed.send("beta", "z", 50.0)  # another tenant's, higher than any of acme's
    r = client.post("/ingest", json={"stream": "new", "readings": [
        {"ts": T0, "values": [1.0] * 4}]}, headers=acme)  # fmt: skip
    assert r.status_code == 200  # live, not scored yet
    assert [s for s, _, _ in top_of()] == ["b", "c", "a"]
    assert [r for _, r, _ in top_of()] == pytest.approx([risks[s] for s in "bca"])
    assert [s for s, _, _ in top_of(2)] == ["b", "c"]
    assert not any(alert for _, _, alert in top_of())
    risks["a"] = feed.send("acme", "a", 50.0)  # rises to the top, in alert
    assert top_of(2) == [("a", pytest.approx(risks["a"]), True),
                         ("b", pytest.approx(risks["b"]), False)]  # fmt: skip
    assert client.delete("/streams/a", headers=acme).status_code == 204
    assert [s for s, _, _ in top_of()] == ["b", "c"]
    for bad in (0, 1001, "x"):
        r = client.get("/streams/top", params={"limit": bad}, headers=acme)
        assert r.status_code == 422 and "limit" in r.text, bad
    assert client.get("/streams/top").status_code == 401


@pytest.mark.parametrize("store_kind", ["redis", "cluster"])
def test_top_streams_forget_the_entries_of_streams_gone(store_url: str | None) -> None:
    """The tenant's index may hold entries of streams gone that no scrape has swept
    (idle past the TTL, deleted by another release): GET /streams/top's read skips
    them and drops them, so the next read does not meet them again."""

    async def main() -> tuple[object, ...]:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        assert isinstance(store, RedisStore)
        own = store._tenant_latest("t")
        try:
            await store.ensure_groups()
            risks = {"a": 0.2, "b": 0.4, "c": 0.6}
            for stream in risks:
                await windows_of(store, "t", stream, 10)
            items = await store.read_work("c", 10, 0)
            await store.put_scored([
                (it.tenant, it.stream, it.epoch, [Record(10, "{}", risks[it.stream], None)])
                for it in items
            ])  # fmt: skip
            await store.client.zadd(own, {f"t/gone{i}": 0.9 for i in range(5)})
            await store.client.zadd(store._global("streams"), {"t/c": 1.0})  # idle
            first = await store.top_streams("t", 2)
            left = await store.client.zrange(own, 0, -1)
            return first, await store.top_streams("t", 5), left
        finally:
            await store.close()

    first, every, left = asyncio.run(main())
    assert first == [("b", 0.4), ("a", 0.2)] and every == first
    assert left == [b"t/a", b"t/b"]
