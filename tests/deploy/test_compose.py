"""docker-compose.yml: validated by docker-compose (v1) `config -q` with every profile,
plus the deployment's contract checked structurally (healthchecks, depends_on
conditions, Redis persistence, read-only model mount, GPU and replay profiles) and
every SCJEPA_* variable checked against service.config.Settings."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.deploy_helpers import (
    COMPOSE_FILE,
    DOCKERFILE,
    REPO,
    explain,
    load_yaml,
    require_tool,
    run_tool,
    settings_fields,
    unknown_scjepa_vars,
)

PROFILES = ("gpu", "replay")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def compose_config(tool: str, path: Path) -> Any:
    args: list[str | Path] = [tool, "--project-directory", REPO, "-f", path]
    for p in PROFILES:
        args += ["--profile", p]
    return run_tool(*args, "config", "-q")


# --- the real validator


def test_docker_compose_config_accepts_the_file() -> None:
    tool = require_tool("docker-compose")
    proc = compose_config(tool, COMPOSE_FILE)
    assert proc.returncode == 0, explain(proc)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("condition: service_healthy", "condition: service_happy"),  # bad enum
        ("\n  redis:\n", "\n  rediz:\n"),  # depends_on an undefined service
        ("    retries: 5\n", "    retries: five\n"),  # wrong type
    ],
    ids=["bad-condition", "undefined-dependency", "wrong-type"],
)
def test_docker_compose_config_rejects_broken_files(
    tmp_path: Path, old: str, new: str
) -> None:
    tool = require_tool("docker-compose")
    text = COMPOSE_FILE.read_text()
    assert old in text, f"mutation {old!r} no longer applies"
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(old, new, 1))
    proc = compose_config(tool, broken)
    assert proc.returncode != 0, (
        f"docker-compose accepted a broken file:\n{explain(proc)}"
    )


# --- structure the deployment relies on


def _env(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    return dict(env)


def test_expected_services_and_profiles(services: dict[str, Any]) -> None:
    assert {"redis", "api", "prometheus", "grafana", "api-gpu", "replay"} <= set(
        services
    )
    for name in ("redis", "api", "prometheus", "grafana"):
        assert not services[name].get("profiles"), f"{name} must start by default"
    assert services["api-gpu"]["profiles"] == ["gpu"]
    assert services["replay"]["profiles"] == ["replay"]


def test_long_running_services_have_healthchecks(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        if name == "replay":  # a one-shot job
            continue
        hc = svc.get("healthcheck")
        assert hc and hc.get("test"), f"{name} has no healthcheck"
        assert not hc.get("disable"), name


def test_every_dependency_waits_for_health(services: dict[str, Any]) -> None:
    seen = 0
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        assert isinstance(deps, dict), f"{name}: depends_on needs conditions"
        for dep, spec in deps.items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if (name, dep) == ("prometheus", "api"):
                # monitoring must come up when the api is unhealthy (to alert on it)
                assert spec == {"condition": "service_started"}
                continue
            assert spec == {"condition": "service_healthy"}, f"{name} -> {dep}"
            assert services[dep].get("healthcheck"), f"{dep} has no healthcheck"
            seen += 1
    assert seen >= 4


def test_redis_persists_and_never_evicts(services: dict[str, Any]) -> None:
    redis = services["redis"]
    cmd = [str(c) for c in redis["command"]]
    assert cmd[0] == "redis-server"
    flags = dict(zip(cmd[1::2], cmd[2::2], strict=False))
    assert flags["--appendonly"] == "yes"
    assert flags["--maxmemory-policy"] == "noeviction"
    assert any(str(v).endswith(":/data") for v in redis["volumes"])
    assert "redis-cli" in redis["healthcheck"]["test"]


@pytest.mark.parametrize("name", ["api", "api-gpu"])
def test_api_mounts_the_model_read_only_and_checks_readiness(
    services: dict[str, Any], name: str
) -> None:
    api = services[name]
    env = _env(api)
    assert env["SCJEPA_ARTIFACT"] == "/models/current"
    assert env["SCJEPA_REDIS_URL"].startswith("redis://redis:6379")
    mounts = [v for v in api["volumes"] if isinstance(v, dict)]
    model = [m for m in mounts if m["target"] == "/models/current"]
    assert model and model[0]["read_only"] is True
    assert model[0]["type"] in ("bind", "volume")
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
    assert api["depends_on"]["redis"]["condition"] == "service_healthy"
    assert api["build"]["target"] == "runtime"
    assert "8000" in " ".join(api["command"])


@pytest.mark.parametrize("name", ["api", "api-gpu"])
def test_api_healthcheck_follows_the_serve_port(
    services: dict[str, Any], name: str
) -> None:
    # the image's script reads --port from the running `scjepa serve`: a `command:`
    # with another port (host networking) keeps the check right
    test = services[name]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "/usr/local/bin/scjepa-healthcheck"], test
    assert not re.search(r":\d+/readyz", " ".join(test)), test


def test_gpu_profile_reserves_an_nvidia_gpu(services: dict[str, Any]) -> None:
    gpu = services["api-gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices
    ), devices
    assert _env(gpu)["SCJEPA_PROVIDER"] == "cuda"
    assert "deploy" not in services["api"], "the default api must not need a GPU"
    host_ports = {
        str(p).split(":")[-2] for s in ("api", "api-gpu") for p in services[s]["ports"]
    }
    assert len(host_ports) == 2, "api and api-gpu must not publish the same host port"


def test_replay_profile_targets_the_api(services: dict[str, Any]) -> None:
    replay = services["replay"]
    cmd = [str(c) for c in replay["command"]]
    assert cmd[0] == "replay"
    assert cmd[cmd.index("--url") + 1] == "http://api:8000"
    assert "--dataset" in cmd or "--file" in cmd
    assert replay["depends_on"]["api"]["condition"] == "service_healthy"
    assert replay["build"]["target"] == "train"  # the data loaders need pandas


def test_prometheus_and_grafana_mount_the_repo_config(services: dict[str, Any]) -> None:
    def sources(svc: dict[str, Any]) -> dict[str, str]:
        out = {}
        for v in svc["volumes"]:
            if isinstance(v, str) and v.startswith("./"):
                src, dst = v.split(":")[:2]
                out[dst] = src
        return out

    prom = sources(services["prometheus"])
    assert prom["/etc/prometheus"] == "./deploy/prometheus"
    cmd = " ".join(services["prometheus"]["command"])
    assert "--config.file=/etc/prometheus/prometheus.yml" in cmd
    graf = sources(services["grafana"])
    assert graf["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    for src in (*prom.values(), *graf.values()):
        assert (REPO / src).is_dir(), f"{src} is mounted but missing"


def test_grafana_gets_the_webhook_variable_its_contact_point_uses(
    services: dict[str, Any],
) -> None:
    env = _env(services["grafana"])
    text = (
        REPO / "deploy/grafana/provisioning/alerting/contact-points.yml"
    ).read_text()
    used = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", text))
    assert used, "the contact point should read its URL from the environment"
    for var in used:
        assert env.get(var), f"grafana's environment does not set {var}"


# --- SCJEPA_* variables cannot drift from service/config.py


def test_settings_use_the_scjepa_prefix() -> None:
    from service.config import Settings

    assert Settings.model_config.get("env_prefix") == "SCJEPA_"
    assert "SCJEPA_ARTIFACT" in settings_fields()


@pytest.mark.parametrize("path", [COMPOSE_FILE, DOCKERFILE], ids=lambda p: p.name)
def test_every_scjepa_variable_is_a_real_setting(path: Path) -> None:
    text = path.read_text()
    assert "SCJEPA_" in text
    unknown = unknown_scjepa_vars(text)
    assert not unknown, (
        f"{path.name} sets SCJEPA_* variables that service/config.py does not define: {sorted(unknown)}"
    )


def test_api_environment_keys_are_settings(services: dict[str, Any]) -> None:
    fields = settings_fields()
    for name in ("api", "api-gpu"):
        keys = {k for k in _env(services[name]) if k.startswith("SCJEPA_")}
        assert keys, name
        assert keys <= fields, sorted(keys - fields)


@pytest.mark.parametrize("name", ["api", "api-gpu"])
def test_every_setting_reaches_the_api_container(
    services: dict[str, Any], name: str
) -> None:
    # the reverse drift: a setting added to service/config.py but not listed in the
    # compose environment could not be set in the deployment without editing the file
    keys = set(_env(services[name]))
    missing = settings_fields() - keys
    assert not missing, f"{name}'s environment does not pass {sorted(missing)}"


def test_the_drift_check_catches_an_unknown_variable() -> None:
    text = "environment:\n  SCJEPA_MAX_BATCH: 64\n  SCJEPA_MAX_BATCHES: 64\n"
    assert unknown_scjepa_vars(text) == {"SCJEPA_MAX_BATCHES"}
