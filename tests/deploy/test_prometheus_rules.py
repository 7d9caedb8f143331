"""Prometheus config and rules, validated by promtool: `check config` (which also checks
the rule files it loads), `check rules`, and `test rules` (unit tests of the alerts in
deploy/prometheus/tests/). Every metric the rules use must be one service/metrics.py
exports, so a renamed metric cannot silently empty a rule. One alert engine: these
rules (health) and the service's own per-stream alerts, both routed by Alertmanager;
no store-wide risk alert, and no second copy of the rules in Grafana."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.deploy_helpers import (
    PROM_DIR,
    explain,
    exported_metric_names,
    load_yaml,
    recorded_names,
    referenced_metrics,
    referenced_recorded,
    require_tool,
    run_tool,
)

RULE_FILES = sorted((PROM_DIR / "rules").glob("*.yml"))
TEST_FILES = sorted((PROM_DIR / "tests").glob("*.yml"))
REQUIRED_ALERTS = {
    "ScjepaApiDown",
    "ScjepaScorerDown",
    "ScjepaNoScorerUp",
    "ScjepaHttp5xxRatio",
    "ScjepaStoreErrors",
    "ScjepaWindowsShed",
    "ScjepaScoringLag",
    "ScjepaScorerSlow",
    "ScjepaRedisMemoryHigh",
    "ScjepaRedisDown",
    "ScjepaAlertPostsFailing",
    "ScjepaInputsUnlikeTraining",
    "ReadingsRejectedSpike",
    "NoReadingsIngested",
}
# what the health alerts read that the service does not export (redis_exporter's)
EXPORTER_METRICS = {"redis_memory_used_bytes", "redis_memory_max_bytes", "redis_up"}


def all_rules() -> list[dict[str, Any]]:
    return [
        rule
        for path in RULE_FILES
        for group in load_yaml(path)["groups"]
        for rule in group["rules"]
    ]


def test_there_are_rule_and_test_files() -> None:
    assert RULE_FILES and TEST_FILES


# --- promtool


OPS_KEY_FILE = (
    "/run/secrets/ops_key"  # compose's ops_key secret in the Prometheus container
)


def checkable_copy(tmp_path: Path, text: str | None = None) -> Path:
    """deploy/prometheus in ``tmp_path`` with the ops key's credentials_file (a compose
    secret, absent here; `promtool check config` wants every referenced file) pointing
    at a key file in ``tmp_path``: the full check, rule files included."""
    dest = tmp_path / "prometheus"
    shutil.copytree(PROM_DIR, dest)
    (tmp_path / "ops_key").write_text("0" * 48 + "\n")
    text = (PROM_DIR / "prometheus.yml").read_text() if text is None else text
    assert OPS_KEY_FILE in text
    conf = dest / "prometheus.yml"
    conf.write_text(text.replace(OPS_KEY_FILE, str(tmp_path / "ops_key")))
    return conf


def test_promtool_check_config(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    proc = run_tool(promtool, "check", "config", "--syntax-only",
                    PROM_DIR / "prometheus.yml")  # fmt: skip
    assert proc.returncode == 0, explain(proc)
    proc = run_tool(promtool, "check", "config", checkable_copy(tmp_path))
    assert proc.returncode == 0, explain(proc)
    # the rule_files glob must pick up every rule file (a wrong glob checks nothing)
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in proc.stdout, proc.stdout


def test_promtool_check_rules() -> None:
    promtool = require_tool("promtool")
    proc = run_tool(promtool, "check", "rules", *RULE_FILES)
    assert proc.returncode == 0, explain(proc)


def test_promtool_test_rules() -> None:
    promtool = require_tool("promtool")
    proc = run_tool(promtool, "test", "rules", *TEST_FILES)
    assert proc.returncode == 0, explain(proc)
    assert "SUCCESS" in proc.stdout


def _recorded_value(
    promtool: Path, tmp_path: Path, test: dict[str, Any], expr: str, minute: int
) -> str:
    """What promtool computes for the recorded series ``expr`` at ``minute`` on the
    input series of ``test`` (read from a deliberately failing expectation)."""
    probe = {
        "rule_files": [str(PROM_DIR / "rules" / "recording.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": test["interval"],
                "input_series": test["input_series"],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": f"{minute}m",
                        "exp_samples": [{"labels": "never", "value": -1}],
                    }
                ],
            }
        ],
    }
    path = tmp_path / f"probe-{minute}.yml"
    path.write_text(yaml.safe_dump(probe))
    proc = run_tool(promtool, "test", "rules", path)
    got = re.search(r"got:(.*)", proc.stderr)
    assert got, explain(proc)
    return got.group(1).strip()


def test_alert_values_do_not_depend_on_the_order_of_rule_groups(tmp_path: Path) -> None:
    """An alert on a recording rule reads the rule's value from this evaluation or the
    one before (promtool, like Prometheus, may run the two files' groups in either
    order): where a unit test checks an annotation that prints the value, the value
    must be the same at both, or the test passes or fails by chance (it did: 0.8/s
    against 1/s, ScjepaStoreErrors at 11m)."""
    promtool = require_tool("promtool")
    exprs = {r["alert"]: r["expr"] for r in all_rules() if "alert" in r}
    checked = 0
    for path in TEST_FILES:
        for test in load_yaml(path)["tests"]:
            for case in test.get("alert_rule_test", []):
                shown = [
                    a for a in case.get("exp_alerts") or [] if a.get("exp_annotations")
                ]
                recorded = re.match(r"(\w*:[\w:]+)", exprs[case["alertname"]])
                if not shown or recorded is None:
                    continue
                minute = int(str(case["eval_time"]).removesuffix("m"))
                before, now = (
                    _recorded_value(promtool, tmp_path, test, recorded[1], m)
                    for m in (minute - 1, minute)
                )
                assert before == now, (case["alertname"], minute, before, now)
                checked += 1
    assert checked >= 5, checked


def test_promtool_check_config_rejects_a_broken_config(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    text = (PROM_DIR / "prometheus.yml").read_text()
    assert "scrape_interval: 15s" in text
    bad = checkable_copy(
        tmp_path, text.replace("scrape_interval: 15s", "scrape_interval: fast", 1)
    )
    proc = run_tool(promtool, "check", "config", bad)
    assert proc.returncode != 0, explain(proc)
    assert "fast" in proc.stdout + proc.stderr, explain(proc)  # refused for that


@pytest.mark.parametrize(
    "rule",
    [
        {"alert": "Broken", "expr": "sum by (job (scjepa_streams_in_alert)"},
        {"alert": "Broken", "expr": "scjepa_max_risk > 0", "for": "five minutes"},
        {"record": "not a metric name", "expr": "sum(scjepa_max_risk)"},
    ],
    ids=["bad-promql", "bad-duration", "bad-record-name"],
)
def test_promtool_check_rules_rejects_broken_rules(
    tmp_path: Path, rule: dict[str, Any]
) -> None:
    promtool = require_tool("promtool")
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [rule]}]}))
    proc = run_tool(promtool, "check", "rules", bad)
    assert proc.returncode != 0, explain(proc)


def _down_at_5m() -> list[dict[str, Any]]:
    """The expected ScjepaApiDown alert at 5m, taken from the committed unit test (the
    api's scrape fails from minute 4 on; `for: 1m`)."""
    (case,) = [
        c
        for c in load_yaml(PROM_DIR / "tests" / "alerts_test.yml")["tests"]
        if any(t["alertname"] == "ScjepaApiDown" for t in c.get("alert_rule_test", []))
    ]
    (check,) = [
        t
        for t in case["alert_rule_test"]
        if t["alertname"] == "ScjepaApiDown" and t["eval_time"] == "5m"
    ]
    assert check["exp_alerts"], "the committed test expects the alert at 5m"
    return check["exp_alerts"]


def _unit_test(tmp_path: Path, eval_time: str, firing: bool) -> Any:
    """A promtool unit test of ScjepaApiDown on the real rule files: scrapes fail from
    minute 4 on, asserted firing (or not) at ``eval_time``."""
    case = {
        "rule_files": [str(p) for p in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": 'up{job="scjepa-api", instance="api:8000"}',
                        "values": "1x3 0x5",
                    }
                ],
                "alert_rule_test": [
                    {
                        "eval_time": eval_time,
                        "alertname": "ScjepaApiDown",
                        "exp_alerts": _down_at_5m() if firing else [],
                    }
                ],
            }
        ],
    }
    path = tmp_path / f"case_{eval_time}_{firing}.yml"
    path.write_text(yaml.safe_dump(case))
    return run_tool(require_tool("promtool"), "test", "rules", path)


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    """The unit-test machinery really evaluates the rule's timing: the same expectation
    passes at 5m (control) but fails one minute early (4m, still pending), and
    claiming silence at 5m fails too."""
    control = _unit_test(tmp_path, "5m", firing=True)
    assert control.returncode == 0, explain(control)
    early = _unit_test(tmp_path, "4m", firing=True)
    assert early.returncode != 0, explain(early)
    assert "FAILED" in early.stdout + early.stderr
    silent = _unit_test(tmp_path, "5m", firing=False)
    assert silent.returncode != 0, explain(silent)
    quiet_before = _unit_test(tmp_path, "4m", firing=False)
    assert quiet_before.returncode == 0, explain(quiet_before)


# --- structure


def test_required_alerts_exist_with_severity_and_summary() -> None:
    alerts = {r["alert"]: r for r in all_rules() if "alert" in r}
    assert set(alerts) >= REQUIRED_ALERTS, sorted(REQUIRED_ALERTS - set(alerts))
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"], name
        assert rule["annotations"]["description"], name
    assert "up" in alerts["ScjepaApiDown"]["expr"]


def test_no_store_wide_risk_alert() -> None:
    """A stream's risk is alerted per stream by the service (service/alerting.py):
    a rule on the store-wide gauges could not say which stream."""
    for rule in all_rules():
        if "alert" in rule:
            assert "scjepa_streams_in_alert" not in rule["expr"], rule["alert"]
            assert "scjepa_max_risk" not in rule["expr"], rule["alert"]


def test_every_alert_rule_is_unit_tested() -> None:
    tested = set()
    for path in TEST_FILES:
        for case in load_yaml(path)["tests"]:
            tested.update(t["alertname"] for t in case.get("alert_rule_test", []))
    assert tested >= REQUIRED_ALERTS, sorted(REQUIRED_ALERTS - tested)


def test_rules_use_only_exported_metrics_and_known_recordings() -> None:
    exported = exported_metric_names()
    assert "scjepa_readings_total" in exported  # prometheus_client's counter suffix
    assert "scjepa_inference_info" in exported
    recorded = recorded_names()
    exporter = set()
    for rule in all_rules():
        expr = rule["expr"]
        exporter |= set(re.findall(r"\bredis_[a-z_]+", expr)) - {"redis_memory"}
        unknown = referenced_metrics(expr) - exported
        assert not unknown, f"{rule.get('alert') or rule.get('record')}: {unknown}"
        missing = referenced_recorded(expr) - recorded
        assert not missing, f"{rule.get('alert') or rule.get('record')}: {missing}"
    assert exporter == EXPORTER_METRICS, exporter


def test_the_metric_check_catches_a_renamed_metric() -> None:
    assert (
        referenced_metrics("rate(scjepa_reading_total[1m])") - exported_metric_names()
    )
    assert not referenced_metrics("job:scjepa_readings:rate1m")


def test_service_scrapes_send_the_ops_key() -> None:
    """Every job scraping `scjepa serve` sends the stack's ops key (compose's ops_key
    secret, which docker-compose.yml gives the prometheus service), so a /metrics
    behind SCJEPA_OPS_KEY_ROUTES is still scraped: a 401 would make `up` 0, fire
    ScjepaApiDown and ScjepaNoScorerUp, and inhibit every stream alert."""
    config = load_yaml(PROM_DIR / "prometheus.yml")
    jobs = [j for j in config["scrape_configs"] if j["job_name"].startswith("scjepa")]
    assert {j["job_name"] for j in jobs} == {
        "scjepa-api", "scjepa-scorer", "scjepa-scorer-gpu"}  # fmt: skip
    for job in jobs:
        auth = job.get("authorization")
        assert auth == {"type": "Bearer", "credentials_file": OPS_KEY_FILE}, job
    compose = load_yaml(PROM_DIR.parents[1] / "docker-compose.yml")
    assert "ops_key" in compose["services"]["prometheus"]["secrets"]
    for job in config["scrape_configs"]:  # the others' endpoints take no such key
        if not job["job_name"].startswith("scjepa"):
            assert "authorization" not in job, job["job_name"]


def test_scrape_config_targets_the_compose_api_and_scorers() -> None:
    config = load_yaml(PROM_DIR / "prometheus.yml")
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    api = jobs["scjepa-api"]
    assert api.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in api["static_configs"] for t in sc["targets"]]
    assert targets == ["api:8000"]
    # the scorers by DNS (one target per `--scale` replica; none without the gpu
    # profile), on the port their compose command serves (test_compose.py)
    for job, name in (("scjepa-scorer", "scorer"), ("scjepa-scorer-gpu", "scorer-gpu")):
        assert jobs[job].get("metrics_path", "/metrics") == "/metrics"
        (sd,) = jobs[job]["dns_sd_configs"]
        assert (sd["names"], sd["type"], sd["port"]) == ([name], "A", 8001), job
    assert "scjepa-api-gpu" not in jobs  # the api runs no inference: no GPU api
    assert config["rule_files"] == ["rules/*.yml"]
    (am,) = config["alerting"]["alertmanagers"]
    assert am["static_configs"][0]["targets"] == ["alertmanager:9093"]
    assert jobs["redis"]["static_configs"][0]["targets"] == ["redis-exporter:9121"]


def test_shed_alert_names_every_reason() -> None:
    """ScjepaWindowsShed fires on any `reason` of scjepa_windows_shed_total: its
    description names each one the service exports (backpressure, layout, invalid)."""
    from service import metrics

    reasons = {
        s.labels["reason"]
        for family in metrics.WINDOWS_SHED.collect()
        for s in family.samples
    }
    assert {"backpressure", "layout"} <= reasons
    (rule,) = [r for r in all_rules() if r.get("alert") == "ScjepaWindowsShed"]
    text = rule["annotations"]["description"]
    missing = sorted(r for r in reasons if not re.search(rf"\b{r}\b", text))
    assert not missing, f"ScjepaWindowsShed's description omits {missing}"
