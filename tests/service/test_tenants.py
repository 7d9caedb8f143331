"""Tenants and keys: every key belongs to a tenant, every stream to the tenant that sent
it. Tenant A cannot read, list, write or overwrite tenant B's streams, nor learn they
exist (the same 404 as an unknown name), on every route, every store (in memory, one
Redis, a Redis Cluster), both adapters.
Keys are stored hashed, compared in constant time, rotated without a restart; the rate
limit per key lives in the store; the stream quota per tenant holds."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from pydantic import ValidationError
from served import key_line
from support.service_helpers import AnyRedis, ClientFactory
from test_alerting import wait_until
from test_api import T0, body, series

from service import auth
from service.config import Settings
from service.main import create_app
from service.manifest import Budget
from service.store.redis_store import partition

A, B, ADMIN, OPS = "key-a-0123456789", "key-b-9876543210", "admin-key-xyz", "ops-key"
HA, HB = {"X-API-Key": A}, {"X-API-Key": B}


def keyed(make_client: ClientFactory, tmp_path: Path, **more: Any) -> TestClient:
    keys = tmp_path / "keys.txt"
    keys.write_text(
        "# tenants\n" + key_line("acme", A) + key_line("globex", B)
        + key_line("@admin", ADMIN) + key_line("@ops", OPS)
    )  # fmt: skip
    return make_client(api_keys_file=keys, **more)


@pytest.fixture(params=[True, False], ids=["fast", "routes"])
def two(
    request: pytest.FixtureRequest, make_client: ClientFactory, tmp_path: Path
) -> TestClient:
    return keyed(make_client, tmp_path, fast_paths=request.param)


def post(client: TestClient, obj: Any, headers: dict[str, str]) -> Any:
    return client.post("/ingest", json=obj, headers=headers)


def test_tenants_do_not_see_each_others_streams(two: TestClient) -> None:
    x = series(150)
    assert post(two, body("pump-7", x[:120]), HA).status_code == 200
    assert post(two, body("secret-b", x[:50]), HB).status_code == 200
    # read: B's stream is unknown to A, byte for byte as a name nobody used
    for path in ("/risk/{}", "/risk/{}/history"):
        hidden = two.get(path.format("secret-b"), headers=HA)
        unknown = two.get(path.format("secret-c"), headers=HA)
        assert hidden.status_code == unknown.status_code == 404
        assert hidden.content == unknown.content.replace(b"secret-c", b"secret-b")
        assert two.get(path.format("secret-b"), headers=HB).status_code == 200
    # list: each tenant its own
    assert two.get("/streams", headers=HA).json()["streams"] == ["pump-7"]
    assert two.get("/streams", headers=HB).json()["streams"] == ["secret-b"]
    # write and overwrite: the same name is another stream per tenant
    res = post(two, body("pump-7", x[:60]), HB).json()["results"][0]
    assert (res["accepted"], res["duplicates"], res["readings_total"]) == (60, 0, 60)
    res = post(two, body("secret-b", x[:50]), HA).json()["results"][0]
    assert (res["accepted"], res["readings_total"]) == (50, 50)  # A's own, new
    a, b = (two.get("/risk/pump-7", headers=h).json() for h in (HA, HB))
    assert (a["readings_total"], a["status"]) == (120, "ok")
    assert (b["readings_total"], b["status"]) == (60, "warming_up")
    assert two.get("/risk/secret-b", headers=HB).json()["readings_total"] == 50
    batch = {"streams": [body("pump-7", x[120:150], 120), body("new", x[:5])]}
    assert post(two, batch, HB).status_code == 200
    assert two.get("/risk/pump-7", headers=HA).json()["readings_total"] == 120
    assert two.get("/streams", headers=HA).json()["streams"] == ["pump-7", "secret-b"]
    assert two.get("/streams", headers=HB).json()["streams"] == [
        "new", "pump-7", "secret-b",
    ]  # fmt: skip
    # history: only the tenant's own records
    hist = two.get("/risk/pump-7/history", headers=HA).json()["items"]
    assert [h["n"] for h in hist] == [100]
    assert two.get("/risk/pump-7/history", headers=HB).json()["items"] == []


def test_every_tenant_route_needs_a_tenant_key(two: TestClient) -> None:
    routes = [("POST", "/ingest"), ("GET", "/risk/s"), ("GET", "/risk/s/history"),
              ("GET", "/streams"), ("GET", "/models")]  # fmt: skip
    for method, path in routes:
        for headers in ({}, {"X-API-Key": "nope"}, {"X-API-Key": ADMIN},
                        {"X-API-Key": OPS}, {"Authorization": "Basic " + A}):  # fmt: skip
            r = two.request(method, path, headers=headers, json=body("s", series(1)))
            assert r.status_code == 401, (method, path, headers, r.text)
            assert r.json() == {"detail": "missing or unknown X-API-Key"}
    bearer = {"Authorization": f"Bearer {A}"}  # the same key as a bearer token
    assert two.get("/streams", headers=bearer).status_code == 200
    for path in ("/healthz", "/readyz", "/metrics", "/ui", "/docs", "/openapi.json"):
        assert two.get(path).status_code == 200, path  # open by default


def test_ops_routes_behind_their_own_key(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    client = keyed(make_client, tmp_path, ops_key_routes=["/metrics", "/readyz"])
    for path in ("/metrics", "/readyz"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers=HA).status_code == 401  # a tenant key: no
        assert client.get(path, headers={"X-API-Key": OPS}).status_code == 200
        assert client.get(path, headers={"X-API-Key": ADMIN}).status_code == 200
        bearer = {"Authorization": f"Bearer {OPS}"}  # what Prometheus can send
        assert client.get(path, headers=bearer).status_code == 200
    assert client.get("/healthz").status_code == 200
    with pytest.raises(ValidationError, match="only"):
        Settings(ops_key_routes=["/streams"])


def test_ops_routes_behind_a_proxy_prefix(artifact_dir: Path, tmp_path: Path) -> None:
    """Under uvicorn's --root-path the request's path carries the prefix: the route,
    not the URL, decides (the listed routes were open there)."""
    keys = tmp_path / "keys.txt"
    keys.write_text(key_line("acme", A) + key_line("@ops", OPS))
    settings = Settings(artifact=artifact_dir, redis_url=None, api_keys_file=keys,
                        ops_key_routes=["/metrics", "/readyz"])  # fmt: skip
    with TestClient(create_app(settings), root_path="/api") as prefixed:
        # the path as uvicorn passes it: the prefix included
        for path in ("/api/metrics", "/api/readyz"):
            assert prefixed.get(path).status_code == 401
            assert prefixed.get(path, headers={"X-API-Key": OPS}).status_code == 200
        assert prefixed.get("/api/healthz").status_code == 200


def test_keys_are_hashed_and_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Settings(api_keys=["plain-default", "acme:plain-acme", "@admin:adm",
                           "globex:sha256:" + "AB" * 32])  # fmt: skip
    assert s.api_keys == [
        f"default:sha256:{hashlib.sha256(b'plain-default').hexdigest()}",
        f"acme:sha256:{hashlib.sha256(b'plain-acme').hexdigest()}",
        f"@admin:sha256:{hashlib.sha256(b'adm').hexdigest()}",
        "globex:sha256:" + "ab" * 32,
    ]
    assert "plain" not in repr(s) and "plain" not in s.model_dump_json()
    table = auth.KeyTable.of(s.api_keys)
    calls: list[int] = []
    real = hmac.compare_digest

    def counted(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counted)
    for key, principal in (("plain-default", "default"), ("plain-acme", "acme"),
                           ("adm", "@admin"), ("nope", None)):  # fmt: skip
        calls.clear()
        who = table.identify(key)
        assert (who.principal if who else None) == principal
        assert len(calls) == 4  # every entry, whichever matches (no early exit)
    # the hash prefix in any case, as the key file reads it (upper case made the
    # hash itself the key)
    upper = Settings(api_keys=["globex:SHA256:" + "AB" * 32, "SHA256:" + "cd" * 32])
    assert upper.api_keys == [
        "globex:sha256:" + "ab" * 32,
        "default:sha256:" + "cd" * 32,
    ]
    for bad in ("bad tenant:SECRET1", "a/b:SECRET2", "acme:sha256:SECRET3", "acme:"):
        with pytest.raises(ValidationError) as e:
            Settings(api_keys=[bad])
        assert "SECRET" not in str(e.value)  # an error never prints a key


def test_key_file_holds_hashes_only(tmp_path: Path) -> None:
    f = tmp_path / "keys.txt"
    f.write_text("acme my-plain-key\n")
    with pytest.raises(auth.KeyConfigError, match=r"keys.txt:1.*hashes only") as e:
        auth.Keys([], f)
    assert "my-plain-key" not in str(e.value)
    f.write_text("acme sha256:" + "0" * 63 + "\n")
    with pytest.raises(auth.KeyConfigError, match="64 hex"):
        auth.Keys([], f)


def test_key_file_budget_lines(tmp_path: Path) -> None:
    """``TENANT fa_budget:B`` lines give tenants operating points of their own, beside
    SCJEPA_TENANT_FA_BUDGET's; a line that cannot be one is refused naming it."""
    f = tmp_path / "keys.txt"
    f.write_text(key_line("acme", A) + "acme fa_budget:0.3  # night shift\n")
    keys = auth.Keys([], f, {"globex": 3.0})
    assert keys.table.budgets == {
        "acme": Budget(0.3, "SCJEPA_API_KEYS_FILE"),
        "globex": Budget(3.0, "SCJEPA_TENANT_FA_BUDGET"),
    }
    assert keys.table.identify(A) == auth.Identity("acme", auth.digest(A).hex()[:16])
    for line, says in (
        ("acme fa_budget:x", "keys.txt:2: fa_budget:x: the budget must be a number"),
        ("acme fa_budget:0", "fa_budget:0: the budget must be a number above 0"),
        ("acme fa_budget:nan", "the budget must be a number above 0"),
        ("@ops fa_budget:1", "'@ops' is no tenant name"),
        ("acme fa_budget:1\nacme fa_budget:3", "keys.txt:3: tenant acme's budget is "
         "given by this file already"),
        ("globex fa_budget:1", "tenant globex's budget is given by "
         "SCJEPA_TENANT_FA_BUDGET already"),
        ("acme fa_budget:1 extra", "expected 'PRINCIPAL sha256:HEX'"),
    ):  # fmt: skip
        f.write_text(key_line("acme", A) + line + "\n")
        with pytest.raises(auth.KeyConfigError, match=re.escape(says)):
            auth.Keys([], f, {"globex": 3.0})


def test_readings_and_windows_count_per_tenant(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """Each tenant's volume is its own series (capacity, billing, a noisy neighbour),
    labelled with the tenants the keys name, never a name a client sent; a tenant
    exports zeros from the start and from the reload that adds it, so its rates read
    0, not nothing, before its first reading."""
    client = keyed(make_client, tmp_path, rate_limit_rps=0)

    def count(name: str, tenant: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, {**labels, "tenant": tenant})

    accepted, both = "scjepa_readings_total", ("acme", "globex")
    before = {t: count(accepted, t, outcome="accepted") for t in both}
    duplicates = count(accepted, "globex", outcome="duplicate")
    scored = {t: count("scjepa_windows_scored_total", t) for t in both}
    assert None not in (*before.values(), *scored.values(), duplicates)  # from start
    r = client.post("/ingest?wait=20", json=body("pump-7", series(120)), headers=HA)
    assert r.status_code == 200 and r.json()["results"][0]["windows_scored"] == 1
    assert post(client, body("pump-7", series(30)), HB).status_code == 200
    assert post(client, body("pump-7", series(30)), HB).status_code == 200  # again
    assert count(accepted, "acme", outcome="accepted") - before["acme"] == 120
    assert count(accepted, "globex", outcome="accepted") - before["globex"] == 30
    assert count(accepted, "globex", outcome="duplicate") - duplicates == 30
    assert count("scjepa_windows_scored_total", "acme") - scored["acme"] == 1
    assert count("scjepa_windows_scored_total", "globex") == scored["globex"]
    assert count(accepted, "pump-7", outcome="accepted") is None  # not a stream's
    # a tenant the key file gains: its zeros from the reload on
    keys = tmp_path / "keys.txt"
    keys.write_text(keys.read_text() + key_line("initech", "key-c-5555555555"))
    deadline = time.monotonic() + 10
    while count(accepted, "initech", outcome="accepted") is None:
        assert time.monotonic() < deadline, "the key file change was not picked up"
        time.sleep(0.2)
    assert count(accepted, "initech", outcome="accepted") == 0
    # a tenant the key file loses: its series leave the exposition at that reload
    keys.write_text(key_line("acme", A) + key_line("initech", "key-c-5555555555"))
    deadline = time.monotonic() + 10
    while count(accepted, "globex", outcome="accepted") is not None:
        assert time.monotonic() < deadline, "the key file change was not picked up"
        time.sleep(0.2)
    text = client.get("/metrics").text
    assert 'tenant="globex"' not in text and 'tenant="acme"' in text
    # a window of its stream still queued then is scored, and brings none back
    store = client.app.state.store  # type: ignore[attr-defined]
    scorer = client.app.state.scorer  # type: ignore[attr-defined]
    batches = "scjepa_scorer_batch_seconds_count"  # observed once a batch is counted
    before = REGISTRY.get_sample_value(batches) or 0.0
    ts = T0 + 1000 + np.arange(100.0)
    done = client.portal.call(
        lambda: store.append("globex", "pump-7", ts, series(100).astype(np.float32),
                             window=scorer.window, hop=scorer.hop, max_queued=100)
    )  # fmt: skip
    assert done.queued == [100]
    deadline = time.monotonic() + 20
    while (REGISTRY.get_sample_value(batches) or 0.0) == before:
        assert time.monotonic() < deadline, "the window was not scored"
        time.sleep(0.1)
    assert client.portal.call(store.queue_stats).depth == 0
    text = client.get("/metrics").text
    assert 'tenant="globex"' not in text and 'tenant="acme"' in text


def test_windows_at_each_operating_point_count_per_tenant(
    make_client: ClientFactory, tmp_path: Path, art_points: Path
) -> None:
    """Each tenant's windows at or above each operating point's threshold (what each
    point would alarm on its streams), whichever point it is served at; a tenant the
    keys lose loses those series too."""
    client = keyed(make_client, tmp_path, artifact=art_points, rate_limit_rps=0)
    zeros, fifties = np.zeros((100, 4)), np.full((100, 4), 50.0)  # risk 0.5; about 1

    def at(budget: str, tenant: str) -> float | None:
        labels = {"budget": budget, "tenant": tenant}
        return REGISTRY.get_sample_value("scjepa_tenant_windows_at_point_total", labels)

    before = {(b, t): at(b, t) or 0.0 for b in ("1", "3") for t in ("acme", "globex")}
    for x, start, h in ((fifties, 0, HA), (zeros, 100, HA), (zeros, 0, HB)):
        r = client.post("/ingest?wait=20", json=body("pump", x, start), headers=h)
        assert r.json()["results"][0]["windows_scored"] == 1, r.text
    got = {k: (at(*k) or 0.0) - v for k, v in before.items()}
    assert got == {("1", "acme"): 1, ("3", "acme"): 2,  # 50s over both, zeros over 3's
                   ("1", "globex"): 0, ("3", "globex"): 1}  # fmt: skip
    keys = tmp_path / "keys.txt"
    keys.write_text(key_line("acme", A) + key_line("@admin", ADMIN))
    deadline = time.monotonic() + 10
    while at("3", "globex") is not None:
        assert time.monotonic() < deadline, "the key file change was not picked up"
        time.sleep(0.2)
    assert at("1", "globex") is None and at("3", "acme") is not None


def test_keys_rotate_without_restart(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    client = keyed(make_client, tmp_path)
    keys = tmp_path / "keys.txt"
    assert client.get("/streams", headers=HA).status_code == 200
    new = "key-a-rotated"
    keys.write_text(key_line("acme", new) + key_line("globex", B))  # A revoked
    deadline = time.monotonic() + 10
    while client.get("/streams", headers=HA).status_code != 401:
        assert time.monotonic() < deadline, "the key file change was not picked up"
        time.sleep(0.2)
    assert client.get("/streams", headers={"X-API-Key": new}).status_code == 200
    assert client.get("/streams", headers=HB).status_code == 200
    keys.write_text("garbage line\n")  # a broken file: the previous keys stay
    time.sleep(2.5)
    assert client.get("/streams", headers={"X-API-Key": new}).status_code == 200
    door = client.app.state.door  # type: ignore[attr-defined]
    assert "keys.txt:1" in door.keys.error
    text = client.get("/metrics").text
    assert 'scjepa_reloads_total{outcome="failed",what="keys"}' in text


def test_a_reload_never_opens_a_keyed_service(tmp_path: Path) -> None:
    """A key file left without a tenant key (every line commented out, or read half
    rewritten) would open the service to requests without a key: the reload is
    refused, the previous keys stay, and the failure is reported."""
    f = tmp_path / "keys.txt"
    f.write_text(key_line("acme", A) + key_line("@admin", ADMIN))
    keys = auth.Keys([], f)
    assert not keys.table.open
    f.write_text("# " + key_line("acme", A) + key_line("@admin", ADMIN))
    assert keys.reload() is False
    assert not keys.table.open and keys.table.identify(A) is not None
    assert keys.error is not None and "no tenant key left" in keys.error
    f.write_text("")  # a rewrite caught after its truncation
    assert keys.reload() is False and keys.table.identify(A) is not None
    f.write_text(key_line("globex", B))
    assert keys.reload() is True and keys.table.identify(A) is None
    # an open service (no tenant key at start) stays open on the same file
    f.write_text("")
    opened = auth.Keys([], f)
    assert opened.table.open and opened.reload() is True


def test_no_keys_is_one_open_tenant(client: TestClient) -> None:
    assert client.post("/ingest", json=body("s", series(3))).status_code == 200
    for headers in ({}, {"X-API-Key": "anything"}):
        assert client.get("/streams", headers=headers).json()["streams"] == ["s"]
        assert client.get("/risk/s", headers=headers).status_code == 200


def test_rate_limit_per_key_in_the_store(
    store_url: str | None,
    artifact_dir: Path,
    tmp_path: Path,
) -> None:
    """Two replicas on one Redis share each key's bucket; another key is not slowed."""
    keys = tmp_path / "keys.txt"
    keys.write_text(key_line("acme", A) + key_line("globex", B))
    settings: dict[str, Any] = {
        "artifact": artifact_dir, "api_keys_file": keys, "key_prefix": f"rl{time.time_ns()}",
        "rate_limit_rps": 2.0, "rate_limit_burst": 5,
    }  # fmt: skip
    settings["redis_url"] = store_url
    apps = [TestClient(create_app(Settings(**settings))) for _ in range(2)]

    def refused(tenant: str) -> float:
        name = "scjepa_requests_refused_total"
        return REGISTRY.get_sample_value(
            name, {"reason": "rate_limit", "tenant": tenant}
        )

    before = {t: refused(t) for t in ("acme", "globex")}
    with apps[0] as one, apps[1] as other:
        replicas = [one, other] if store_url else [one, one]
        codes = [
            replicas[i % 2].get("/streams", headers=HA).status_code for i in range(8)
        ]
        assert codes.count(200) in (5, 6) and codes[-1] == 429, codes  # 5 + refill
        r = one.get("/risk/s", headers=HA)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "SCJEPA_RATE_LIMIT_RPS" in r.json()["detail"]
        r = one.post("/ingest", json=body("s", series(1)), headers=HA)
        assert r.status_code == 429
        assert one.get("/streams", headers=HB).status_code == 200  # B unaffected
        assert one.get("/healthz").status_code == 200  # probes are not limited
        time.sleep(1.1)  # 2 a second refill
        assert one.get("/streams", headers=HA).status_code == 200
        # every 429 counted, under the tenant whose key was refused
        assert refused("acme") - before["acme"] == codes.count(429) + 2
        assert refused("globex") == before["globex"]


def test_stream_quota_per_tenant(make_client: ClientFactory, tmp_path: Path) -> None:
    client = keyed(make_client, tmp_path, max_streams_per_tenant=3, rate_limit_rps=0)
    for s in ("a", "b", "c"):
        assert post(client, body(s, series(2)), HA).status_code == 200
    r = post(client, body("d", series(2)), HA)
    assert r.status_code == 403
    assert "SCJEPA_MAX_STREAMS_PER_TENANT" in r.json()["detail"] and "'d'" in r.text
    assert "past its limit of 3 live streams" in r.json()["detail"]  # not "has 3"
    batch = {"streams": [body("a", series(2, start=2), 2), body("e", series(2))]}
    assert post(client, batch, HA).status_code == 403  # nothing of it stored
    assert client.get("/risk/a", headers=HA).json()["readings_total"] == 2
    res = post(client, body("a", series(2, start=2), 2), HA)  # known streams go on
    assert res.status_code == 200
    assert post(client, body("d", series(2)), HB).status_code == 200  # B's own quota
    assert client.get("/streams", headers=HA).json()["streams"] == ["a", "b", "c"]
    # each tenant's live streams against the quota, on every scrape
    # (ScjepaTenantNearStreamQuota); a deleted stream leaves the count at once
    text = client.get("/metrics").text
    assert 'scjepa_tenant_streams{tenant="acme"} 3.0' in text
    assert 'scjepa_tenant_streams{tenant="globex"} 1.0' in text
    assert "scjepa_stream_quota 3.0" in text
    assert client.delete("/streams/b", headers=HA).status_code == 204
    text = client.get("/metrics").text
    assert 'scjepa_tenant_streams{tenant="acme"} 2.0' in text


def test_streams_in_alert_and_highest_risk_by_tenant(
    make_client: ClientFactory, tmp_path: Path, sharp: Path
) -> None:
    """Each tenant the keys name has its streams in alert (0 for none) and its
    highest latest risk on /metrics, beside the store-wide figures; a deleted stream
    leaves its tenant's; a tenant with no stream scored reads 0."""
    keys = tmp_path / "keys.txt"
    keys.write_text(
        key_line("acme", A) + key_line("globex", B) + key_line("initech", "key-i-0")
    )
    client = make_client(artifact=sharp, api_keys_file=keys, rate_limit_rps=0)
    hot, calm = np.full((100, 4), 50.0), np.zeros((100, 4))
    warm = np.full((100, 4), 1.0)
    risk = {}
    for stream, x, key in (("a1", hot, HA), ("a2", hot, HA), ("a3", warm, HA),
                           ("b1", calm, HB)):  # fmt: skip
        r = client.post("/ingest?wait=20", json=body(stream, x), headers=key)
        (res,) = r.json()["results"]
        assert res["alert"] == (x is hot), stream
        risk[stream] = res["risk"]
    assert risk["a1"] > risk["a3"] > risk["b1"]  # three distinct figures to tell apart

    def gauges() -> dict[str, float]:
        text = client.get("/metrics").text
        return {
            name: float(v)
            for name, v in re.findall(
                r"^(scjepa_(?:tenant_)?(?:streams_in_alert|max_risk)"
                r"(?:\{tenant=\"\w+\"\})?) (\S+)$",
                text,
                re.M,
            )
        }

    want = {
        "scjepa_streams_in_alert": 2.0,
        'scjepa_tenant_streams_in_alert{tenant="acme"}': 2.0,
        'scjepa_tenant_streams_in_alert{tenant="globex"}': 0.0,
        'scjepa_tenant_streams_in_alert{tenant="initech"}': 0.0,
        "scjepa_max_risk": pytest.approx(risk["a1"]),
        'scjepa_tenant_max_risk{tenant="acme"}': pytest.approx(risk["a1"]),
        'scjepa_tenant_max_risk{tenant="globex"}': pytest.approx(risk["b1"]),
        'scjepa_tenant_max_risk{tenant="initech"}': 0.0,
    }
    wait_until(lambda: gauges() == want)
    assert client.delete("/streams/a1", headers=HA).status_code == 204
    want = want | {
        "scjepa_streams_in_alert": 1.0,
        'scjepa_tenant_streams_in_alert{tenant="acme"}': 1.0,
    }
    assert gauges() == want
    assert client.delete("/streams/a2", headers=HA).status_code == 204
    want = want | {
        "scjepa_streams_in_alert": 0.0,
        'scjepa_tenant_streams_in_alert{tenant="acme"}': 0.0,
        "scjepa_max_risk": pytest.approx(risk["a3"]),
        'scjepa_tenant_max_risk{tenant="acme"}': pytest.approx(risk["a3"]),
    }
    assert gauges() == want


def test_a_batch_over_the_quota_registers_none_of_its_streams(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """Quota 2, one live stream, a batch of two new ones: 403, and the one that fit
    is not registered (it was: listed with no readings, holding the quota's last
    place, so the next new stream was refused too)."""
    client = keyed(make_client, tmp_path, max_streams_per_tenant=2, rate_limit_rps=0)
    assert post(client, body("a", series(2)), HA).status_code == 200
    batch = {"streams": [body("b", series(2)), body("c", series(2))]}
    assert post(client, batch, HA).status_code == 403
    assert client.get("/streams", headers=HA).json()["streams"] == ["a"]
    assert client.get("/risk/b", headers=HA).status_code == 404
    assert post(client, body("d", series(2)), HA).status_code == 200
    assert client.get("/streams", headers=HA).json()["streams"] == ["a", "d"]


def test_idle_streams_free_the_quota(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    client = keyed(make_client, tmp_path, max_streams_per_tenant=2, stream_ttl_s=2)
    store = client.app.state.store  # type: ignore[attr-defined]
    if hasattr(store, "_touch_every"):
        store._touch_every = 0.0  # register on every call (the test's clock is short)
    for s in ("a", "b"):
        assert post(client, body(s, series(2)), HA).status_code == 200
    assert post(client, body("c", series(2)), HA).status_code == 403
    time.sleep(2.5)
    assert post(client, body("c", series(2)), HA).status_code == 200
    assert client.get("/streams", headers=HA).json()["streams"] == ["c"]


def test_streams_are_listed_a_page_at_a_time(two: TestClient) -> None:
    names = [f"s-{i:03d}" for i in range(25)]
    post(two, {"streams": [body(n, series(1)) for n in names]}, HA)
    got, after, pages = [], None, 0
    while True:
        params: dict[str, Any] = {"limit": 10} | ({"after": after} if after else {})
        page = two.get("/streams", params=params, headers=HA).json()
        got += page["streams"]
        pages += 1
        after = page["next"]
        if after is None:
            break
    assert got == names and pages == 3
    assert two.get("/streams", params={"limit": 0}, headers=HA).status_code == 422
    r = two.get("/streams", params={"after": "bad/name"}, headers=HA)
    assert r.status_code == 422 and "after" in r.text


def test_redis_keys_carry_the_tenant(
    any_redis: AnyRedis, artifact_dir: Path, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(key_line("acme", A) + key_line("globex", B))
    p = f"tenants{time.time_ns()}"
    settings = Settings(artifact=artifact_dir, redis_url=any_redis.url, key_prefix=p,
                        api_keys_file=keys)  # fmt: skip
    with TestClient(create_app(settings)) as client:
        for h in (HA, HB):
            r = client.post("/ingest?wait=20", json=body("pump-7", series(120)),
                            headers=h)  # fmt: skip
            assert r.status_code == 200
    r = any_redis.client()
    found = sorted(k.decode() for k in r.scan_iter(f"{p}:*"))

    def key(t: str, k: str) -> str:  # one Cluster slot per stream and its work queue
        return f"{p}:{{p{partition(t, 'pump-7', 16)}}}:{t}/pump-7:{k}"

    for t in ("acme", "globex"):
        for k in ("risk", "rows", "seen", "state"):
            assert key(t, k) in found
        assert {f"{p}:{{{t}}}:names", f"{p}:{{{t}}}:touched"} <= set(found)
    assert not [k for k in found if ":pump-7:" in k]  # no tenant-less stream key
    members = sorted(m.decode() for m in r.zrange(f"{p}:{{global}}:streams", 0, -1))
    assert members == ["acme/pump-7", "globex/pump-7"]
    assert json.loads(r.zrange(key("acme", "risk"), 0, 0)[0])["n"] == 100
