"""README's deployment sections stay true: the Configuration table lists every setting
of service/config.py with its real default, names no setting that does not exist, and
the Metrics list names every metric service/metrics.py exports."""

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

README = REPO / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"README has no '## {title}' section"
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


@pytest.mark.parametrize(
    "title", ["Deploy with docker compose", "Configuration", "Metrics"]
)
def test_sections_exist(title: str) -> None:
    assert section(title).strip()


def test_configuration_table_lists_every_setting_with_its_default() -> None:
    from service.config import Settings

    rows = config_rows(section("Configuration"))
    prefix = Settings.model_config["env_prefix"]
    missing = settings_fields() - set(rows)
    assert not missing, f"README Configuration lacks {sorted(missing)}"
    for name, field in Settings.model_fields.items():
        var = (prefix + name).upper()
        assert rows[var] == shown_default(field.default), f"{var}: {rows[var]}"


def test_readme_names_no_unknown_setting() -> None:
    text = "".join(
        section(t) for t in ("Deploy with docker compose", "Configuration", "Metrics")
    )
    assert not unknown_scjepa_vars(text)


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
