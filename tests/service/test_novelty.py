"""The input-drift monitor (manifest.novelty and the graph's "novelty" output): each
scored window's novelty in its risk record (GET /risk and its history) as the graph
gave it, scjepa_windows_unlike_training_total counting exactly the windows at or
above the level, the expected share as a gauge; none of it for a model without the
monitor; a manifest that records the monitor over a graph without it refused."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from support.service_artifact import NOVELTY, build_artifact
from support.service_helpers import RedisServer
from test_api import body

from service.config import Settings
from service.infer_process import InferenceProcess
from service.inference import load_model
from service.main import create_app
from service.manifest import ArtifactError
from service.schemas import RiskHistory, RiskResponse
from service.store import recent_novelty

UNLIKE = "scjepa_windows_unlike_training_total"
SHARE = "scjepa_novelty_expected_share"


def counted(tenant: str = "default") -> float:
    return REGISTRY.get_sample_value(UNLIKE, {"tenant": tenant}) or 0.0


def observed(tenant: str | None = None) -> tuple[float, float]:
    """scjepa_window_novelty's (count, sum); with ``tenant``, that tenant's
    scjepa_tenant_window_novelty's."""
    name, labels = (
        ("scjepa_window_novelty", {})
        if tenant is None
        else ("scjepa_tenant_window_novelty", {"tenant": tenant})
    )
    return tuple(  # type: ignore[return-value]
        REGISTRY.get_sample_value(f"{name}_{k}", labels) or 0.0
        for k in ("count", "sum")
    )


def windows() -> np.ndarray:
    """Windows of known novelty (mean |kept value| / 10): 0.995, 0.5, 0.989, 1.0,
    0.99 less a float32 rounding (just below the level), and two random ones."""
    rng = np.random.default_rng(3)
    x = np.empty((7, 100, 4), np.float32)
    for i, c in enumerate((9.95, 5.0, 9.89, -20.0, 9.9)):
        x[i] = c
    x[5:] = np.round(rng.normal(size=(2, 100, 4)) * 3, 4)
    return x


@pytest.fixture
def app_on_redis(redis_server: RedisServer) -> Iterator[dict[str, TestClient]]:
    opened: dict[str, TestClient] = {}

    def start(artifact: Path, **settings: object) -> TestClient:
        settings.setdefault("key_prefix", f"t{uuid.uuid4().hex[:8]}")
        c = TestClient(
            create_app(
                Settings(
                    artifact=artifact,
                    redis_url=redis_server.url,
                    max_wait_ms=1.0,
                    **settings,  # type: ignore[arg-type]
                )
            )
        )
        c.__enter__()
        opened[str(len(opened))] = c
        return c

    yield start  # type: ignore[misc]
    for c in opened.values():
        c.__exit__(None, None, None)


def score_each(
    client: TestClient, x: np.ndarray, headers: dict[str, str] | None = None
) -> list[RiskResponse]:
    """One stream per window, scored before the answer (?wait=); their GET /risk."""
    for i, w in enumerate(x):
        r = client.post("/ingest?wait=20", json=body(f"s{i}", w.astype(float)),
                        headers=headers)  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["windows_scored"] == 1
    return [
        RiskResponse.model_validate_json(
            client.get(f"/risk/s{i}", headers=headers).content
        )
        for i in range(len(x))
    ]


@pytest.mark.parametrize("infer_in", ["thread", "process"])
def test_records_carry_the_graphs_novelty_and_the_counter_counts_the_unlike(
    app_on_redis: object, monitored: Path, infer_in: str
) -> None:
    x = windows()
    want = load_model(monitored, provider="cpu").score(x).novelty
    assert want is not None
    # the cases the windows were made for: above the level, below, just below
    at_level = [v >= NOVELTY.level for v in want.tolist()]
    assert at_level == [True, False, False, True, False, False, False]
    before, (n0, sum0) = counted(), observed()
    client = app_on_redis(monitored, infer_in=infer_in)  # type: ignore[operator]
    got = score_each(client, x)
    assert [g.novelty for g in got] == pytest.approx(want.tolist(), abs=1e-6)
    # one window each: its stream's recent novelty one step from 0.5 toward it
    assert [g.recent_novelty for g in got] == [recent_novelty(None, g.novelty)
                                               for g in got]  # fmt: skip
    hist = RiskHistory.model_validate_json(client.get("/risk/s0/history").content)
    assert [r.novelty for r in hist.items] == [got[0].novelty]
    assert counted() - before == sum(at_level) == 2
    # every window's novelty in the histogram (its mean: a shift of the bulk)
    n1, sum1 = observed()
    assert n1 - n0 == len(x)
    assert sum1 - sum0 == pytest.approx(float(want.astype(float).sum()), abs=1e-5)
    metrics = client.get("/metrics").text
    assert f'{SHARE}{{level="0.99"}} 0.01' in metrics


def test_the_unlike_windows_count_under_their_tenant(
    app_on_redis: object, monitored: Path
) -> None:
    """A tenant's drift is its own: its windows unlike the training data (and every
    window it has scored, and their novelty's sum and count) count under its tenant
    label, so one tenant's recalibrated sensors are not diluted by another's
    volume."""
    keys = {"acme": "key-a-0123456789", "globex": "key-b-9876543210"}
    client = app_on_redis(  # type: ignore[operator]
        monitored, api_keys=[f"{t}:{k}" for t, k in keys.items()], rate_limit_rps=0
    )

    def scored(tenant: str) -> float:
        name = "scjepa_windows_scored_total"
        return REGISTRY.get_sample_value(name, {"tenant": tenant}) or 0.0

    before = {t: (counted(t), scored(t), *observed(t)) for t in keys}
    x = windows()  # windows 0 and 3 are at the level
    want = load_model(monitored, provider="cpu").score(x).novelty
    assert want is not None
    score_each(client, x[:3], {"X-API-Key": keys["acme"]})
    score_each(client, x[3:], {"X-API-Key": keys["globex"]})
    after = {t: (counted(t), scored(t), *observed(t)) for t in keys}
    assert after["acme"][0] - before["acme"][0] == 1  # window 0
    assert after["globex"][0] - before["globex"][0] == 1  # window 3
    assert after["acme"][1] - before["acme"][1] == 3
    assert after["globex"][1] - before["globex"][1] == 4
    # each tenant's mean novelty: its windows' count and sum
    for t, mine in (("acme", want[:3]), ("globex", want[3:])):
        assert after[t][2] - before[t][2] == len(mine)
        got = after[t][3] - before[t][3]
        assert got == pytest.approx(float(mine.astype(float).sum()), abs=1e-5)


def test_without_a_monitor_the_field_is_null_and_nothing_is_counted(
    app_on_redis: object, artifact_dir: Path, redis_server: RedisServer
) -> None:
    before, (n0, sum0) = counted(), observed()
    prefix = f"t{uuid.uuid4().hex[:8]}"
    client = app_on_redis(artifact_dir, key_prefix=prefix)  # type: ignore[operator]
    got = score_each(client, windows()[:3])
    assert [g.novelty for g in got] == [None] * 3
    assert [g.recent_novelty for g in got] == [None] * 3
    assert all(g.status == "ok" and g.risk is not None for g in got)
    assert counted() == before and observed() == (n0, sum0)
    assert SHARE + "{" not in client.get("/metrics").text  # no series: no figure
    # a record written before the field existed reads as null, both routes
    r = redis_server.client()
    (key,) = list(r.scan_iter(match=f"{prefix}:*/s0:risk"))
    ((member, score),) = r.zrange(key, 0, -1, withscores=True)
    old = json.loads(member)
    del old["novelty"]
    r.zrem(key, member)
    r.zadd(key, {json.dumps(old): score})
    assert client.get("/risk/s0").json()["novelty"] is None
    assert client.get("/risk/s0").json()["risk"] == got[0].risk
    items = client.get("/risk/s0/history").json()["items"]
    assert len(items) == 1 and items[0]["novelty"] is None


def test_a_stream_state_stored_before_its_recent_novelty_reads_null(
    app_on_redis: object, monitored: Path, redis_server: RedisServer
) -> None:
    """A stream's state as a release before the recent novelty stored it (no field):
    GET /risk's recent_novelty is null, its record's novelty as it was; the stream's
    next window starts the recent novelty over from 0.5."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    client = app_on_redis(monitored, key_prefix=prefix)  # type: ignore[operator]
    (got,) = score_each(client, windows()[:1])
    assert got.recent_novelty is not None
    r = redis_server.client()
    (state,) = list(r.scan_iter(match=f"{prefix}:*/s0:state"))
    assert r.hdel(state, "novelty") == 1
    old = client.get("/risk/s0").json()
    assert old["recent_novelty"] is None and old["novelty"] == got.novelty
    nxt = body("s0", windows()[1].astype(float), start=100)  # the next window
    r = client.post("/ingest?wait=20", json=nxt)
    assert r.json()["results"][0]["windows_scored"] == 1, r.text
    new = client.get("/risk/s0").json()
    assert new["recent_novelty"] == recent_novelty(None, new["novelty"])


def test_a_manifest_with_the_monitor_over_a_graph_without_it_is_refused(
    tmp_path: Path,
) -> None:
    build_artifact(tmp_path, novelty=NOVELTY, novelty_output=False)
    with pytest.raises(ArtifactError, match=r"lack \['novelty'\].*manifest's novelty"):
        load_model(tmp_path, provider="cpu")

    async def child() -> None:  # the child process names it too
        await InferenceProcess.start(Settings(artifact=tmp_path))

    with pytest.raises(ArtifactError, match=r"lack \['novelty'\]"):
        asyncio.run(child())


def test_chunked_runs_keep_each_windows_novelty(monitored: Path) -> None:
    """Runs split in chunks, side by side, give each window the novelty it gets
    alone (the CPU's chunked and parallel paths)."""
    x = np.repeat(windows(), 5, axis=0)
    one = load_model(monitored, provider="cpu", cpu_chunk_tokens=0).score(x)
    chunked = load_model(
        monitored, provider="cpu", cpu_chunk_tokens=30, intra_op_threads=2
    )
    assert chunked.run_size < len(x) and chunked.parallel_runs == 2
    split = chunked.score(x)
    assert one.novelty is not None and split.novelty is not None
    np.testing.assert_allclose(split.novelty, one.novelty, atol=1e-6)
    rows = split.rows(3, 9)
    assert rows.novelty is not None
    np.testing.assert_array_equal(rows.novelty, split.novelty[3:9])
