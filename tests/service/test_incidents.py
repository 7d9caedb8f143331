"""Incidents reported by operators (POST /incidents), judged against the stream's
alerts by the evaluation's rules (service/incidents.py): warned with its lead, late
with its delay, missed, unscored, unknown; the stream's alert log on every store; the
routes, the tenants apart, and the gauges."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from support.service_artifact import build_artifact
from support.service_helpers import ClientFactory
from test_store_units import fresh_store

from service.incidents import Judged, judge, tally
from service.store import ALERT_LOG_LEN, INCIDENTS_KEPT, AlertLog, IncidentRow, Record

T0 = 1_700_000_000.0
KEYS = {"acme": "k-acme", "beta": "k-beta"}
KEYED = {"api_keys": [f"{t}:{k}" for t, k in KEYS.items()]}
ACME = {"X-API-Key": KEYS["acme"]}
LOOKBACK = 200


def log_of(
    *alerting: int,
    first: float | None = T0 + 99,
    cut=None,
    risks: dict[int, float | None] | None = None,
) -> AlertLog:
    """A stream of 1 s readings, windows of 100 every 100 readings (window n ends at
    T0 + n - 1), those numbered ``alerting`` in alert (risk 0.95, or ``risks[n]``);
    1,000 readings sent."""
    risk = risks or {}
    return AlertLog(
        [(n, T0 + n - 100, T0 + n - 1, risk.get(n, 0.95)) for n in alerting],
        first,
        cut,
        T0 + 999,
    )


def judged(log: AlertLog, start: float, end: float | None = None) -> Judged:
    return judge(log, T0 + start, None if end is None else T0 + end,
                 lookback=LOOKBACK, window=100, hop=100)  # fmt: skip


def test_warned_late_missed_by_the_evaluation_rules() -> None:
    log = log_of(200, 300, 600)  # windows ending at +199, +299 (a run), +599
    got = judged(log, 350)  # +299 is within 200 readings before it: warned
    assert got.outcome == "warned"
    assert got.lead_s == pytest.approx(350 - 199)  # from the run's first window
    assert got.lead_readings == 151 and got.alert_window_end == T0 + 199
    # the look-back's edge: a window ending exactly 200 readings before warns
    assert judged(log, 499).outcome == "warned"
    assert judged(log, 499).lead_s == pytest.approx(300)
    got = judged(log, 499.5)  # not within it; +599 is within the incident
    assert got.outcome == "late" and got.delay_s == pytest.approx(99.5)
    assert got.end == T0 + 999  # no end given: the stream's newest reading
    assert judged(log, 499.5, 590).outcome == "missed"  # ended before +599
    got = judged(log, 550, 650)
    assert (got.outcome, got.delay_s, got.delay_readings) == ("late", 49, 49)
    assert judged(log, 850, 900).outcome == "missed"
    assert judged(log, 750, 800).outcome == "warned"  # +599 within its look-back
    # a window ending at the onset is not before it: late, after no delay
    assert (judged(log, 599).outcome, judged(log, 599).delay_s) == ("late", 0)
    # a run broken by a window below the threshold: the lead is the last run's
    assert judged(log_of(200, 400), 450).lead_s == pytest.approx(450 - 399)


def test_the_judge_agrees_with_the_rules_read_window_by_window() -> None:
    """judge() finds the windows it needs by bisection; on random logs of irregular
    readings (windows of uneven length, runs, gaps) it decides as the rules read
    over every window in alert do."""
    rng = np.random.default_rng(7)

    def by_every_window(log: AlertLog, start: float, until: float) -> tuple:  # type: ignore[type-arg]
        def dt(a: float, b: float) -> float:
            return (b - a) / 99

        near = [
            w for w in log.alerting if start - LOOKBACK * dt(w[1], w[2]) <= w[2] < start
        ]
        if near:
            i = log.alerting.index(near[-1])
            while i > 0 and log.alerting[i - 1][0] == log.alerting[i][0] - 100:
                i -= 1
            return ("warned", log.alerting[i][2])
        late = [w for w in log.alerting if start <= w[2] <= until]
        return ("late", late[0][2]) if late else ("missed", None)

    for _ in range(300):
        ts = T0 + np.cumsum(rng.choice([0.5, 1.0, 3.0], size=3000))
        ns = np.sort(rng.choice(np.arange(1, 30), size=rng.integers(0, 12),
                                replace=False)) * 100  # fmt: skip
        log = AlertLog([(int(n), ts[n - 100], ts[n - 1], 0.95) for n in ns],
                       ts[99], None, ts[-1])  # fmt: skip
        start = float(rng.uniform(ts[150], ts[-1]))
        until = float(rng.uniform(start, ts[-1]))
        got = judge(log, start, until, lookback=LOOKBACK, window=100, hop=100)
        assert (got.outcome, got.alert_window_end if got.outcome == "late" else
                (None if got.lead_s is None else start - got.lead_s)) == \
            by_every_window(log, start, until)  # fmt: skip


def test_judged_again_at_another_operating_point() -> None:
    """The log at a tighter point keeps the windows of risk at or above its threshold
    (and those logged without a risk): an incident warned by a run of windows near the
    threshold is late or missed there, the lead taken from the run left."""
    log = log_of(200, 300, 600, risks={200: 0.92, 300: 0.92, 600: 0.97})
    assert [w[0] for w in log.at(0.95).alerting] == [600]
    assert judged(log, 350).outcome == "warned"
    assert judged(log.at(0.95), 350).outcome == "late"  # only +599 left, in it
    assert judged(log.at(0.95), 350, 500).outcome == "missed"
    run = log_of(200, 300, risks={200: 0.92, 300: 0.99})  # a run of two
    assert judged(run, 350).lead_s == pytest.approx(151)  # from +199
    assert judged(run.at(0.95), 350).lead_s == pytest.approx(51)  # from +299 alone
    assert judged(run.at(0.995), 350).outcome == "missed"
    assert log.at(0.9) == log  # at or under every risk logged: the log as it is
    # windows logged before their risks were: kept at every point
    old = log_of(200, 300, risks={200: None, 300: 0.92})
    assert [w[0] for w in old.at(0.99).alerting] == [200]


def test_unscored_and_unknown() -> None:
    # the stream's first window ended at or after the onset: it could not warn
    assert judged(log_of(200), 50).outcome == "unscored"
    assert judged(log_of(200), 99).outcome == "unscored"
    assert judged(log_of(first=None), 500).outcome == "unscored"
    # the log's windows dropped reach into the look-back: the log cannot say
    cut = (T0 + 300, T0 + 399)
    assert judged(log_of(500, cut=cut), 598).outcome == "unknown"
    assert judged(log_of(500, cut=cut), 599.5).outcome == "warned"  # past the cut
    # no end given, onset after the newest reading: judged up to the onset
    assert judged(log_of(), 2000).end == T0 + 2000


def test_tally_counts_outcomes_and_lead_quartiles() -> None:
    got = [("warned", v) for v in (10.0, 20.0, 30.0, 40.0, 50.0)]
    t = tally([*got, ("missed", None), ("late", None)])
    assert t.counts == {"warned": 5, "late": 1, "missed": 1, "unscored": 0,
                        "unknown": 0}  # fmt: skip
    assert t.lead_quartiles_s == [20.0, 30.0, 40.0]
    assert tally([]).lead_quartiles_s is None


def test_alert_log_on_every_store(store_url: str | None) -> None:
    """Records written with their windows: the windows in alert logged by window
    number whatever the order written, a window written twice once, the first end
    the earliest written; past ALERT_LOG_LEN the oldest go and the newest dropped is
    the cut; deleting the stream deletes its log."""

    async def main() -> None:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=4)
        try:
            await store.ensure_groups()
            await store.register("t", ["s"], 10)
            await store.append("t", "s", T0 + np.arange(20.0),
                               np.ones((20, 2), np.float32), window=10, hop=10,
                               max_queued=100)  # fmt: skip
            (first, _) = await store.read_work("c", 10, 0)
            epoch = first.epoch

            def rec(n: int, alert: bool, risk: float = 0.9) -> Record:
                return Record(n, f"{n}", risk, None, (T0 + n - 10, T0 + n - 1), alert)

            assert await store.alert_log("t", "nope") is None
            await store.put_scored([("t", "s", epoch, [rec(30, True), rec(40, False)])])
            await store.put_scored(
                [("t", "s", epoch, [rec(20, True, 0.125), rec(30, True)])]
            )
            log = await store.alert_log("t", "s")
            assert log is not None
            assert log.alerting == [(20, T0 + 10, T0 + 19, 0.125),
                                    (30, T0 + 20, T0 + 29, 0.9)]  # fmt: skip
            if store_url is not None:  # an entry an older version logged: no risk
                key = store._key("t", "s", "alerts")  # type: ignore[attr-defined]
                member = f"25 {T0 + 15!r} {T0 + 24!r}"
                await store.client.zadd(key, {member: 25})  # type: ignore[attr-defined]
                log = await store.alert_log("t", "s")
                assert log is not None
                assert log.alerting[1] == (25, T0 + 15, T0 + 24, None)
                await store.client.zrem(key, member)  # type: ignore[attr-defined]
            assert (log.first_end, log.cut, log.last_ts) == (T0 + 19, None, T0 + 19)
            many = [rec(100 + 10 * i, True) for i in range(ALERT_LOG_LEN)]
            await store.put_scored([("t", "s", epoch, many)])
            log = await store.alert_log("t", "s")
            assert log is not None and len(log.alerting) == ALERT_LOG_LEN
            assert log.alerting[0][0] == 100  # 20 and 30 dropped
            assert log.cut == (T0 + 20, T0 + 29)  # the newest dropped: 30
            assert log.first_end == T0 + 19
            assert await store.delete("t", "s") is not None
            assert await store.alert_log("t", "s") is None
        finally:
            await store.close()

    asyncio.run(main())


def test_incidents_kept_on_every_store(store_url: str | None) -> None:
    """A tenant's incidents: an id reported again replaced, the last INCIDENTS_KEPT
    reported kept (the oldest go), listed newest first, read back since a time (the
    gauges' read: past Lua's unpack limit on Redis), deleted; another tenant's
    apart."""

    async def main() -> None:
        store = fresh_store(store_url, dedupe_horizon=100, partitions=4)
        try:
            rows = [
                IncidentRow(f"i{k}", 1000.0 + k, json.dumps({"k": k}), "warned", k)
                for k in range(INCIDENTS_KEPT + 1)
            ]
            for row in rows:
                await store.put_incident("t", row)
            again = IncidentRow("i5", 5e6, '{"k": "again"}', "missed")
            await store.put_incident("t", again)
            await store.put_incident("u", IncidentRow("i1", 1.0, '{"k": "u"}', "late"))
            assert await store.incidents("t", 3) == ['{"k": "again"}',
                                                     '{"k": 10000}', '{"k": 9999}']  # fmt: skip
            (since, other) = await store.incident_outcomes(["t", "u"], 0.0)
            assert len(since) == INCIDENTS_KEPT and other == [("late", None)]
            # the oldest (lead 0) went; i5 was replaced
            assert sorted(lead for _, lead in since if lead is not None) == [
                k for k in range(1, INCIDENTS_KEPT + 1) if k != 5
            ]
            assert ("missed", None) in since
            (later,) = await store.incident_outcomes(["t"], 1000.0 + 9990)
            assert len(later) == 12  # 9990-10000, and i5 again
            assert await store.delete_incident("t", "i5")
            assert not await store.delete_incident("t", "i5")
            assert not await store.delete_incident("u", "i7")
            assert (await store.incidents("t", 1)) == ['{"k": 10000}']
        finally:
            await store.close()

    asyncio.run(main())


@pytest.fixture(scope="module")
def looked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model at threshold 0.9 (zeros score 0.5, 50s about 1.0), its
    manifest's look-back 200 readings and its test split's warned rate 0.4."""
    d = tmp_path_factory.mktemp("looked")
    build_artifact(d, threshold=0.9)
    raw = json.loads((d / "manifest.json").read_text())
    raw["eval_metrics"]["threshold"] = {
        "rule": "cv-budget",
        "false_alarms_per_1000": 1.0,
        "lookback": LOOKBACK,
        "operating_points": [{
            "false_alarms_per_1000": 1.0, "threshold": 0.9,
            "test": {"warned_rate": 0.4, "warned_rate_ci95": [0.2, 0.6],
                     "false_pages_per_1000": 0.5,
                     "false_pages_per_1000_ci95": [0.1, 0.9]},
        }],
    }  # fmt: skip
    (d / "manifest.json").write_text(json.dumps(raw))
    return d


def feed(client: TestClient, values: list[float], stream: str = "pump") -> None:
    """Windows of 100 one-second readings of each value (hop 100), scored."""
    readings = [
        {"ts": T0 + 100 * w + i, "values": [v] * 4}
        for w, v in enumerate(values)
        for i in range(100)
    ]
    r = client.post("/ingest", json={"stream": stream, "readings": readings},
                    params={"wait": 20}, headers=ACME)  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["windows_scored"] == len(values)


def series(client: TestClient, name: str) -> dict[tuple[str, ...], float]:
    text = client.get("/metrics").text
    return {
        (
            *(v for k, v in sorted(s.labels.items()) if k != "tenant"),
            s.labels.get("tenant", ""),
        ): s.value
        for f in text_string_to_metric_families(text)
        if f.name == name
        for s in f.samples
    }


def test_incidents_reported_judged_listed_and_counted(
    make_client: ClientFactory, looked: Path
) -> None:
    client = make_client(artifact=looked, **KEYED)
    # windows ending at +99 (0.5), +199 and +299 in alert, +399, +499, +599 in
    # alert, then below to +999
    feed(client, [0, 50, 50, 0, 0, 50, 0, 0, 0, 0])
    history = client.get("/risk/pump/history?limit=10", headers=ACME).json()["items"]
    assert [h["alert"] for h in reversed(history)] == [False, True, True, False,
                                                     False, True] + [False] * 4  # fmt: skip

    def report(**body: float | str) -> dict:  # type: ignore[type-arg]
        at = {k: T0 + v if k in ("start", "end") else v for k, v in body.items()}
        r = client.post("/incidents", json={"stream": "pump", **at}, headers=ACME)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    warned = report(start=350)
    assert warned["outcome"] == "warned" and warned["lead_s"] == pytest.approx(151)
    assert warned["lookback"] == LOOKBACK and warned["id"] == f"pump@{T0 + 350!r}"
    assert warned["end"] == T0 + 999
    late = report(start=550, end=650, id="INC-2")
    assert (late["outcome"], late["delay_s"]) == ("late", 49)
    assert report(start=850, end=900, id="INC-3")["outcome"] == "missed"
    assert report(start=50, id="INC-4")["outcome"] == "unscored"
    report(start=350)  # the same id again: replaced, not added

    listed = client.get("/incidents", headers=ACME).json()["incidents"]
    assert [i["id"] for i in listed] == [warned["id"], "INC-4", "INC-3", "INC-2"]
    assert (
        client.get("/incidents?limit=1", headers=ACME).json()["incidents"][0]["id"]
        == warned["id"]
    )
    # one stream's, one outcome's: newest reported first, at most limit
    feed(client, [0, 0], stream="valve")
    r = client.post("/incidents", json={"stream": "valve", "start": T0 + 150,
                                        "id": "V-1"}, headers=ACME)  # fmt: skip
    assert r.json()["outcome"] == "missed"

    def ids(query: str) -> list[str]:
        r = client.get("/incidents?" + query, headers=ACME)
        assert r.status_code == 200, r.text
        return [i["id"] for i in r.json()["incidents"]]

    assert ids("stream=valve") == ["V-1"]
    assert ids("stream=pump") == [warned["id"], "INC-4", "INC-3", "INC-2"]
    assert ids("stream=pump&limit=2") == [warned["id"], "INC-4"]
    assert ids("outcome=missed") == ["V-1", "INC-3"]
    assert ids("outcome=missed&limit=1") == ["V-1"]
    assert ids("stream=pump&outcome=missed") == ["INC-3"]
    assert ids("stream=gone") == [] and ids("outcome=unknown") == []
    for query, named in (("outcome=lost", "outcome"), ("stream=pu/mp", "stream")):
        r = client.get("/incidents?" + query, headers=ACME)
        assert r.status_code == 422 and named in r.json()["detail"][0]["loc"], r.text
    assert client.delete("/incidents/V-1", headers=ACME).status_code == 204
    beta = {"X-API-Key": KEYS["beta"]}
    assert client.get("/incidents", headers=beta).json() == {"incidents": []}
    assert client.get("/incidents?stream=pump", headers=beta).json() == {
        "incidents": []
    }
    r = client.post("/incidents", json={"stream": "pump", "start": T0}, headers=beta)
    assert r.status_code == 404 and "unknown stream 'pump'" in r.text
    # an onset the readings have not reached (the newest is at +999): not judged yet
    r = client.post("/incidents", json={"stream": "pump", "start": T0 + 999.5},
                    headers=ACME)  # fmt: skip
    assert r.status_code == 409 and "report the incident once they do" in r.text
    assert report(start=999)["outcome"] == "missed"  # the newest reading: judged

    counts = series(client, "scjepa_tenant_incidents")
    assert counts[("warned", "acme")] == 1 and counts[("late", "acme")] == 1
    assert counts[("missed", "acme")] == 2 and counts[("unscored", "acme")] == 1
    assert counts[("unknown", "acme")] == 0 and counts[("warned", "beta")] == 0
    lead = series(client, "scjepa_tenant_incident_lead_seconds")
    assert lead == {(q, "acme"): pytest.approx(151) for q in ("0.25", "0.5", "0.75")}
    warned_rate = series(client, "scjepa_alert_evaluated_warned_rate")
    assert warned_rate == {("mean", ""): 0.4, ("lower95", ""): 0.2}

    assert client.delete("/incidents/INC-3", headers=ACME).status_code == 204
    assert client.delete("/incidents/INC-3", headers=ACME).status_code == 404
    assert series(client, "scjepa_tenant_incidents")[("missed", "acme")] == 1


@pytest.fixture(scope="module")
def pointed(looked: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``looked`` with three operating points (constant 2s score 0.956, 50s 1.0):
    0.3 per 1,000 at 0.99, 1 at 0.9 (served), 3 at 0.6, and 10 without a
    threshold."""
    d = tmp_path_factory.mktemp("pointed")
    for f in ("model.onnx", "manifest.json"):
        (d / f).write_bytes((looked / f).read_bytes())
    raw = json.loads((d / "manifest.json").read_text())
    served = raw["eval_metrics"]["threshold"]["operating_points"][0]
    raw["eval_metrics"]["threshold"]["operating_points"] = [
        {"false_alarms_per_1000": 10.0, "threshold": None},
        {"false_alarms_per_1000": 3.0, "threshold": 0.6},
        served,
        {"false_alarms_per_1000": 0.3, "threshold": 0.99},
    ]
    (d / "manifest.json").write_text(json.dumps(raw))
    return d


def test_each_operating_point_judged_on_the_incidents(
    make_client: ClientFactory, pointed: Path
) -> None:
    """GET /operating-points: every incident reported judged again at each point's
    threshold from its stream's alert log (a tighter point: the windows at or above
    it; a looser one: what the log holds, a lower bound), beside the test figures;
    the tenant's own incidents only; a stream gone leaves them unknown."""
    client = make_client(artifact=pointed, **KEYED)
    # windows ending at +199, +299 at 0.956, +599 at 1.0: in alert at 0.9
    feed(client, [0, 2, 2, 0, 0, 50, 0, 0, 0, 0])
    for body in ({"start": 350, "id": "A"}, {"start": 650, "end": 700, "id": "B"},
                 {"start": 850, "end": 900, "id": "C"}):  # fmt: skip
        body = {**body, "stream": "pump", "start": T0 + body["start"]}
        if "end" in body:
            body["end"] += T0
        assert client.post("/incidents", json=body, headers=ACME).status_code == 200

    def points(headers: dict[str, str] = ACME, query: str = "") -> dict:  # type: ignore[type-arg]
        r = client.get("/operating-points" + query, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    got = points()
    assert (got["threshold"], got["incidents_judged"]) == (0.9, 3)
    rows = {p["false_alarms_per_1000"]: p for p in got["points"]}
    assert list(rows) == [0.3, 1.0, 3.0]  # ascending; 10 has no threshold
    outcomes = {b: {k: v for k, v in p["incidents"].items() if v}
                for b, p in rows.items()}  # fmt: skip
    assert outcomes == {
        0.3: {"warned": 1, "late": 1, "missed": 1},  # A: +599 only, late in it
        1.0: {"warned": 2, "missed": 1},  # as reported
        3.0: {"warned": 2, "missed": 1},  # the log's windows: a lower bound
    }
    assert [rows[b]["warned_share"] for b in rows] == pytest.approx(
        [1 / 3, 2 / 3, 2 / 3]
    )
    assert [(p["serving"], p["exact"]) for p in rows.values()] == [
        (False, True), (True, True), (False, False)]  # fmt: skip
    assert rows[1.0]["test"]["warned_rate"] == 0.4 and rows[0.3]["test"] is None
    assert points(query="?limit=1")["incidents_judged"] == 1  # the newest: C
    beta = points({"X-API-Key": KEYS["beta"]})
    assert beta["incidents_judged"] == 0
    assert all(p["warned_share"] is None for p in beta["points"])
    assert client.get("/operating-points").status_code == 401
    assert client.get("/operating-points?limit=0", headers=ACME).status_code == 422
    assert client.delete("/streams/pump", headers=ACME).status_code == 204
    for p in points()["points"]:
        assert p["incidents"]["unknown"] == 3 and p["warned_share"] is None


@pytest.mark.parametrize("store_kind", ["memory"])
def test_bad_reports_are_refused_naming_the_field(
    make_client: ClientFactory, looked: Path
) -> None:
    client = make_client(artifact=looked, **KEYED)
    feed(client, [0])
    cases = [
        ({"stream": "pump", "start": T0 + 10, "end": T0}, "end = "),
        ({"stream": "pump", "start": "soon"}, "start"),
        ({"stream": "pump", "start": -1.0}, "start"),
        ({"stream": "pu/mp", "start": T0}, "stream"),
        ({"stream": "pump", "start": T0, "id": "a b"}, "id"),
        ({"stream": "pump", "start": T0, "severity": 3}, "severity"),
    ]
    for body, named in cases:
        r = client.post("/incidents", json=body, headers=ACME)
        assert r.status_code == 422, (body, r.text)
        assert named in r.text, r.text
    assert (
        client.post("/incidents", json={"stream": "pump", "start": T0}).status_code
        == 401
    )
    # a body that is not JSON, or not UTF-8 text: 422 naming the body, as /ingest's
    for raw, named in ((b"\xff\xfe{", "not UTF-8"), (b"{nope", "JSON decode error"),
                       (b"", "Field required")):  # fmt: skip
        r = client.post("/incidents", content=raw, headers=ACME)
        assert r.status_code == 422 and named in r.text, r.text
        assert r.json()["detail"][0]["loc"][0] == "body"
    assert client.get("/incidents?limit=0", headers=ACME).status_code == 422
    assert client.get("/incidents", headers=ACME).json() == {"incidents": []}
