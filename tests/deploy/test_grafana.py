"""Grafana provisioning and dashboards: every file validated against a JSON Schema of its
format (grafana_schemas.py), cross-references checked (the fixed datasource uid in every
panel, query and alert rule; contact points named by the policy tree; the dashboards
folder mounted where the provider reads it), and every PromQL expression parsed by
promtool and checked against the metrics service/metrics.py exports."""

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
ALERTING_FILES = sorted((PROVISIONING / "alerting").glob("*.yml"))


def validate(doc: Any, schema: dict[str, Any]) -> list[str]:
    v = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in v.iter_errors(doc)
    ]


def alerting_doc(key: str) -> dict[str, Any]:
    docs = [d for d in map(load_yaml, ALERTING_FILES) if key in d]
    assert len(docs) == 1, f"expected one alerting file with {key!r}"
    return docs[0]


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in DASHBOARD_FILES}


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in alerting_doc("groups")["groups"] for r in g["rules"]]


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
    "groups": schemas.ALERT_RULES,
    "contactPoints": schemas.CONTACT_POINTS,
    "policies": schemas.POLICIES,
}


def provisioning_files() -> list[Path]:
    return sorted(PROVISIONING.glob("*/*.yml")) + sorted(PROVISIONING.glob("*/*.yaml"))


def test_provisioning_folders_are_populated() -> None:
    for folder in ("datasources", "dashboards", "alerting"):
        assert list((PROVISIONING / folder).glob("*.yml")), folder
    assert DASHBOARD_FILES


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


@pytest.mark.parametrize(
    "mutate",
    [_drop_panel_datasource, _empty_targets],
    ids=["no-datasource", "no-query"],
)
def test_dashboard_schema_rejects_broken_panels(mutate: Any) -> None:
    dash = copy.deepcopy(next(iter(dashboards().values())))
    mutate(dash)
    assert validate(dash, schemas.DASHBOARD)


def _rule(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["groups"][0]["rules"][0]


@pytest.mark.parametrize(
    ("key", "mutate"),
    [
        ("groups", lambda d: _rule(d).pop("condition")),
        ("groups", lambda d: _rule(d).update({"for": "five minutes"})),
        ("groups", lambda d: _rule(d).update({"noDataState": "Maybe"})),
        (
            "contactPoints",
            lambda d: d["contactPoints"][0]["receivers"][0]["settings"].pop("url"),
        ),
        ("policies", lambda d: d["policies"][0].pop("receiver")),
    ],
    ids=[
        "no-condition",
        "bad-for",
        "bad-nodata-state",
        "webhook-without-url",
        "no-receiver",
    ],
)
def test_alerting_schemas_reject_broken_files(key: str, mutate: Any) -> None:
    doc = copy.deepcopy(alerting_doc(key))
    assert not validate(doc, SCHEMA_OF_KEY[key])
    mutate(doc)
    assert validate(doc, SCHEMA_OF_KEY[key])


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


def test_alert_rules_use_the_provisioned_datasource_and_valid_refs() -> None:
    uids = [r["uid"] for r in alert_rules()]
    assert len(uids) == len(set(uids)), "alert rule uids must be unique"
    dash_uids = {d["uid"] for d in dashboards().values()}
    for r in alert_rules():
        refs = [q["refId"] for q in r["data"]]
        assert r["condition"] in refs, r["uid"]
        for i, q in enumerate(r["data"]):
            assert q["model"]["refId"] == q["refId"], r["uid"]
            if q["datasourceUid"] == "__expr__":
                src = q["model"]["expression"]
                assert src in refs[:i], f"{r['uid']}: {q['refId']} reads unknown {src}"
            else:
                assert q["datasourceUid"] == DATASOURCE_UID, r["uid"]
                assert q["model"]["expr"], r["uid"]
        assert not env_expanded_dollars(r), r["uid"]
        dash = r["annotations"].get("__dashboardUid__")
        assert dash is None or dash in dash_uids, r["uid"]


def env_expanded_dollars(rule: dict[str, Any]) -> list[str]:
    """Strings Grafana's provisioning would expand as environment variables: `$` in any
    plain field (title, labels, condition, ...), `${` in annotations; query models are
    taken raw."""
    found: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k != "model":
                    walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
        elif isinstance(value, str):
            annotation = ".annotations." in where
            if ("${" in value) if annotation else ("$" in value):
                found.append(f"{where}: {value}")

    walk(rule, "rule")
    return found


def test_the_dollar_check_catches_expanded_fields() -> None:
    rule = copy.deepcopy(alert_rules()[0])
    assert not env_expanded_dollars(rule)
    rule["labels"]["team"] = "{{ $labels.job }}"
    rule["annotations"]["runbook"] = "${RUNBOOK_URL}"
    assert len(env_expanded_dollars(rule)) == 2


def test_alert_rules_cover_risk_and_health() -> None:
    exprs = " ".join(
        q["model"].get("expr", "") for r in alert_rules() for q in r["data"]
    )
    for needed in ("scjepa_streams_in_alert", "scjepa_max_risk", "up{"):
        assert needed in exprs, needed
    risk = next(r for r in alert_rules() if "scjepa_streams_in_alert" in str(r["data"]))
    assert risk["for"] not in ("0s", "0m"), "risk alert must hold for N minutes"


def _receivers(route: dict[str, Any]) -> set[str]:
    out = {route["receiver"]} if "receiver" in route else set()
    for child in route.get("routes", []):
        out |= _receivers(child)
    return out


def test_policies_route_to_provisioned_contact_points() -> None:
    names = {c["name"] for c in alerting_doc("contactPoints")["contactPoints"]}
    for policy in alerting_doc("policies")["policies"]:
        assert _receivers(policy) <= names


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
    return {
        f"{name} {p['title']} {t['refId']}": t["expr"]
        for name, d in dashboards().items()
        for p in panels(d)
        for t in p.get("targets", [])
    }


def alert_exprs() -> dict[str, str]:
    return {
        f"{r['uid']} {q['refId']}": q["model"]["expr"]
        for r in alert_rules()
        for q in r["data"]
        if "expr" in q["model"]
    }


@pytest.mark.parametrize(
    "source", [dashboard_exprs, alert_exprs], ids=["dashboards", "alerts"]
)
def test_every_expr_parses(source: Any, tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    exprs = source()
    assert exprs
    check_promql(promtool, exprs, tmp_path)


def test_a_broken_expr_fails_the_parse_check(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    with pytest.raises(AssertionError, match="does not parse"):
        check_promql(promtool, {"bad": "sum(rate(scjepa_readings_total[1m])"}, tmp_path)


@pytest.mark.parametrize(
    "source", [dashboard_exprs, alert_exprs], ids=["dashboards", "alerts"]
)
def test_exprs_use_exported_metrics_and_known_recordings(source: Any) -> None:
    exported, recorded = exported_metric_names(), recorded_names()
    for where, expr in source().items():
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
        "scjepa_inference_duration_seconds",  # inference latency percentiles
        "scjepa_inference_batch_size",
        "scjepa_streams_in_alert",
        "scjepa_max_risk",
        "scjepa_http_request_duration_seconds",  # request latency by route
        "scjepa_inference",  # provider in use (the info metric)
    }
    assert required <= shown, sorted(required - shown)
    legends = " ".join(
        t.get("legendFormat", "")
        for d in dashboards().values()
        for p in panels(d)
        for t in p.get("targets", [])
    )
    assert (
        "{{provider}}" in legends
        and "{{route}}" in legends
        and "{{outcome}}" in legends
    )
