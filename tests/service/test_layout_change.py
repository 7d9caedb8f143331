"""A roll-out with another channel layout over live state (issue 23): the stream's
state records the layout it was built for; SCJEPA_LAYOUT_CHANGE says what a new model
does with it (fresh: the stream starts over; refuse: 409 naming the stream). Never a
500, on every store (in memory, one Redis, a Redis Cluster)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from support.service_artifact import build_artifact
from support.service_helpers import RedisServer

from service.config import Settings
from service.main import create_app

T0 = 1_700_000_000.0


def body(n: int, v: int, start: int = 0) -> dict[str, Any]:
    x = np.round(np.random.default_rng(start).normal(size=(n, v)), 4)
    return {"stream": "s", "readings": [{"ts": T0 + start + i, "values": r.tolist()}
                                        for i, r in enumerate(x)]}  # fmt: skip


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("five")
    build_artifact(d, channels=["a", "b", "c", "d", "flat"])
    return d


@pytest.mark.parametrize("policy", ["fresh", "refuse"])
def test_another_channel_layout_over_live_state(
    store_url: str | None,
    artifact_dir: Path,
    five: Path,
    policy: str,
) -> None:
    url = store_url
    prefix = f"lay{uuid.uuid4().hex[:8]}"

    def settings(artifact: Path) -> Settings:
        return Settings(artifact=artifact, redis_url=url, key_prefix=prefix,
                        layout_change=policy)  # fmt: skip

    old = new = TestClient(create_app(settings(artifact_dir)))
    old.__enter__()
    try:
        r = old.post("/ingest?wait=20", json=body(150, 4))
        assert r.json()["results"][0]["windows_scored"] == 1
        if url is None:  # one process: the new model takes over the same store
            store = old.app.state.store  # type: ignore[attr-defined]
            store.layout = "w100/v5/other"
        else:  # a roll-out: the old process stops, the new one starts
            old.__exit__(None, None, None)
            new = TestClient(create_app(settings(five)))
            new.__enter__()
        r = new.post("/ingest?wait=20", json=body(120, 5 if url else 4, start=150))
        if policy == "refuse":
            assert r.status_code == 409, r.text
            detail = r.json()["detail"]
            assert "'s'" in detail and "SCJEPA_LAYOUT_CHANGE" in detail
            assert new.get("/risk/s").json()["readings_total"] == 150  # kept
        else:
            assert r.status_code == 200, r.text
            res = r.json()["results"][0]
            # the stream started over: its old readings and risks are gone
            assert (res["accepted"], res["readings_total"]) == (120, 120)
            assert res["windows_scored"] == 1 and res["window_n"] == 100
            hist = new.get("/risk/s/history").json()["items"]
            assert [h["n"] for h in hist] == [100]
    finally:
        (new if url else old).__exit__(None, None, None)


def test_a_refused_batch_stores_none_of_its_streams(
    store_url: str | None, artifact_dir: Path
) -> None:
    """SCJEPA_LAYOUT_CHANGE=refuse and a batch of a new stream and one stored for
    another layout: 409, and nothing of the request stored (the new stream neither
    stored nor registered, so not listed); retried alone, the new stream's readings
    are accepted, not taken for duplicates."""
    settings = Settings(artifact=artifact_dir, redis_url=store_url,
                        key_prefix=f"lay{uuid.uuid4().hex[:8]}",
                        layout_change="refuse")  # fmt: skip
    with TestClient(create_app(settings)) as client:
        assert client.post("/ingest", json=body(10, 4)).status_code == 200
        client.app.state.store.layout = "w100/v4/another"  # type: ignore[attr-defined]
        fresh = body(150, 4) | {"stream": "new"}
        batch = {"streams": [fresh, body(10, 4, start=10)]}
        r = client.post("/ingest", json=batch)
        assert r.status_code == 409, r.text
        assert "'s'" in r.json()["detail"]
        assert client.get("/risk/new").status_code == 404
        assert client.get("/streams").json()["streams"] == ["s"]
        assert client.get("/risk/s").json()["readings_total"] == 10
        res = client.post("/ingest", json=fresh).json()["results"][0]
        assert (res["accepted"], res["duplicates"]) == (150, 0)


def _roll_out(
    redis: RedisServer, old: Path, new: Path, *, before_layouts: bool = False, **kw: Any
) -> tuple[int, float]:
    """An api of model ``old`` queues 3 windows of one stream and stops (with
    ``before_layouts`` the items lose their layout field, as the release before this
    one queued them); a scorer of model ``new`` drains the queue. Returns the risk
    records written and the windows shed for their layout."""
    prefix = f"lay{uuid.uuid4().hex[:8]}"

    def settings(artifact: Path, role: str) -> Settings:
        return Settings(artifact=artifact, redis_url=redis.url, role=role,
                        key_prefix=prefix, infer_in="thread", **kw)  # fmt: skip

    with TestClient(create_app(settings(old, "api"))) as api:
        r = api.post("/ingest", json=body(300, 4))
        assert r.json()["results"][0]["windows_queued"] == 3
    r = redis.client()
    if before_layouts:
        for key in r.scan_iter(f"{prefix}:*:work"):
            for entry_id, fields in r.xrange(key):
                r.xdel(key, entry_id)
                r.xadd(key, {k: v for k, v in fields.items() if k != b"l"})
    labels = {"reason": "layout"}
    shed = REGISTRY.get_sample_value("scjepa_windows_shed_total", labels) or 0.0
    with TestClient(create_app(settings(new, "scorer"))):
        deadline = time.monotonic() + 30
        while sum(r.xlen(k) for k in r.scan_iter(f"{prefix}:*:work")) > 0:
            assert time.monotonic() < deadline, "the queue was not drained"
            time.sleep(0.05)
    records = sum(r.zcard(k) for k in r.scan_iter(f"{prefix}:*:risk"))
    dropped = REGISTRY.get_sample_value("scjepa_windows_shed_total", labels) - shed
    return records, dropped


def _reordered(tmp_path: Path) -> Path:
    """The test model's channels in another order: the same shape, another layout."""
    build_artifact(tmp_path / "reordered", channels=["flat", "c", "b", "a"],
                   mask=[False, True, True, True])  # fmt: skip
    return tmp_path / "reordered"


def test_windows_queued_for_another_layout_of_the_same_shape_are_not_scored(
    redis_server: RedisServer, artifact_dir: Path, tmp_path: Path
) -> None:
    """A roll-out to a model of the same window and channel count but other channels
    (here the same ones reordered), as operations.md says: the old api queued windows
    and stopped, a scorer of the new model starts. It scores none of them (it would
    read channel a as flat and write its records into the old stream's history): they
    are dropped and counted as shed for their layout."""
    new = _reordered(tmp_path)
    assert _roll_out(redis_server, artifact_dir, new, layout_change="refuse",
                     claim_timeout_s=0.2) == (0, 3)  # fmt: skip


@pytest.mark.parametrize("same", [True, False])
def test_windows_queued_by_the_release_before_layouts_are_checked_by_their_state(
    redis_server: RedisServer, artifact_dir: Path, tmp_path: Path, same: bool
) -> None:
    """As above, the windows queued as the release before this one queued them:
    without their layout (field l). Their stream's state says it: a scorer of a
    model of another layout of the same shape drops them (it scored them, channel a
    read as flat, and wrote the records), one of the same model scores them all (a
    roll-out of the service alone drops none)."""
    new = artifact_dir if same else _reordered(tmp_path)
    got = _roll_out(redis_server, artifact_dir, new, before_layouts=True)
    assert got == ((3, 0) if same else (0, 3))
