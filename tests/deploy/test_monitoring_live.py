"""The monitoring chain end to end, without Docker: the real service (`scjepa serve`,
in-memory store, a tiny ONNX artifact) is scraped by a real Prometheus server loaded
with deploy/prometheus (target and intervals shortened). Every recording and alert rule
must evaluate without error, and every query of the dashboard and of the Grafana alert
rules must run and return data from the live service."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.components import require
from support.deploy_helpers import (
    DASHBOARDS,
    PROM_DIR,
    PROVISIONING,
    load_yaml,
)
from support.service_artifact import build_artifact

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
    """The service tests' tiny artifact, every scored stream in alert."""
    build_artifact(directory, threshold=0.0)


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
    tmp = tmp_path_factory.mktemp("live")
    build_tiny_artifact(tmp / "artifact")

    api_port, prom_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    env.update(SCJEPA_ARTIFACT=str(tmp / "artifact"), SCJEPA_MAX_WAIT_MS="1")
    procs: list[Proc] = []
    redis_server = shutil.which("redis-server")
    if redis_server:  # as in compose (store metrics exist only with Redis)
        redis_port = free_port()
        procs.append(
            Proc(
                [redis_server, "--port", str(redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"],
                tmp / "redis.log",
            )
        )  # fmt: skip
        env["SCJEPA_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    try:
        procs.append(
            Proc(
                [scjepa, "serve", "--host", "127.0.0.1", "--port", str(api_port)],
                tmp / "api.log",
                env,
            )
        )
        base = f"http://127.0.0.1:{api_port}"
        wait_for(lambda: get_json(base + "/readyz")["status"] == "ok", 60, "api ready")

        conf = tmp / "prometheus"
        shutil.copytree(PROM_DIR, conf)
        text = (conf / "prometheus.yml").read_text()
        assert '"api:8000"' in text
        text = text.replace('"api:8000"', f'"127.0.0.1:{api_port}"')
        text = re.sub(r"(scrape|evaluation)_interval: \S+", r"\1_interval: 1s", text)
        (conf / "prometheus.yml").write_text(text)
        for rules in (conf / "rules").glob("*.yml"):
            rules.write_text(
                re.sub(r"\binterval: \S+", "interval: 1s", rules.read_text())
            )
        prom = Proc(
            [
                prometheus,
                f"--config.file={conf / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            tmp / "prometheus.log",
        )
        procs.append(prom)
        prom_url = f"http://127.0.0.1:{prom_port}"
        wait_for(
            lambda: (
                urllib.request.urlopen(prom_url + "/-/ready", timeout=2).status == 200
            ),
            60,
            "prometheus ready",
        )
        yield {
            "api": base,
            "prom": prom_url,
            "procs": procs,
            "redis": bool(redis_server),
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


@pytest.fixture(scope="module")
def fed(live: dict[str, Any]) -> dict[str, Any]:
    """Readings flow until Prometheus has rates and latency percentiles."""
    api, prom = live["api"], live["prom"]
    t = [0.0]

    def feed_and_check() -> bool:
        for stream in ("pump-1", "pump-2"):
            ingest(api, stream, 1_000_000 + t[0], 100)
        t[0] += 100
        ingest(api, "pump-1", 1_000_000, 1)  # late: counted as rejected
        ok = query(prom, "job:scjepa_readings_accepted:rate1m > 0") and query(
            prom, "job:scjepa_inference_duration_seconds:p99_5m >= 0"
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
    assert len(rules) >= 10
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    alerts = {r["name"]: r for r in rules if r["type"] == "alerting"}
    # streams are in alert (threshold 0) but `for: 5m` keeps it pending, not firing
    assert alerts["AnomalyRiskHigh"]["state"] == "pending"
    assert alerts["ScjepaApiDown"]["state"] == "inactive"


def test_service_metrics_reach_prometheus(fed: dict[str, Any]) -> None:
    prom = fed["prom"]
    assert query(prom, 'up{job="scjepa-api"} == 1')
    (alerting,) = query(prom, "sum(scjepa_streams_in_alert)")
    assert float(alerting["value"][1]) == 2
    (info,) = query(prom, "scjepa_inference_info")
    assert info["metric"]["provider"] == "CPUExecutionProvider"
    outcomes = {
        r["metric"]["outcome"] for r in query(prom, "job:scjepa_readings:rate1m")
    }
    assert outcomes == {"accepted", "duplicate", "rejected"}
    routes = {
        r["metric"]["route"]
        for r in query(prom, "job_route:scjepa_http_request_duration_seconds:p99_5m")
    }
    assert "/ingest" in routes


def _dashboard_targets() -> list[tuple[str, str]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for p in json.loads(path.read_text())["panels"]:
            out += [(p["title"], t["expr"]) for t in p.get("targets", [])]
    return out


def _alert_targets() -> list[tuple[str, str]]:
    doc = load_yaml(PROVISIONING / "alerting" / "rules.yml")
    return [
        (r["uid"], q["model"]["expr"])
        for g in doc["groups"]
        for r in g["rules"]
        for q in r["data"]
        if "expr" in q["model"]
    ]


@pytest.mark.parametrize(
    "targets", [_dashboard_targets, _alert_targets], ids=["dashboard", "grafana-alerts"]
)
def test_every_query_returns_live_data(fed: dict[str, Any], targets: Any) -> None:
    empty = [
        (where, expr)
        for where, expr in targets()
        if not query(fed["prom"], expr)
        and (fed["redis"] or "scjepa_store_duration" not in expr)
    ]
    assert not empty, f"queries without data: {empty}"
