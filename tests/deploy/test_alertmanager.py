"""deploy/alertmanager/alertmanager.yml: valid for Alertmanager (`amtool check-config`,
the Debian package prometheus-alertmanager), a broken copy refused, and the routing the
stream alerts rely on: grouped by tenant and stream, one receiver that exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.components import require
from support.deploy_helpers import DEPLOY, explain, load_yaml, run_tool

CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"


def test_amtool_accepts_the_config() -> None:
    proc = run_tool(require("amtool", "checks the Alertmanager config"),
                    "check-config", CONFIG)  # fmt: skip
    assert proc.returncode == 0, explain(proc)
    assert "SUCCESS" in proc.stdout, proc.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [("receiver: default\n  group_by", "receiver: nobody\n  group_by"),
     ("group_wait: 10s", "group_wait: ten seconds")],
    ids=["unknown-receiver", "bad-duration"],
)  # fmt: skip
def test_amtool_refuses_a_broken_config(tmp_path: Path, old: str, new: str) -> None:
    amtool = require("amtool", "checks the Alertmanager config")
    text = CONFIG.read_text()
    assert old in text, f"mutation {old!r} no longer applies"
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(text.replace(old, new, 1))
    proc = run_tool(amtool, "check-config", broken)
    assert proc.returncode != 0, explain(proc)


def _receivers(route: dict[str, Any]) -> set[str]:
    out = {route["receiver"]} if "receiver" in route else set()
    for child in route.get("routes", []):
        out |= _receivers(child)
    return out


def test_stream_alerts_are_grouped_per_stream() -> None:
    config = load_yaml(CONFIG)
    route = config["route"]
    assert {"alertname", "tenant", "stream"} <= set(route["group_by"])
    assert _receivers(route) <= {r["name"] for r in config["receivers"]}
    (stream,) = [
        r for r in route["routes"] if 'alertname="ScjepaStreamRisk"' in r["matchers"]
    ]
    assert stream["group_wait"] == "0s"  # a stream's page is not held back
