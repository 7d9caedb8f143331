"""scjepa_top_stream_risk on every store (in memory, one Redis, a Redis Cluster): the
one gauge labelled by stream exports exactly the SCJEPA_TOP_STREAMS streams of highest
latest risk, over every tenant; a stream that leaves the top N leaves the exposition
(no stale value), and N = 0 exports no series."""

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

    def send(self, tenant: str, stream: str, value: float) -> float:
        start = self.sent.get((tenant, stream), 0)
        self.sent[(tenant, stream)] = start + 100
        readings = [{"ts": T0 + start + i, "values": [value] * 4} for i in range(100)]
        r = self.client.post(
            "/ingest",
            json={"stream": stream, "readings": readings},
            params={"wait": 20},
            headers={"X-API-Key": KEYS[tenant]},
        )
        assert r.status_code == 200, r.text
        (res,) = r.json()["results"]
        assert res["windows_scored"] == 1, res
        return float(res["risk"])


def top_series(client: TestClient) -> dict[tuple[str, str], float]:
    """scjepa_top_stream_risk as one scrape of GET /metrics exports it."""
    text = client.get("/metrics", headers={"X-API-Key": OPS}).text
    return {
        (s.labels["tenant"], s.labels["stream"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "scjepa_top_stream_risk"
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


@pytest.mark.parametrize("store_kind", ["memory"])
def test_an_open_metrics_names_no_stream_of_any_tenant(
    make_client: ClientFactory,
) -> None:
    """With tenants' keys set, an open /metrics would tell anyone the stream names of
    every tenant (acme's GET /risk of beta's stream is a 404): it names none; behind
    an @ops key (SCJEPA_OPS_KEY_ROUTES) the ops key reads them, no tenant key does.
    api.md's tenants section says so."""
    tenants = [f"{t}:{k}" for t, k in KEYS.items()]
    acme = {"X-API-Key": KEYS["acme"]}
    for client, named in ((make_client(api_keys=tenants), False),
                          (make_client(**KEYED), True)):  # fmt: skip
        Feeder(client).send("beta", "pump", 1.0)
        assert client.get("/risk/pump", headers=acme).status_code == 404
        assert set(top_series(client)) == ({("beta", "pump")} if named else set())
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


def test_store_summary_top_order_is_the_same_on_every_store(
    store_url: str | None,
) -> None:
    """Highest first; equal risks by the later tenant/stream first (Redis' ZREVRANGE
    order, which the memory store keeps), so each store exports the same top N."""

    async def main() -> None:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=2)
        try:
            await store.ensure_groups()
            risks = {("a", "s1"): 0.25, ("a", "s2"): 0.75, ("b", "s1"): 0.75,
                     ("b", "s0"): 0.5}  # fmt: skip
            for tenant, stream in risks:
                await store.register(tenant, [stream], 10)
                await store.append(tenant, stream, T0 + np.arange(10.0),
                                   np.ones((10, 2), np.float32), window=10, hop=10,
                                   max_queued=100)  # fmt: skip
            items = await store.read_work("c", 10, 0)
            assert len(items) == 4
            written = await store.put_scored([
                (it.tenant, it.stream, it.epoch, [(10, "{}", risks[it.tenant, it.stream])])
                for it in items
            ])  # fmt: skip
            assert written == [[True]] * 4
            s = await store.summary(0.5, 3)
            assert s.top == (("b", "s1", 0.75), ("a", "s2", 0.75), ("b", "s0", 0.5))
            assert (s.streams, s.in_alert, s.max_risk) == (4, 3, 0.75)
            none = await store.summary(0.5)
            assert none.top == () and none.max_risk == 0.75
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("bad", ["-1", "1001", "many"])
def test_top_streams_setting_is_validated(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCJEPA_TOP_STREAMS", bad)
    with pytest.raises(ValidationError, match="top_streams"):
        Settings()
