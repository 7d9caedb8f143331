"""Grafana provisioning and dashboards: every file validated against a JSON Schema of its
format (grafana_schemas.py), cross-references checked (the fixed datasource uid in every
panel and query; the dashboards folder mounted where the provider reads it), and every
PromQL expression parsed by promtool and checked against the metrics the service
exports. Grafana only shows: it provisions no alert rules or contact points (the one
alert engine is Prometheus + Alertmanager, tests/deploy/test_prometheus_rules.py)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import grafana_schemas as schemas
from support.components import require
from support.deploy_helpers import (
    COMPOSE_FILE,
    DASHBOARDS,
    DATASOURCE_UID,
    PROM_DIR,
    PROVISIONING,
    as_queried,
    check_promql,
    exported_metric_names,
    load_yaml,
    recorded_names,
    referenced_metrics,
    referenced_recorded,
    require_tool,
)

require("jsonschema", "validates the Grafana files against their schemas")
import jsonschema  # noqa: E402

DASHBOARD_FILES = sorted(DASHBOARDS.glob("*.json"))


def validate(doc: Any, schema: dict[str, Any]) -> list[str]:
    v = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in v.iter_errors(doc)
    ]


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in DASHBOARD_FILES}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows
    return out


# --- schemas


SCHEMA_OF_KEY = {
    "datasources": schemas.DATASOURCES,
    "providers": schemas.DASHBOARD_PROVIDERS,
}


def provisioning_files() -> list[Path]:
    return sorted(PROVISIONING.glob("*/*.yml")) + sorted(PROVISIONING.glob("*/*.yaml"))


def test_provisioning_folders_are_populated() -> None:
    for folder in ("datasources", "dashboards"):
        assert list((PROVISIONING / folder).glob("*.yml")), folder
    assert DASHBOARD_FILES


def test_grafana_provisions_no_alerting() -> None:
    """One alert engine: Grafana carries no copy of the rules, no contact points."""
    assert not (PROVISIONING / "alerting").exists()
    env = load_yaml(COMPOSE_FILE)["services"]["grafana"]["environment"]
    assert env.get("GF_UNIFIED_ALERTING_ENABLED") == "false"


@pytest.mark.parametrize(
    "path", provisioning_files(), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_provisioning_file_matches_its_schema(path: Path) -> None:
    doc = load_yaml(path)
    keys = [k for k in SCHEMA_OF_KEY if k in doc]
    assert keys, f"{path}: no known provisioning section"
    for key in keys:
        errors = validate(doc, SCHEMA_OF_KEY[key])
        assert not errors, f"{path}:\n" + "\n".join(errors)


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_dashboard_matches_its_schema(path: Path) -> None:
    errors = validate(json.loads(path.read_text()), schemas.DASHBOARD)
    assert not errors, f"{path}:\n" + "\n".join(errors)


def _drop_panel_datasource(d: dict[str, Any]) -> None:
    del next(p for p in d["panels"] if p["type"] != "row")["datasource"]


def _empty_targets(d: dict[str, Any]) -> None:
    next(p for p in d["panels"] if p["type"] != "row")["targets"] = []


def _variable_without_query(d: dict[str, Any]) -> None:
    del d["templating"]["list"][0]["query"]


@pytest.mark.parametrize(
    "mutate",
    [_drop_panel_datasource, _empty_targets, _variable_without_query],
    ids=["no-datasource", "no-query", "variable-without-query"],
)
def test_dashboard_schema_rejects_broken_panels(mutate: Any) -> None:
    dash = copy.deepcopy(next(iter(dashboards().values())))
    mutate(dash)
    assert validate(dash, schemas.DASHBOARD)


# --- the fixed datasource uid


def test_datasource_has_the_fixed_uid_and_points_at_compose_prometheus() -> None:
    (ds,) = load_yaml(PROVISIONING / "datasources" / "prometheus.yml")["datasources"]
    assert ds["uid"] == DATASOURCE_UID
    assert ds["type"] == "prometheus"
    compose = load_yaml(COMPOSE_FILE)
    assert "prometheus" in compose["services"]
    assert ds["url"] == "http://prometheus:9090"


def foreign_datasources(dashboard: dict[str, Any]) -> list[str]:
    """Panels and queries whose datasource is not the provisioned one."""
    bad = []
    for p in panels(dashboard):
        if p["type"] == "row":
            continue
        refs = [("panel", p.get("datasource"))] + [
            (f"target {t.get('refId')}", t.get("datasource"))
            for t in p.get("targets", [])
        ]
        for where, ref in refs:
            if not isinstance(ref, dict) or ref.get("uid") != DATASOURCE_UID:
                bad.append(f"{p['title']!r} {where}: {ref}")
    return bad


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_every_panel_uses_the_provisioned_datasource(path: Path) -> None:
    dash = json.loads(path.read_text())
    assert not foreign_datasources(dash)
    broken = copy.deepcopy(dash)
    next(p for p in broken["panels"] if p["type"] != "row")["datasource"]["uid"] = (
        "other"
    )
    assert foreign_datasources(broken), "the check must catch a foreign uid"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_dashboard_layout_is_sane(path: Path) -> None:
    dash = json.loads(path.read_text())
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(dash):
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]


def test_dashboards_are_mounted_where_the_provider_reads_them() -> None:
    (provider,) = load_yaml(PROVISIONING / "dashboards" / "scjepa.yml")["providers"]
    grafana = load_yaml(COMPOSE_FILE)["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"] if v.startswith("./"))
    assert mounts["./deploy/grafana/dashboards"] == provider["options"]["path"]
    home = grafana["environment"].get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        assert home.startswith(provider["options"]["path"] + "/")
        assert (DASHBOARDS / Path(home).name).is_file()


# --- PromQL: parses, and names only metrics that exist


def dashboard_exprs() -> dict[str, str]:
    """Every panel query as Grafana sends it (every tenant selected)."""
    return {
        f"{name} {p['title']} {t['refId']}": as_queried(t["expr"])
        for name, d in dashboards().items()
        for p in panels(d)
        for t in p.get("targets", [])
    }


def test_per_tenant_panels_follow_the_tenant_variable() -> None:
    """The dashboard's $tenant variable (every tenant by default) lists the tenants
    from a series every tenant has from start-up, and every query of a per-tenant
    series (labelled by tenant) filters on it."""
    dash = dashboards()["scjepa-overview.json"]
    (var,) = dash["templating"]["list"]
    assert var["name"] == "tenant" and var["includeAll"] and var["multi"]
    assert var["allValue"] == ".*" and var["current"]["value"] == ["$__all"]
    assert var["query"]["query"] == "label_values(scjepa_windows_scored_total, tenant)"
    by_tenant = [
        t["expr"]
        for p in panels(dash)
        for t in p.get("targets", [])
        if re.search(r"by \(tenant|\btenant:", t["expr"])
    ]
    assert len(by_tenant) >= 10
    unfiltered = [e for e in by_tenant if 'tenant=~"$tenant"' not in e]
    assert not unfiltered, unfiltered


def test_every_expr_parses(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    exprs = dashboard_exprs()
    assert exprs
    check_promql(promtool, exprs, tmp_path)


def test_a_broken_expr_fails_the_parse_check(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    with pytest.raises(AssertionError, match="does not parse"):
        check_promql(promtool, {"bad": "sum(rate(scjepa_readings_total[1m])"}, tmp_path)


def test_exprs_use_exported_metrics_and_known_recordings() -> None:
    exported, recorded = exported_metric_names(), recorded_names()
    for where, expr in dashboard_exprs().items():
        assert not referenced_metrics(expr) - exported, f"{where}: {expr}"
        assert not referenced_recorded(expr) - recorded, f"{where}: {expr}"


def _metrics_behind(expr: str) -> set[str]:
    """Metrics an expression reads, through the recording rules it uses."""
    rules = {
        r["record"]: r["expr"]
        for p in sorted((PROM_DIR / "rules").glob("*.yml"))
        for g in load_yaml(p)["groups"]
        for r in g["rules"]
        if "record" in r
    }
    found = referenced_metrics(expr)
    for name in referenced_recorded(expr):
        found |= referenced_metrics(rules[name])
    return {re.sub(r"_(total|bucket|sum|count|info)$", "", m) for m in found}


def test_dashboard_shows_what_operators_need() -> None:
    shown: set[str] = set()
    for expr in dashboard_exprs().values():
        shown |= _metrics_behind(expr)
    required = {
        "scjepa_readings",  # ingest rate and readings by outcome
        "scjepa_scorer_batch_seconds",  # scorer batch time percentiles
        "scjepa_inference_batch_size",
        "scjepa_work_queue_depth",  # scoring lag
        "scjepa_work_queue_oldest_age_seconds",
        "scjepa_alert_posts",  # stream alerts reaching Alertmanager
        "scjepa_streams_in_alert",
        "scjepa_tenant_streams_in_alert",  # whose streams are in alert
        "scjepa_tenant_max_risk",  # how near each tenant is to paging
        "scjepa_max_risk",
        "scjepa_top_stream_risk",  # which streams are at risk
        "scjepa_alert_threshold",  # drawn against max risk
        "scjepa_http_request_duration_seconds",  # request latency by route
        "scjepa_inference",  # provider in use (the info metric)
        "scjepa_windows_unlike_training",  # the input-drift monitor, against
        "scjepa_novelty_expected_share",  # the share its calibration expects
        "scjepa_top_stream_novelty",  # and which streams drifted
        "scjepa_tenant_incidents",  # the incidents reported: how many were warned of
        "scjepa_alert_evaluated_warned_rate",  # against the evaluation's share
    }
    assert required <= shown, sorted(required - shown)
    legends = " ".join(
        t.get("legendFormat", "")
        for d in dashboards().values()
        for p in panels(d)
        for t in p.get("targets", [])
    )
    # Redis memory (redis_exporter, through the recording rule)
    assert any("job:redis_memory:used_ratio" in e for e in dashboard_exprs().values())
    assert (
        "{{provider}}" in legends
        and "{{route}}" in legends
        and "{{outcome}}" in legends
    )


def test_batch_size_p95_is_a_whole_number_of_windows() -> None:
    """histogram_quantile alone reads 0.95 when every batch had one window: the panel
    shows the recording rule that rounds it up (unit-tested in alerts_test.yml)."""
    (panel,) = [
        p
        for d in dashboards().values()
        for p in panels(d)
        if p["title"].startswith("Batch size")
    ]
    exprs = [t["expr"] for t in panel["targets"]]
    assert "max(job:scjepa_inference_batch_size:p95_5m)" in exprs
    assert not any(e.startswith("histogram_quantile") for e in exprs)


def test_streams_at_highest_risk_are_listed_against_the_threshold() -> None:
    """The operator paged sees WHICH streams: a table of the top streams (stream,
    tenant, risk, risk - threshold), one row per tenant/stream whatever the number
    of processes scraped (max by), highest risk first, instant (what is at risk now);
    and their risk over time against the threshold."""
    by_title = {p["title"]: p for d in dashboards().values() for p in panels(d)}
    table = by_title["Streams at highest risk"]
    assert table["type"] == "table"
    top = 'max by (tenant, stream) (scjepa_top_stream_risk{tenant=~"$tenant"})'
    exprs = {t["refId"]: t["expr"] for t in table["targets"]}
    # each stream against its tenant's own threshold (SCJEPA_TENANT_FA_BUDGET), else
    # the model's
    own = 'max by (tenant) (scjepa_tenant_alert_threshold{tenant=~"$tenant"})'
    every = (
        'max by (tenant) (scjepa_top_stream_risk{tenant=~"$tenant"}) * 0'
        " + on () group_left () max(scjepa_alert_threshold)"
    )
    assert exprs == {
        "A": f"sort_desc({top})",
        "B": f"{top} - on (tenant) group_left () ({own} or on (tenant) ({every}))",
    }
    for target in table["targets"]:
        assert target["instant"] and target["format"] == "table", target
    steps = [t["id"] for t in table["transformations"]]
    assert steps == ["merge", "organize"]
    organize = table["transformations"][1]["options"]
    columns = sorted(organize["indexByName"], key=organize["indexByName"].get)
    names = [organize["renameByName"].get(c, c) for c in columns]
    assert names == ["stream", "tenant", "risk", "risk - threshold"]
    assert organize["excludeByName"] == {"Time": True}
    assert table["options"]["sortBy"] == [{"displayName": "risk", "desc": True}]
    (margin,) = [
        o
        for o in table["fieldConfig"]["overrides"]
        if o["matcher"]["options"] == "risk - threshold"
    ]
    props = {p["id"]: p["value"] for p in margin["properties"]}
    assert props["thresholds"]["steps"] == [
        {"color": "green", "value": None},
        {"color": "red", "value": 0},  # at the threshold: alert
    ]
    assert props["custom.cellOptions"]["type"] == "color-background"

    (series,) = [
        p
        for p in by_title.values()
        if p["type"] == "timeseries" and any(top == t["expr"] for t in p["targets"])
    ]
    legends = {t["expr"]: t.get("legendFormat") for t in series["targets"]}
    assert legends[top] == "{{stream}} ({{tenant}})"
    assert "max(scjepa_alert_threshold)" in legends
    assert legends[own] == "{{tenant}}'s own alert threshold"


def test_streams_least_like_the_training_data_are_listed_beside_the_drift() -> None:
    """ScjepaInputsUnlikeTraining names a tenant; the operator it warns sees WHICH
    streams look unlike the training data: a table of the top streams by recent
    novelty (stream, tenant, recent novelty), one row per tenant/stream whatever the
    number of processes scraped, highest first, instant, in the row of the drift
    panels (the alert's description points to it)."""
    dash = next(iter(dashboards().values()))
    by_title = {p["title"]: p for p in panels(dash)}
    table = by_title["Streams least like the training data"]
    assert table["type"] == "table"
    (target,) = table["targets"]
    top = 'max by (tenant, stream) (scjepa_top_stream_novelty{tenant=~"$tenant"})'
    assert target["expr"] == f"sort_desc({top})"
    assert target["instant"] and target["format"] == "table", target
    (organize,) = table["transformations"]
    options = organize["options"]
    columns = sorted(options["indexByName"], key=options["indexByName"].get)
    names = [options["renameByName"].get(c, c) for c in columns]
    assert names == ["stream", "tenant", "recent novelty"]
    assert table["options"]["sortBy"] == [
        {"displayName": "recent novelty", "desc": True}
    ]
    row = {
        p["title"]: p["gridPos"]["y"]
        for p in panels(dash)
        if p["title"]
        in (
            "Windows unlike the training data",
            "Mean novelty of the scored windows",
            "Streams least like the training data",
        )
    }
    assert len(set(row.values())) == 1, row  # side by side
    rules = load_yaml(PROM_DIR / "rules" / "alerts.yml")["groups"]
    (alert,) = [
        r
        for g in rules
        for r in g["rules"]
        if r.get("alert") == "ScjepaInputsUnlikeTraining"
    ]
    assert table["title"] in alert["annotations"]["description"]


def test_each_tenant_has_its_own_volume_and_drift() -> None:
    """Who sends what (capacity, quotas, a noisy neighbour) and whose streams drifted:
    one line per tenant, from the per-tenant recording rules the drift alert reads
    too, so that the panel shows the figure the alert fired on."""
    dash = next(iter(dashboards().values()))
    by_title = {p["title"]: p for p in panels(dash)}
    (volume,) = by_title["Accepted readings by tenant"]["targets"]
    assert "tenant:scjepa_readings_accepted:rate5m" in volume["expr"]
    assert volume["legendFormat"] == "{{tenant}}"
    drift = by_title["Windows unlike the training data"]["targets"][0]
    rule = "tenant:scjepa_windows_unlike_training:ratio1h"
    assert drift["expr"] == rule + '{tenant=~"$tenant"}'  # the tenants selected
    assert "{{tenant}}" in drift["legendFormat"]
    rules = load_yaml(PROM_DIR / "rules" / "alerts.yml")["groups"]
    (alert,) = [
        r
        for g in rules
        for r in g["rules"]
        if r.get("alert") == "ScjepaInputsUnlikeTraining"
    ]
    assert rule in alert["expr"]
    assert "{{ $labels.tenant }}" in alert["annotations"]["summary"]
