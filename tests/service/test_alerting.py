"""Per-stream risk alerts (service/alerting.py): the persistence rule, the Redis state
shared by several scorers (its Lua step checked against the Python one), and a live run
against a real Alertmanager (``prometheus-alertmanager``, Debian) on a loopback port
that routes to a webhook served by this test: one stream entering alert gives exactly
one alert carrying its name, resolved when its risk falls."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.components import require
from support.service_helpers import Hook, free_port

from service import alerting, metrics
from service.alerting import (
    FIRE,
    NONE,
    REFRESH,
    RESOLVE,
    RESTART,
    Policy,
    State,
    step,
)
from service.schemas import ChannelShare, ModelRef
from service.store.redis_store import connect
from service.worker import ScoredWindow

POLICY = Policy("http://127.0.0.1:9", windows=3, resend_s=60, hold_s=600)


def window(n: int, risk: float, stream: str = "pump-1", epoch: int = 0) -> ScoredWindow:
    return ScoredWindow(
        tenant="plant-a",
        stream=stream,
        window_n=n,
        window_end=1_700_000_000.0 + n,
        risk=risk,
        threshold=0.8,
        alert=risk >= 0.8,
        top_channels=(
            ChannelShare(name="bearing", share=0.6),
            ChannelShare(name="temp", share=0.3),
        ),
        model=ModelRef(name="pumps", version="2026-11-01"),
        epoch=epoch,
    )


def walk(alerts: list[bool], times: list[float]) -> list[int]:
    state: State | None = None
    out = []
    for n, (a, t) in enumerate(zip(alerts, times, strict=True), start=1):
        state, action = step(state, n * 100, a, t, POLICY)
        out.append(action)
    return out


# --- the persistence rule (pure steps)


@pytest.mark.parametrize(
    ("alerts", "times", "want"),
    [
        # 3 windows in a row: fire on the third, and only once
        ([1, 1, 1, 1], [0, 1, 2, 3], [NONE, NONE, FIRE, NONE]),
        # a window below breaks the run: no alert
        ([1, 1, 0, 1, 1], [0, 1, 2, 3, 4], [NONE] * 5),
        # firing, then below: resolved; then a fresh run is needed again
        ([1, 1, 1, 0, 1, 1, 1], list(range(7)), [0, 0, FIRE, RESOLVE, 0, 0, FIRE]),
        # firing on: posted again once resend_s (60 s) has passed since the last post
        ([1, 1, 1, 1, 1, 1], [0, 1, 2, 30, 62, 70], [0, 0, FIRE, 0, REFRESH, 0]),
    ],
    ids=["fires-once", "run-broken", "resolves", "refreshes"],
)
def test_step_persistence_rule(
    alerts: list[int], times: list[float], want: list[int]
) -> None:
    assert walk([bool(a) for a in alerts], times) == want


@pytest.mark.parametrize(
    ("alerts", "times", "want"),
    [
        # fire on the first window; two below hold it, the third resolves it
        ([1, 0, 0, 0, 1], [0, 1, 2, 3, 4], [FIRE, 0, 0, RESOLVE, FIRE]),
        # a window at/above the threshold starts the count of windows below again
        ([1, 0, 0, 1, 0, 0, 0], list(range(7)), [FIRE, 0, 0, 0, 0, 0, RESOLVE]),
        # held firing while below: posted again once resend_s has passed
        ([1, 0, 0, 0], [0, 30, 61, 62], [FIRE, 0, REFRESH, RESOLVE]),
    ],
    ids=["held-then-resolved", "count-restarts", "refreshed-while-held"],
)
def test_clear_windows_hold_a_firing_alert(
    alerts: list[int], times: list[float], want: list[int]
) -> None:
    policy = Policy("http://127.0.0.1:9", windows=1, clear=3, resend_s=60, hold_s=600)
    state: State | None = None
    got = []
    for n, (a, t) in enumerate(zip(alerts, times, strict=True), start=1):
        state, action = step(state, n, bool(a), t, policy)
        got.append(action)
    assert got == want


def test_a_late_window_changes_nothing() -> None:
    state, _ = step(None, 300, True, 0.0, POLICY)
    assert state is not None
    again, action = step(state, 200, False, 1.0, POLICY)  # older: another scorer's
    assert (again, action) == (state, NONE)
    assert step(None, 100, False, 0.0, POLICY) == (None, NONE)  # nothing kept


def test_a_late_window_of_an_ended_run_reopens_nothing() -> None:
    """A run fires and resolves; its windows scored again late (claimed after a
    scorer died) find the last window number kept: no second run, no second alert."""
    state: State | None = None
    actions = []
    for n, alert in [(100, True), (200, True), (300, True), (400, False),
                     (100, True), (200, True), (300, True)]:  # fmt: skip
        state, action = step(state, n, alert, 0.0, POLICY)
        actions.append(action)
    assert actions == [NONE, NONE, FIRE, RESOLVE, NONE, NONE, NONE]
    assert state == State(400, 0, False, 0.0)


def steps(
    seq: list[tuple[int, int, bool]], policy: Policy = POLICY
) -> tuple[State | None, list[int]]:
    """(epoch, n, alert) windows through step, at time 0: the last state, actions."""
    state: State | None = None
    actions = []
    for epoch, n, alert in seq:
        state, action = step(state, n, alert, 0.0, policy, epoch)
        actions.append(action)
    return state, actions


def test_a_stream_that_starts_over_is_stepped_afresh() -> None:
    """Firing at window 600 of epoch 1, the stream starts over (epoch 2, windows from
    100 again: a layout change, or idle past the TTL): the first window of epoch 2
    resolves the old alert (RESTART), then the new readings need their own 3 windows
    in alert; a window of epoch 1 scored late changes nothing."""
    seq = [(1, 400, True), (1, 500, True), (1, 600, True),  # fires at 600
           (2, 100, True), (1, 700, True), (2, 200, True), (2, 300, True),
           (2, 400, False)]  # fmt: skip
    state, actions = steps(seq)
    assert actions == [NONE, NONE, FIRE, RESTART, NONE, NONE, FIRE, RESOLVE]
    assert state == State(400, 0, False, 0.0, 0, epoch=2)


def test_an_ended_run_does_not_mute_the_next_epoch() -> None:
    """Its run ended at 600 (resolved, state kept): after a restart, windows 100-300
    of the new epoch open a new alert (they were "older than 600" before epochs)."""
    seq = [(1, 400, True), (1, 500, True), (1, 600, True), (1, 700, False),
           (2, 100, True), (2, 200, True), (2, 300, True)]  # fmt: skip
    assert steps(seq)[1] == [NONE, NONE, FIRE, RESOLVE, NONE, NONE, FIRE]


def test_a_restart_resolves_then_fires_with_one_window() -> None:
    """SCJEPA_ALERT_WINDOWS=1: the first window of a new epoch resolves the old alert
    and, at/above the threshold, fires the new one (RESTART | FIRE); below, the state
    of the new epoch is kept, so a late window of the old epoch opens nothing."""
    one = dataclasses.replace(POLICY, windows=1)
    assert steps([(1, 100, True), (2, 100, True)], one)[1] == [FIRE, RESTART | FIRE]
    state, actions = steps([(1, 100, True), (2, 100, False), (1, 900, True)], one)
    assert actions == [FIRE, RESTART, NONE]
    assert state == State(100, 0, False, 0.0, 0, epoch=2)


def test_memory_states_forget_streams_idle_past_the_ttl() -> None:
    """MemoryStates holds only streams stepped within the TTL (it grew without bound):
    a stream dropped, and back, is stepped afresh."""
    policy = dataclasses.replace(POLICY, windows=1, ttl_s=100)
    states = alerting.MemoryStates(policy)

    async def run() -> list[list[int]]:
        out = [await states([window(100, 0.9, f"s{i}") for i in range(50)], 0.0)]
        out.append(await states([window(200, 0.9, "s0")], 30.0))  # s0 stays alive
        out.append(await states([window(200, 0.9, "s1")], 120.0))  # s1 dropped: fresh
        return out

    first, kept, again = asyncio.run(run())
    assert first == [FIRE] * 50 and kept == [NONE] and again == [FIRE]
    assert set(states.states) == {("plant-a", "s0"), ("plant-a", "s1")}
    assert set(states.stepped) == set(states.states)


def test_a_restart_posts_the_resolve_before_the_new_alert() -> None:
    """What the alerter posts for RESTART | FIRE: the old alert resolved (endsAt now,
    saying the stream started over), then the new one firing, in one batch, in order;
    both counted, under the stream's tenant."""
    hook = Hook()
    resolves = metrics.STREAM_ALERTS.labels(event="resolve", tenant="plant-a")
    fires = metrics.STREAM_ALERTS.labels(event="fire", tenant="plant-a")

    async def run() -> None:
        alerter = alerting.build(hook.url, redis_url=None, windows=1, hold_s=600)
        assert alerter is not None
        try:
            await alerter([window(300, 0.9, epoch=1)])
            await alerter.drain()
            await alerter([window(100, 0.95, epoch=2)])
            await alerter.drain()
        finally:
            await alerter.close()

    before, fired = resolves._value.get(), fires._value.get()
    try:
        asyncio.run(run())
    finally:
        hook.close()
    posted = [a for batch in hook.received for a in batch]
    notes = [a["annotations"] for a in posted]
    assert [n["window_n"] for n in notes] == ["300", "100", "100"]
    assert "started over" in notes[1]["summary"]
    assert "at or above" in notes[2]["summary"]
    assert posted[1]["endsAt"] < posted[2]["endsAt"]  # resolved now; firing ahead
    assert resolves._value.get() == before + 1
    assert fires._value.get() == fired + 2


def test_policy_refuses_a_hold_shorter_than_the_resend() -> None:
    with pytest.raises(ValueError, match="hold_s > resend_s"):
        Policy("http://x", resend_s=60, hold_s=30)
    with pytest.raises(ValueError, match="clear"):
        Policy("http://x", clear=0)


# --- the Redis state: the Lua step is the Python step, shared by scorers


# one redis-server, and the local 3-master Cluster (where the script calls of a batch
# run per stream, concurrently: a Cluster pipeline takes no scripts)
@pytest.fixture(params=["single", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    fixture = "redis_server" if request.param == "single" else "redis_cluster"
    return str(request.getfixturevalue(fixture).url)


@pytest.mark.parametrize("clear", [1, 2])
def test_redis_step_matches_the_python_step(redis_url: str, clear: int) -> None:
    """Random windows of 20 streams through both, in batches of 25 as the scorer calls
    (a batch holds several windows of one stream): the same action for every one, with
    an alert resolved by the first window below and by the second."""
    policy = dataclasses.replace(POLICY, clear=clear)
    rnd = random.Random(7)
    windows = []
    for n in range(1, 400):
        stream = f"s{rnd.randrange(20)}"
        windows.append(window(n, rnd.choice([0.1, 0.9, 0.95]), stream))

    async def run() -> tuple[list[int], list[int]]:
        client = connect(redis_url, timeout_s=5.0)
        prefix = f"t{clear}-{rnd.randrange(10**9)}"  # not the other case's keys
        states = alerting.RedisStates(client, prefix, policy)
        memory = alerting.MemoryStates(policy)
        got, want, t = [], [], 0.0
        try:
            for i in range(0, len(windows), 25):
                t += rnd.choice([1.0, 20.0, 70.0])
                got += await states(windows[i : i + 25], t)
                want += await memory(windows[i : i + 25], t)
            # every node's keys (a Cluster client's KEYS asks one node)
            left = [k async for k in client.scan_iter(f"{states.prefix}:*")]
        finally:
            await client.aclose()
        assert len(left) == len(memory.states)  # no state for quiet streams
        return got, want

    got, want = asyncio.run(run())
    assert got == want
    assert {FIRE, REFRESH, RESOLVE} <= set(got)


def test_redis_step_matches_the_python_step_across_restarts(redis_url: str) -> None:
    """Streams that start over now and then (a later epoch, windows from 100 again)
    while late windows of earlier epochs and numbers keep coming: the Lua step and the
    Python step agree on every action, restarts of firing streams included; quiet
    streams keep no state."""
    rnd = random.Random(11)
    policy = dataclasses.replace(POLICY, windows=1, clear=2)
    at: dict[str, tuple[int, int]] = {}  # stream -> (epoch, n) of its newest window
    windows = []
    for _ in range(500):
        stream = f"s{rnd.randrange(12)}"
        epoch, n = at.get(stream, (1, 0))
        if n and rnd.random() < 0.08:  # starts over
            epoch, n = epoch + 1, 0
        if n and rnd.random() < 0.1:  # a late one: an earlier number or epoch
            late = (epoch - 1, n + 500) if epoch > 1 else (epoch, max(100, n - 200))
            windows.append(window(late[1], rnd.choice([0.1, 0.9]), stream, late[0]))
            continue
        at[stream] = (epoch, n + 100)
        windows.append(window(n + 100, rnd.choice([0.1, 0.9, 0.95]), stream, epoch))

    async def run() -> tuple[list[int], list[int]]:
        client = connect(redis_url, timeout_s=5.0)
        states = alerting.RedisStates(client, f"r{rnd.randrange(10**9)}", policy)
        memory = alerting.MemoryStates(policy)
        got, want = [], []
        try:
            for i in range(0, len(windows), 20):
                got += await states(windows[i : i + 20], float(i))
                want += await memory(windows[i : i + 20], float(i))
            left = [k async for k in client.scan_iter(f"{states.prefix}:*")]
        finally:
            await client.aclose()
        assert len(left) == len(memory.states)
        return got, want

    got, want = asyncio.run(run())
    assert got == want
    assert {FIRE, RESOLVE, RESTART, RESTART | FIRE} <= set(got), sorted(set(got))


def test_two_scorers_open_one_alert(redis_url: str) -> None:
    """Two processes' clients stepping one stream's windows, some twice (a claimed
    window scored again) and out of order: one FIRE, one RESOLVE in all."""

    async def run() -> list[int]:
        a, b = connect(redis_url, timeout_s=5.0), connect(redis_url, timeout_s=5.0)
        prefix = f"t{time.monotonic_ns()}"
        sa = alerting.RedisStates(a, prefix, POLICY)
        sb = alerting.RedisStates(b, prefix, POLICY)
        seq = [(sa, 1), (sb, 2), (sa, 2), (sb, 3), (sa, 3), (sb, 4), (sa, 1), (sb, 5)]
        try:
            got = []
            for states, k in seq:
                got += await states([window(k * 100, 0.9 if k < 5 else 0.2)], 10.0)
            return got
        finally:
            await a.aclose()
            await b.aclose()

    got = asyncio.run(run())
    assert got.count(FIRE) == 1 and got.count(RESOLVE) == 1, got
    assert got.index(FIRE) < got.index(RESOLVE)


def test_three_scorers_open_one_alert_per_stream(redis_url: str) -> None:
    """Three scorers stepping the same batches of 40 streams at once (each window
    delivered to all three, as claimed windows are scored again), each batch holding
    two windows of every stream: per stream, two runs of exactly ``windows`` (3) in
    alert, each broken by a window below. Every stream's alert opens and resolves
    exactly twice in all: a window stepped out of its stream's order would break a
    run (it would be "late") and open nothing."""
    risks = [0.9, 0.9, 0.9, 0.2, 0.9, 0.9, 0.9, 0.2]  # windows 100..800
    streams = [f"s{i}" for i in range(40)]  # more than a scorer's concurrency

    async def run() -> list[tuple[str, int]]:
        clients = [connect(redis_url, timeout_s=5.0) for _ in range(3)]
        prefix = f"t{time.monotonic_ns()}"
        scorers = [alerting.RedisStates(c, prefix, POLICY) for c in clients]

        async def score(
            states: alerting.RedisStates, seed: int
        ) -> list[tuple[str, int]]:
            rnd, out = random.Random(seed), []
            for k in range(0, len(risks), 2):
                order = streams[:]
                rnd.shuffle(order)  # streams in any order, each stream's in order
                batch = [window((k + j + 1) * 100, risks[k + j], s)
                         for s in order for j in (0, 1)]  # fmt: skip
                actions = await states(batch, 10.0)
                out += [(w.stream, a) for w, a in zip(batch, actions, strict=True)]
            return out

        try:
            got = await asyncio.gather(*(score(s, i) for i, s in enumerate(scorers)))
        finally:
            for c in clients:
                await c.aclose()
        return [x for part in got for x in part]

    got = asyncio.run(run())
    for s in streams:
        actions = [a for stream, a in got if stream == s]
        assert actions.count(FIRE) == 2 and actions.count(RESOLVE) == 2, (s, actions)
    assert len(got) == 3 * len(streams) * len(risks)


# --- live: a real Alertmanager, routing to this test's webhook


@pytest.fixture
def alertmanager(tmp_path: Path, hook: Hook) -> Iterator[str]:
    """prometheus-alertmanager on a free loopback port, clustering off, routing every
    alert (grouped by tenant and stream, as deploy/alertmanager does) to ``hook``."""
    binary = require("alertmanager", "the live alerting test")
    deployed = yaml.safe_load(
        (Path(__file__).parents[2] / "deploy/alertmanager/alertmanager.yml").read_text()
    )
    config = {
        "route": {
            **deployed["route"],
            "receiver": "hook",
            "group_wait": "100ms",
            "group_interval": "1s",
            "routes": [],
        },
        "receivers": [
            {"name": "hook", "webhook_configs": [
                {"url": hook.url, "send_resolved": True}]},
        ],
    }  # fmt: skip
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'am.yml'}",
         f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "am.log").open("w"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / "am.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "am.log").read_text()
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def active(am: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{am}/api/v2/alerts", timeout=5) as r:
        alerts: list[dict[str, Any]] = json.load(r)
    return alerts


def wait_until(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return result


def test_a_stream_entering_alert_gives_one_alertmanager_alert_then_resolves(
    alertmanager: str, hook: Hook, redis_url: str
) -> None:
    prefix = f"t{time.monotonic_ns()}"

    async def feed(risks: list[tuple[int, float]], stream: str = "pump-1") -> None:
        alerter = alerting.build(alertmanager, redis_url=redis_url, prefix=prefix,
                                 windows=3, resend_s=0.2, hold_s=60)  # fmt: skip
        assert alerter is not None
        try:
            for n, risk in risks:  # one batch per window, as a busy scorer calls
                await alerter([window(n, risk, stream)])
                await asyncio.sleep(0.1)
            await alerter.drain()
        finally:
            await alerter.close()

    # a quiet stream and two windows in alert: nothing yet
    asyncio.run(feed([(100, 0.9), (200, 0.95)]))
    asyncio.run(feed([(100, 0.1)], stream="fan-2"))
    assert active(alertmanager) == []
    # the third window in a row opens it; more windows refresh the same alert (a
    # second alerter: another scorer process, the state is in Redis)
    asyncio.run(feed([(300, 0.91), (400, 0.97), (500, 0.99), (600, 0.93)]))
    (alert,) = wait_until(lambda: active(alertmanager))
    labels, notes = alert["labels"], alert["annotations"]
    assert labels == {"alertname": "ScjepaStreamRisk", "severity": "warning",
                      "tenant": "plant-a", "stream": "pump-1"}  # fmt: skip
    assert notes["model"] == "pumps 2026-11-01"
    assert notes["threshold"] == "0.8000" and float(notes["risk"]) >= 0.9
    assert notes["top_channels"] == "bearing 60%, temp 30%"
    assert "pump-1" in notes["summary"] and "plant-a" in notes["summary"]
    assert alert["status"]["state"] == "active"
    (note,) = wait_until(lambda: hook.received)  # one notification, firing
    assert note["status"] == "firing"
    assert [a["labels"]["stream"] for a in note["alerts"]] == ["pump-1"]
    posted = alerting.ALERT_POSTS.labels(outcome="ok")._value.get()
    assert posted >= 2  # the first post and at least one refresh

    # its risk falls: resolved, in Alertmanager and in a resolved notification
    asyncio.run(feed([(700, 0.2)]))
    wait_until(lambda: active(alertmanager) == [])
    resolved = wait_until(
        lambda: [n for n in hook.received if n["status"] == "resolved"]
    )
    assert [a["labels"]["stream"] for a in resolved[0]["alerts"]] == ["pump-1"]
    assert len([n for n in hook.received if n["status"] == "firing"]) == 1


def test_a_down_alertmanager_is_counted_and_never_blocks() -> None:
    """Posting to a port where nothing listens: every listener call returns without
    waiting on the network (nothing has been tried when they are done), the failures
    are counted afterwards, and past the bounded queue windows are dropped, counted."""
    dead = f"http://127.0.0.1:{free_port()}"
    failed = alerting.ALERT_POSTS.labels(outcome="failed")
    dropped = alerting.ALERT_POSTS.labels(outcome="dropped")

    async def run(queue: int) -> tuple[float, float]:
        alerter = alerting.build(dead, redis_url=None, windows=1, timeout_s=0.5,
                                 queue=queue)  # fmt: skip
        assert alerter is not None
        f0, d0 = failed._value.get(), dropped._value.get()
        try:
            for n in range(1, 200):  # 199 streams entering alert
                await alerter([window(n * 100, 0.9, f"s{n}")])
            assert failed._value.get() == f0  # no call waited for a post
            await alerter.drain()
        finally:
            await alerter.close()
        return failed._value.get() - f0, dropped._value.get() - d0

    assert asyncio.run(run(queue=1000)) == (199, 0)
    f, d = asyncio.run(run(queue=10))
    assert d == 189 and f == 10  # the queue held 10 batches; the rest were dropped


# --- the whole service: the app in-process, its scorer's listener, a real Alertmanager


def test_the_service_alerts_a_stream_and_resolves_it(
    tmp_path: Path, alertmanager: str, hook: Hook, redis_url: str
) -> None:
    """The app (role all) with a tiny model whose threshold (0.9) separates a ramp
    (risk ~0.999) from flat readings (~0.50): two ramp windows put the stream in alert
    (SCJEPA_ALERT_WINDOWS=2) and Alertmanager holds exactly one alert naming it; a
    flat window resolves it."""
    from fastapi.testclient import TestClient
    from support.service_artifact import build_artifact

    from service.config import Settings
    from service.main import create_app

    build_artifact(tmp_path / "artifact", threshold=0.9)
    settings = Settings(
        artifact=tmp_path / "artifact",
        redis_url=redis_url,
        key_prefix=f"t{time.monotonic_ns()}",
        max_wait_ms=1.0,
        alertmanager_url=alertmanager,
        alert_windows=2,
    )

    def readings(start: int, n: int, flat: bool) -> dict[str, Any]:
        values = (
            (lambda i: [0.0] * 4) if flat else (lambda i: [i % 7, i * 3 % 11, 0, 0])
        )
        return {"stream": "pump-9", "readings": [
            {"ts": float(i), "values": [float(v) for v in values(i)]}
            for i in range(start, start + n)]}  # fmt: skip

    def stream_alerts() -> list[dict[str, Any]]:
        return [a for a in active(alertmanager) if a["labels"]["stream"] == "pump-9"]

    with TestClient(create_app(settings)) as client:
        r = client.post("/ingest?wait=10", json=readings(1, 200, flat=False))
        assert r.json()["results"][0]["windows_scored"] == 2
        (alert,) = wait_until(stream_alerts)
        assert alert["labels"]["alertname"] == "ScjepaStreamRisk"
        assert float(alert["annotations"]["risk"]) >= 0.9
        assert alert["annotations"]["model"] == "tiny 0.0.1"
        # notified (Alertmanager notifies a resolution only of what it notified)
        wait_until(lambda: [n for n in hook.received if n["status"] == "firing"])
        r = client.post("/ingest?wait=10", json=readings(201, 100, flat=True))
        assert r.json()["results"][0]["alert"] is False
        wait_until(lambda: stream_alerts() == [])
    wait_until(lambda: "resolved" in [n["status"] for n in hook.received])
    states = [n["status"] for n in hook.received]
    assert states.count("firing") == 1, states
