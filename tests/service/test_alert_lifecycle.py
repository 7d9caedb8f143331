"""A stream's alert across what happens to the stream, through the whole service (the
app in-process, its scorer and alerter) on every store, posting to a webhook that
stands in for Alertmanager: a stream that starts over (another model layout under
SCJEPA_LAYOUT_CHANGE=fresh, or forgotten after SCJEPA_STREAM_TTL_S) alerts again
(its window numbers begin again: they were taken for windows already seen), a stream
firing when it starts over has that alert resolved, and a window whose record was
written by a scorer that failed before acknowledging it is still alerted (claimed,
scored again, its listeners told)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.service_artifact import build_artifact
from support.service_helpers import AnyRedis, ClientFactory, Hook
from test_alerting import wait_until

from service.manifest import write_manifest
from service.store import StoreUnavailable

T0 = 1_700_000_000.0


# what the evaluation's test split measured at the operating point served (as `scjepa
# export` records it): every page says it (service.manifest.evaluated_note)
MEASURED = {"events": 50, "warned_rate": 0.06, "lead_quartiles_steps": [20.0, 45.0, 80.0],
            "false_pages_per_1000": 0.6}  # fmt: skip
EVALUATED = (
    "At this operating point (1 false alarm per 1,000 windows) the evaluation's test "
    "split had 6% of its 50 incidents warned, a median 45 readings ahead (quartiles "
    "20-80); 0.60 false pages per 1,000 windows."
)


@pytest.fixture(scope="module")
def sharp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with threshold 0.9: constant 50s score ~1.0, zeros ~0.5; its
    manifest serves the operating point of 1 false alarm per 1,000 windows."""
    d = tmp_path_factory.mktemp("sharp")
    m = build_artifact(d, threshold=0.9)
    point = {"false_alarms_per_1000": 1.0, "threshold": 0.9, "test": MEASURED}
    record = {"rule": "cv-budget", "false_alarms_per_1000": 1.0,
              "operating_points": [point]}  # fmt: skip
    write_manifest(d, m.model_copy(update={"eval_metrics": {"threshold": record}}))
    return d


@pytest.fixture
def redis(request: pytest.FixtureRequest, store_kind: str) -> AnyRedis | None:
    """The Redis of ``store_kind`` (None: the in-memory store)."""
    if store_kind == "memory":
        return None
    fixture = "redis_server" if store_kind == "redis" else "redis_cluster"
    server: AnyRedis = request.getfixturevalue(fixture)
    return server


@pytest.fixture
def start(make_client: ClientFactory, sharp: Path, hook: Hook) -> Any:
    """The service on the parametrized store, posting stream alerts to ``hook``."""
    url = hook.url.removesuffix("/hook")
    return lambda **more: make_client(artifact=sharp, alertmanager_url=url, **more)


def ingest(client: TestClient, start: int, n: int, high: bool) -> dict[str, Any]:
    """``n`` readings of stream pump from ts T0 + start: all 50 (risk ~1) or all 0."""
    v = 50.0 if high else 0.0
    body = {"stream": "pump", "readings": [
        {"ts": T0 + start + i, "values": [v] * 4} for i in range(n)]}  # fmt: skip
    r = client.post("/ingest?wait=20", json=body)
    assert r.status_code == 200, r.text
    res: dict[str, Any] = r.json()["results"][0]
    assert res["windows_scored"] == res["windows_queued"], res
    return res


def events(hook: Hook) -> list[tuple[str, str]]:
    """(window n, what) of every alert posted: fire, resolve, or restart (resolved
    because the stream started over)."""
    out = []
    batches: list[list[dict[str, Any]]] = hook.received  # type: ignore[assignment]
    for batch in batches:  # the alerter posts lists of alerts
        for a in batch:
            summary = a["annotations"]["summary"]
            what = (
                "restart"
                if "started over" in summary
                else "resolve"
                if "back below" in summary
                else "fire"
            )
            out.append((a["annotations"]["window_n"], what))
    return out


def settle(hook: Hook, want: list[tuple[str, str]]) -> None:
    wait_until(lambda: len(events(hook)) >= len(want), timeout=10)
    time.sleep(0.3)  # nothing more comes
    assert events(hook) == want


def test_a_stream_started_over_by_a_layout_change_alerts_again(
    start: Any, hook: Hook
) -> None:
    """Firing at windows 100-200; a model of another layout starts the stream over
    (the store's layout changed in-process: the new model's windows are the same
    shape here): its first window (n=100 again, below) resolves the old alert, its
    next (n=200, at/above) fires the new one. Before epochs both were ignored as
    older than window 200."""
    client = start()
    ingest(client, 0, 200, high=True)
    settle(hook, [("100", "fire")])
    (fired,) = hook.received[0]  # type: ignore[misc]
    assert fired["annotations"]["evaluated"] == EVALUATED
    client.app.state.store.layout = "w100/v4/another"
    assert ingest(client, 200, 100, high=False)["readings_total"] == 100
    ingest(client, 300, 100, high=True)
    settle(hook, [("100", "fire"), ("100", "restart"), ("200", "fire")])


def test_a_stream_back_after_the_ttl_alerts_again(
    start: Any, hook: Hook, redis: AnyRedis | None
) -> None:
    """The stream idle past SCJEPA_STREAM_TTL_S is forgotten; its alert state may
    outlive it (Redis: made to here, as when its last step came after the stream's
    last ingest; in memory it had no TTL at all): back, its first window alerts."""
    client = start(stream_ttl_s=2, alert_windows=1)
    ingest(client, 0, 200, high=True)
    ingest(client, 200, 100, high=False)
    settle(hook, [("100", "fire"), ("300", "resolve")])
    if redis is not None:
        r = redis.client()
        prefix = client.app.state.settings.key_prefix
        assert r.expire(f"{prefix}:alert:default/pump", 600)
    time.sleep(2.5)
    assert client.get("/risk/pump").status_code == 404  # forgotten
    assert ingest(client, 10_000, 100, high=True)["window_n"] == 100
    settle(hook, [("100", "fire"), ("300", "resolve"), ("100", "fire")])


def test_a_window_whose_write_failed_after_its_record_is_alerted(
    start: Any, hook: Hook
) -> None:
    """The scorer's write fails after the records are written and before their
    acknowledgement (its second round trip; in memory, the acknowledgement): the
    window is claimed and scored again, finds its record written, and its alert is
    posted all the same (it was never)."""
    client = start(claim_timeout_s=0.5)
    store = client.app.state.store
    left = [1]

    def failing(name: str, is_ack: Any) -> None:
        orig = getattr(store, name)

        async def wrapped(arg: Any, *more: Any) -> Any:
            if left[0] and is_ack(arg):
                left[0] -= 1
                raise StoreUnavailable("simulated: lost after the records were written")
            return await orig(arg, *more)

        setattr(store, name, wrapped)

    failing("ack_work", lambda ids: bool(ids))  # memory, and a Redis Cluster
    if hasattr(store, "_run"):  # one Redis: the acknowledgements ride with the news
        failing("_run", lambda cmds: any(c[0] == "XACK" for c in cmds))
    res = ingest(client, 0, 100, high=True)
    assert res["alert"] is True and left == [0]
    settle(hook, [("100", "fire")])
    claimed = [
        line
        for line in client.get("/metrics").text.splitlines()
        if line.startswith("scjepa_windows_claimed_total")
    ]
    assert claimed and float(claimed[0].split()[-1]) >= 1
