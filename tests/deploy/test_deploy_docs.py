"""The operator's reference stays true: docs/reference/configuration.md lists every
setting of service/config.py with its real default and names no setting that does not
exist, docs/reference/operations.md's Metrics list names every metric
service/metrics.py exports, and its deployment section points at real files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.deploy_helpers import (
    REPO,
    documented_metric_names,
    settings_fields,
    unknown_scjepa_vars,
)

REFERENCE = REPO / "docs" / "reference"
CONFIGURATION = REFERENCE / "configuration.md"
OPERATIONS = REFERENCE / "operations.md"
# section title -> the page that holds it
SECTIONS = {
    "Deploy with docker compose": OPERATIONS,
    "Service settings": CONFIGURATION,
    "Metrics": OPERATIONS,
}
# pages that name SCJEPA_* settings: every name must be a real one
SERVICE_DOCS = [
    CONFIGURATION,
    OPERATIONS,
    REFERENCE / "api.md",
    REPO / "docs" / "architecture.md",
]


def section(title: str) -> str:
    page = SECTIONS[title]
    text = page.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"{page.relative_to(REPO)} has no '## {title}' section"
    return m.group(1)


def shown_default(value: Any) -> str:
    """How the Configuration table writes a setting's default."""
    if value is None:
        return "unset"
    if value == []:
        return "empty"
    return f"`{value}`"


def config_rows(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\| `(SCJEPA_[A-Z0-9_]+)` \| ([^|]*?) \|", text, re.M))


@pytest.mark.parametrize("title", list(SECTIONS))
def test_sections_exist(title: str) -> None:
    assert section(title).strip()


def test_configuration_table_lists_every_setting_with_its_default() -> None:
    from service.config import Settings

    rows = config_rows(section("Service settings"))
    prefix = Settings.model_config["env_prefix"]
    missing = settings_fields() - set(rows)
    assert not missing, f"configuration.md lacks {sorted(missing)}"
    for name, field in Settings.model_fields.items():
        var = (prefix + name).upper()
        assert rows[var] == shown_default(field.default), f"{var}: {rows[var]}"


def test_docs_name_no_unknown_setting() -> None:
    text = "".join(section(t) for t in SECTIONS)
    assert not unknown_scjepa_vars(text)
    for page in SERVICE_DOCS:
        unknown = unknown_scjepa_vars(page.read_text())
        assert not unknown, f"{page.relative_to(REPO)} names {sorted(unknown)}"


def test_readme_keeps_no_copy_of_the_reference() -> None:
    """The settings table and the metrics list live in docs/reference/ only."""
    readme = (REPO / "README.md").read_text()
    assert not config_rows(readme)
    assert not re.findall(r"^- `(scjepa_[a-z0-9_]+)`", readme, re.M)


def test_the_table_check_catches_drift() -> None:
    rows = config_rows("| `SCJEPA_MAX_BATCH` | `32` | | windows per call |\n")
    assert rows == {"SCJEPA_MAX_BATCH": "`32`"}
    assert rows["SCJEPA_MAX_BATCH"] != shown_default(64)


def test_metrics_section_lists_every_exported_metric() -> None:
    listed = set(re.findall(r"^- `(scjepa_[a-z0-9_]+)`", section("Metrics"), re.M))
    documented = documented_metric_names()
    assert "scjepa_readings_total" in documented
    assert "scjepa_inference_duration_seconds" in documented
    assert listed == documented, (
        f"missing {sorted(documented - listed)}, stale {sorted(listed - documented)}"
    )


def test_deploy_section_points_at_real_files() -> None:
    text = section("Deploy with docker compose")
    for rel in re.findall(r"`((?:deploy|provisioning|dashboards)/[\w./-]+)`", text):
        candidates = [REPO / rel, REPO / "deploy/grafana" / rel]
        assert any(Path(c).exists() for c in candidates), rel


def test_architecture_lists_every_redis_key() -> None:
    """docs/architecture.md's Store listing names every kind of key the Redis store
    and the alert state write (a stream's, a tenant's, the global ones)."""
    source = (REPO / "service" / "store" / "redis_store.py").read_text()
    stream = set(re.findall(r'_key\(\w+, \w+, "(\w+)"\)|base \+ "(\w+)"', source))
    per_stream = {a or b for a, b in stream}
    tenant = set(re.findall(r'_tenant\(\w+, "(\w+)"\)', source))
    shared = set(re.findall(r'_global\("(\w+)"\)', source))
    assert {"rows", "seen", "state", "risk"} <= per_stream and tenant and shared
    m = re.search(
        r"^### Store\n(.*?)^#", (REPO / "docs/architecture.md").read_text(), re.M | re.S
    )
    assert m, "docs/architecture.md has no '### Store' section"
    listed = m.group(1)
    expected = (
        [f"scjepa:{{p3}}:acme/pump-7:{k}" for k in per_stream]
        + [f"scjepa:{{acme}}:{k}" for k in tenant]
        + [f"scjepa:{{global}}:{k}" for k in shared]
    )
    from types import SimpleNamespace

    from service.alerting import RedisStates

    alert_key = RedisStates.key(SimpleNamespace(prefix="scjepa"), "acme", "pump-7")  # type: ignore[arg-type]
    expected.append(alert_key)
    missing = [
        k for k in expected if not re.search(rf"^{re.escape(k)}\s", listed, re.M)
    ]
    assert not missing, f"docs/architecture.md's Store listing lacks {missing}"


def test_serve_flags_named_as_settings_are_the_overrides() -> None:
    """configuration.md's list of `scjepa serve` flags that override a setting is the
    one service/cli.py applies (each flag -> its SCJEPA_* variable), and the flags it
    names as not settings are the parser's other options."""
    import argparse

    from service import cli

    source = (REPO / "service" / "cli.py").read_text()
    overrides = re.findall(r'"SCJEPA_([A-Z_]+)": args\.(\w+)', source)
    assert overrides
    flags = {"--" + attr.replace("_", "-") for _, attr in overrides}
    for var, attr in overrides:
        assert var.lower() == attr, (var, attr)  # the flag sets its own setting
    m = re.search(
        r"^`scjepa serve` flags override some of these for one run: (.*?)\(and (.*?), "
        r"which are not settings\)",
        section("Service settings"),
        re.M | re.S,
    )
    assert m, "configuration.md no longer lists the serve flags"
    listed, others = (set(re.findall(r"`(--[a-z-]+)`", g)) for g in m.groups())
    assert listed == flags, (
        f"missing {sorted(flags - listed)}, extra {sorted(listed - flags)}"
    )
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    options = {
        o for a in parser._actions for o in a.option_strings if o.startswith("--")
    }
    assert others == options - flags - {"--help"}, sorted(options - flags)
