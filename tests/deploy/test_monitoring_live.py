"""The monitoring chain end to end, without Docker: the real service as compose runs it
(`scjepa serve --role api` and `--role scorer`, a real redis-server with a maxmemory, a
tiny ONNX artifact) and redis_exporter are scraped by a real Prometheus server loaded
with deploy/prometheus (targets and intervals shortened; the scorer job's DNS discovery
replaced by the scorer's address), which sends its alerts to a real Alertmanager loaded with
deploy/alertmanager; the service posts its stream alerts there too. /metrics needs the
ops key (SCJEPA_OPS_KEY_ROUTES=/metrics, the key as compose's command adds it), which
Prometheus sends from its credentials_file as in compose. Every recording and
alert rule must evaluate without error, every recording rule and every dashboard query
must return data from the live service, and Alertmanager must hold one alert per
stream in alert."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.components import require
from support.deploy_helpers import DASHBOARDS, DEPLOY, PROM_DIR, as_queried, load_yaml
from support.service_artifact import NOVELTY, build_artifact

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except OSError as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what} ({last})")


def build_tiny_artifact(directory: Path) -> None:
    """The service tests' tiny artifact, every scored stream in alert, with the
    input-drift monitor (its panel and rules have data) and two operating points, the
    tenant's own at 3 false alarms per 1,000 windows (SCJEPA_TENANT_FA_BUDGET below:
    its gauges, panels and rule branch have data), both at threshold 0."""
    build_artifact(directory, threshold=0.0, novelty=NOVELTY)
    manifest = directory / "manifest.json"
    raw = json.loads(manifest.read_text())
    test = {"false_pages_per_1000": 0.5, "false_pages_per_1000_ci95": [0.2, 0.9]}
    points = [{"false_alarms_per_1000": b, "threshold": 0.0, "test": test}
              for b in (1.0, 3.0)]  # fmt: skip
    raw["eval_metrics"]["threshold"] = {
        "rule": "cv-budget",
        "false_alarms_per_1000": 1.0,
        "operating_points": points,
    }
    manifest.write_text(json.dumps(raw))


class Proc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None):
        self.log = log
        self.f = log.open("w")
        self.p = subprocess.Popen(
            args, stdout=self.f, stderr=subprocess.STDOUT, env=env, cwd=log.parent
        )

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.f.close()

    def tail(self) -> str:
        return self.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    prometheus = require("prometheus", "the Prometheus server scrapes the service")
    scjepa = require("scjepa-cli", "the service runs as `scjepa serve`")  # this venv's
    redis_server = require("redis-server", "the store, as in compose")
    exporter = require("redis-exporter", "Redis' memory for the Redis alert and panel")
    alertmanager = require("alertmanager", "Prometheus and the service alert to it")
    tmp = tmp_path_factory.mktemp("live")
    build_tiny_artifact(tmp / "artifact")

    names = ("api", "scorer", "prom", "redis", "exporter", "am")
    ports: dict[str, int] = {}
    while len(set(ports.values())) < len(names):
        ports = {k: free_port() for k in names}
    ops_key = "5ca1ab1e" * 6  # make-secrets.sh's ops_key: 48 hex characters
    (tmp / "ops_key").write_text(ops_key + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    env.update(
        SCJEPA_API_KEYS=f"@ops:{ops_key}",  # what compose's command appends
        SCJEPA_OPS_KEY_ROUTES="/metrics",
        SCJEPA_ARTIFACT=str(tmp / "artifact"),
        SCJEPA_MAX_WAIT_MS="1",
        SCJEPA_REDIS_URL=f"redis://127.0.0.1:{ports['redis']}/0",
        SCJEPA_ALERTMANAGER_URL=f"http://127.0.0.1:{ports['am']}",
        SCJEPA_TENANT_FA_BUDGET="default=3",  # the open service's one tenant
    )
    procs: list[Proc] = []
    try:
        procs.append(
            Proc(
                [redis_server, "--port", str(ports["redis"]), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--maxmemory", "256mb",
                 "--maxmemory-policy", "noeviction"],
                tmp / "redis.log",
            )
        )  # fmt: skip
        procs.append(
            Proc(
                [exporter, f"--redis.addr=redis://127.0.0.1:{ports['redis']}",
                 f"--web.listen-address=127.0.0.1:{ports['exporter']}"],
                tmp / "exporter.log",
            )
        )  # fmt: skip
        procs.append(
            Proc(
                [alertmanager,
                 f"--config.file={DEPLOY / 'alertmanager' / 'alertmanager.yml'}",
                 f"--storage.path={tmp / 'am'}", "--cluster.listen-address=",
                 f"--web.listen-address=127.0.0.1:{ports['am']}"],
                tmp / "alertmanager.log",
            )
        )  # fmt: skip
        for role in ("api", "scorer"):  # the two tiers, as docker-compose.yml runs them
            procs.append(
                Proc(
                    [scjepa, "serve", "--role", role, "--host", "127.0.0.1",
                     "--port", str(ports[role])],
                    tmp / f"{role}.log",
                    env,
                )
            )  # fmt: skip
        base = f"http://127.0.0.1:{ports['api']}"
        for role in ("api", "scorer"):
            url = f"http://127.0.0.1:{ports[role]}/readyz"
            wait_for(lambda u=url: get_json(u)["status"] == "ok", 60, f"{role} ready")
            try:  # the protection is on: a scrape without the key is refused
                urllib.request.urlopen(f"http://127.0.0.1:{ports[role]}/metrics")
                raise AssertionError(f"{role}: /metrics answered without the ops key")
            except urllib.error.HTTPError as e:
                assert e.code == 401, (role, e.code)

        conf = tmp / "prometheus"
        shutil.copytree(PROM_DIR, conf)
        text = (conf / "prometheus.yml").read_text()
        for compose, port in (("api:8000", "api"), ("redis-exporter:9121", "exporter"),
                              ("alertmanager:9093", "am")):  # fmt: skip
            assert f'"{compose}"' in text, compose
            text = text.replace(f'"{compose}"', f'"127.0.0.1:{ports[port]}"')
        text = re.sub(r"(scrape|evaluation)_interval: \S+", r"\1_interval: 1s", text)
        # compose's secret, /run/secrets/ops_key in the Prometheus container
        text = text.replace("/run/secrets/ops_key", str(tmp / "ops_key"))
        config = yaml.safe_load(text)
        jobs = {j["job_name"]: j for j in config["scrape_configs"]}
        for job in ("scjepa-api", "scjepa-scorer"):
            assert jobs[job]["authorization"]["credentials_file"] == str(
                tmp / "ops_key"
            ), job
        # the scorers' DNS discovery (compose's DNS; here the host's resolver would
        # answer): the scorer's address instead; no GPU scorer runs here
        scorer = jobs["scjepa-scorer"]
        assert scorer.pop("dns_sd_configs")[0]["names"] == ["scorer"]
        scorer["static_configs"] = [{"targets": [f"127.0.0.1:{ports['scorer']}"]}]
        del jobs["scjepa-scorer-gpu"]
        config["scrape_configs"] = list(jobs.values())
        (conf / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        for rules in (conf / "rules").glob("*.yml"):
            rules.write_text(
                re.sub(r"\binterval: \S+", "interval: 1s", rules.read_text())
            )
        prom = Proc(
            [
                prometheus,
                f"--config.file={conf / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports['prom']}",
            ],
            tmp / "prometheus.log",
        )
        procs.append(prom)
        prom_url = f"http://127.0.0.1:{ports['prom']}"
        wait_for(
            lambda: (
                urllib.request.urlopen(prom_url + "/-/ready", timeout=2).status == 200
            ),
            60,
            "prometheus ready",
        )
        yield {
            "api": base,
            "scorer": f"http://127.0.0.1:{ports['scorer']}",
            "prom": prom_url,
            "am": f"http://127.0.0.1:{ports['am']}",
            "procs": procs,
        }
    finally:
        for p in reversed(procs):
            p.stop()


def query(prom: str, expr: str) -> list[dict[str, Any]]:
    r = get_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert r["status"] == "success", (expr, r)
    return r["data"]["result"]


def ingest(api: str, stream: str, start: float, n: int, channels: int = 4) -> None:
    body = {
        "stream": stream,
        "readings": [
            {
                "ts": start + i,
                "values": [float((i * (c + 1)) % 7) for c in range(channels)],
            }
            for i in range(n)
        ],
    }
    req = urllib.request.Request(
        api + "/ingest",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def report_incident(api: str, stream: str, start: float) -> str:
    """POST /incidents (always the same id: reported again, it is judged again);
    the outcome."""
    body = {"stream": stream, "start": start, "id": "live-1"}
    req = urllib.request.Request(
        api + "/incidents",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return str(json.load(r)["outcome"])


@pytest.fixture(scope="module")
def fed(live: dict[str, Any]) -> dict[str, Any]:
    """Readings flow until Prometheus has rates and latency percentiles, and an
    incident reported on a stream is judged (warned, late or missed)."""
    api, prom = live["api"], live["prom"]
    t = [0.0]
    judged = [False]

    def feed_and_check() -> bool:
        for stream in ("pump-1", "pump-2"):
            ingest(api, stream, 1_000_000 + t[0], 100)
        t[0] += 100
        ingest(api, "pump-1", 1_000_000, 1)  # late: counted as rejected
        if not judged[0]:  # unscored until its first window is
            outcome = report_incident(api, "pump-1", 1_000_000 + t[0] - 1)
            judged[0] = outcome in ("warned", "late", "missed")
        ok = (
            query(prom, "job:scjepa_readings_accepted:rate1m > 0")
            and query(prom, "job:scjepa_scorer_batch_seconds:p99_5m >= 0")
            and query(prom, "job:redis_memory:used_ratio > 0")
            and query(prom, "tenant:scjepa_incidents_judged:sum30d > 0")
        )
        return bool(ok)

    try:
        wait_for(feed_and_check, 90, "recording rules with data")
    except AssertionError:
        for p in live["procs"]:
            print(p.tail())
        raise
    return live


def test_every_rule_evaluates_without_error(fed: dict[str, Any]) -> None:
    groups = get_json(fed["prom"] + "/api/v1/rules")["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) >= 20
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    alerts = {r["name"]: r for r in rules if r["type"] == "alerting"}
    # a healthy service: no health alert fires (streams in alert are not its health)
    assert not [n for n, r in alerts.items() if r["state"] == "firing"]
    assert alerts["ScjepaApiDown"]["state"] == "inactive"
    assert alerts["ScjepaNoScorerUp"]["state"] == "inactive"
    assert alerts["ScjepaRedisMemoryHigh"]["state"] == "inactive"
    assert alerts["ScjepaInputsUnlikeTraining"]["state"] == "inactive"
    managers = get_json(fed["prom"] + "/api/v1/alertmanagers")["data"]
    assert [a["url"] for a in managers["activeAlertmanagers"]] == [
        fed["am"] + "/api/v2/alerts"
    ]


def test_service_metrics_reach_prometheus(fed: dict[str, Any]) -> None:
    prom = fed["prom"]
    assert query(prom, 'up{job="scjepa-api"} == 1')
    assert query(prom, 'up{job="scjepa-scorer"} == 1')
    assert query(prom, 'up{job="redis"} == 1 and on () redis_up == 1')
    assert query(prom, 'up{job="alertmanager"} == 1')
    # store-wide gauges: both tiers report the same count (the dashboard takes max)
    in_alert = query(prom, "scjepa_streams_in_alert")
    assert {r["metric"]["job"]: float(r["value"][1]) for r in in_alert} == {
        "scjepa-api": 2, "scjepa-scorer": 2}  # fmt: skip
    info = query(prom, "scjepa_inference_info")
    assert {r["metric"]["job"] for r in info} == {"scjepa-api", "scjepa-scorer"}
    assert {r["metric"]["provider"] for r in info} == {"CPUExecutionProvider"}
    # the scorer scores, the api does not; the api counts the readings
    scored = query(prom, "sum by (job) (scjepa_windows_scored_total)")
    by_job = {r["metric"]["job"]: float(r["value"][1]) for r in scored}
    assert by_job["scjepa-scorer"] > 0 and by_job["scjepa-api"] == 0, by_job
    assert query(prom, 'scjepa_scorer_batch_seconds_count{job="scjepa-scorer"} > 0')
    # the monitor: both tiers expose the expected share, the scorer counts (the
    # feed's windows are like the training data: none unlike it)
    share = query(prom, "scjepa_novelty_expected_share")
    assert {(r["metric"]["job"], r["metric"]["level"]) for r in share} == {
        ("scjepa-api", "0.99"), ("scjepa-scorer", "0.99")}  # fmt: skip
    assert {float(r["value"][1]) for r in share} == {NOVELTY.expected_share}
    unlike = query(prom, "sum by (job) (scjepa_windows_unlike_training_total)")
    assert {r["metric"]["job"]: float(r["value"][1]) for r in unlike} == {
        "scjepa-api": 0, "scjepa-scorer": 0}  # fmt: skip
    outcomes = {
        r["metric"]["outcome"] for r in query(prom, "job:scjepa_readings:rate1m")
    }
    assert outcomes == {"accepted", "duplicate", "rejected"}
    routes = {
        r["metric"]["route"]
        for r in query(prom, "job_route:scjepa_http_request_duration_seconds:p99_5m")
    }
    assert "/ingest" in routes
    (memory,) = query(prom, "redis_memory_max_bytes")
    assert float(memory["value"][1]) == 256 * 1024 * 1024
    assert not query(prom, '{__name__=~"scjepa_.*_created"}')  # no _created series


def _dashboard_targets() -> list[tuple[str, str]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for p in json.loads(path.read_text())["panels"]:
            out += [(p["title"], as_queried(t["expr"])) for t in p.get("targets", [])]
    return out


def _recording_rules() -> list[tuple[str, str]]:
    return [
        (r["record"], r["record"])
        for path in sorted((PROM_DIR / "rules").glob("*.yml"))
        for g in load_yaml(path)["groups"]
        for r in g["rules"]
        if "record" in r
    ]


@pytest.mark.parametrize(
    "targets", [_dashboard_targets, _recording_rules], ids=["dashboard", "recording"]
)
def test_every_query_returns_live_data(fed: dict[str, Any], targets: Any) -> None:
    empty = [(where, expr) for where, expr in targets() if not query(fed["prom"], expr)]
    assert not empty, f"queries without data: {empty}"


def test_top_streams_reach_the_dashboard(fed: dict[str, Any]) -> None:
    """scjepa_top_stream_risk from both tiers, one row per stream in the table's
    query (max by tenant, stream), each at or above the threshold (0 here)."""
    prom = fed["prom"]
    jobs = {r["metric"]["job"] for r in query(prom, "scjepa_top_stream_risk")}
    assert jobs == {"scjepa-api", "scjepa-scorer"}
    rows = query(prom, "sort_desc(max by (tenant, stream) (scjepa_top_stream_risk))")
    assert sorted((r["metric"]["tenant"], r["metric"]["stream"]) for r in rows) == [
        ("default", "pump-1"), ("default", "pump-2")]  # fmt: skip
    margin = query(
        prom,
        "max by (tenant, stream) (scjepa_top_stream_risk)"
        " - on () group_left () max(scjepa_alert_threshold)",
    )
    assert len(margin) == 2 and all(float(r["value"][1]) >= 0 for r in margin)


def test_streams_in_alert_reach_alertmanager(fed: dict[str, Any]) -> None:
    """Threshold 0: every scored window is at or above it, so after
    SCJEPA_ALERT_WINDOWS windows each stream has one ScjepaStreamRisk alert."""

    def streams() -> list[str]:
        alerts = get_json(fed["am"] + "/api/v2/alerts")
        return sorted(
            a["labels"]["stream"]
            for a in alerts
            if a["labels"]["alertname"] == "ScjepaStreamRisk"
        )

    assert wait_for(lambda: streams() == ["pump-1", "pump-2"], 30, "stream alerts")
