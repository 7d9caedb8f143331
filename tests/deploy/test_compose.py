"""docker-compose.yml: validated by docker-compose (v1) `config -q` with every profile,
plus the deployment's contract checked structurally (healthchecks, depends_on
conditions, Redis persistence, read-only model mount, the api and scorer tiers and a
scorer that `--scale` can multiply, CPU by default and GPU and replay profiles, limits,
log rotation, no-new-privileges, read-only roots, loopback ports, secrets from files)
and every SCJEPA_* variable checked against service.config.Settings;
deploy/docker/make-secrets.sh run for real; the command of api and scorers (secrets into
the server's environment: Redis password, the stack's ops and replay keys) and the
replay's entrypoint run for real under sh with a stand-in `scjepa`; each scorer tier's
own precision."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.deploy_helpers import (
    COMPOSE_FILE,
    DOCKERFILE,
    PROM_DIR,
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


DEFAULT_SERVICES = (
    "redis", "api", "scorer", "alertmanager", "redis-exporter", "prometheus", "grafana",
)  # fmt: skip
# the services that run `scjepa serve`, and the role and port each one runs it with
SERVE = {
    "api": ("api", 8000),
    "scorer": ("scorer", 8001),
    "scorer-gpu": ("scorer", 8001),
}
SCORERS = ("scorer", "scorer-gpu")


def serve_command(service: dict[str, Any]) -> tuple[str, list[str]]:
    """``sh -c SCRIPT $0 ARGS...``: the script (the password into the Redis URL, then
    `exec scjepa serve "$@"`) and the arguments `scjepa serve` gets."""
    cmd = [str(c) for c in service["command"]]
    assert cmd[:2] == ["sh", "-c"], cmd
    assert cmd[2].endswith('exec scjepa serve "$$@"'), cmd[2]
    return cmd[2], cmd[4:]


def serve_flags(service: dict[str, Any]) -> dict[str, str]:
    args = serve_command(service)[1]
    return dict(zip(args[::2], args[1::2], strict=True))


def test_expected_services_and_profiles(services: dict[str, Any]) -> None:
    assert {*DEFAULT_SERVICES, "scorer-gpu", "replay"} <= set(services)
    for name in DEFAULT_SERVICES:
        assert not services[name].get("profiles"), f"{name} must start by default"
    assert services["scorer-gpu"]["profiles"] == ["gpu"]
    assert services["replay"]["profiles"] == ["replay"]
    assert "api-gpu" not in services  # only scorers run inference


@pytest.mark.parametrize("name", list(SERVE))
def test_each_tier_runs_its_role_on_its_port(
    services: dict[str, Any], name: str
) -> None:
    role, port = SERVE[name]
    flags = serve_flags(services[name])
    assert flags == {"--role": role, "--host": "0.0.0.0", "--port": str(port)}
    # the role is the command's, not a variable a shell could leave at `all`
    assert "SCJEPA_ROLE" not in _env(services[name])


def test_the_scorer_scales(services: dict[str, Any]) -> None:
    """`docker compose up --scale scorer=N`: no fixed host port or container name that
    a second replica would clash on; Prometheus finds every replica by DNS on the
    port the scorers serve."""
    jobs = {
        j["job_name"]: j
        for j in load_yaml(PROM_DIR / "prometheus.yml")["scrape_configs"]
    }
    for name, job in (("scorer", "scjepa-scorer"), ("scorer-gpu", "scjepa-scorer-gpu")):
        svc = services[name]
        assert "ports" not in svc and "container_name" not in svc, name
        port = SERVE[name][1]
        assert svc["expose"] == [str(port)], name
        (sd,) = jobs[job]["dns_sd_configs"]
        assert (sd["names"], sd["type"], sd["port"]) == ([name], "A", port), job
        assert "static_configs" not in jobs[job], job
    # the api keeps its published port; only the scorers run inference on a GPU
    assert services["api"]["ports"]
    assert "deploy" not in services["api"] and "deploy" not in services["scorer"]


def test_api_and_scorers_share_one_configuration(
    services: dict[str, Any], rendered: dict[str, Any]
) -> None:
    """One anchor: the same settings (what both tiers must agree on cannot differ),
    Redis, secrets, model and key-file mounts, health check and hardening; the GPU
    scorer differs in its image, provider and precision (its own variable) only."""
    shared = ("environment", "volumes", "secrets", "depends_on", "healthcheck",
              "tmpfs", "security_opt", "read_only", "logging", "pids_limit")  # fmt: skip
    api, scorer, gpu = (rendered[n] for n in ("api", "scorer", "scorer-gpu"))
    for key in shared:
        assert api[key] == scorer[key], key
        if key != "environment":
            assert gpu[key] == scorer[key], key
    assert api["image"] == scorer["image"] != gpu["image"]
    assert {
        k: v for k, v in gpu["environment"].items() if v != scorer["environment"][k]
    } == {"SCJEPA_PROVIDER": "cuda"}  # at the defaults: fp32 both
    raw = {k: v for k, v in _env(services["scorer-gpu"]).items()
           if v != _env(services["scorer"])[k]}  # fmt: skip
    assert raw == {"SCJEPA_PROVIDER": "cuda",
                   "SCJEPA_PRECISION": "${GPU_PRECISION:-fp32}"}  # fmt: skip
    assert serve_command(api)[0] == serve_command(scorer)[0] == serve_command(gpu)[0]
    # a lower CPU weight than the api's default (1024): the api's requests first
    assert 0 < int(scorer["cpu_shares"]) < 1024 and "cpu_shares" not in api


def test_long_running_services_have_healthchecks(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        # a one-shot job; an image with no shell or HTTP client (Prometheus' `up` of
        # its scrape is its check)
        if name in ("replay", "redis-exporter"):
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
    # the fsync policy is a choice (docs/reference/operations.md): everysec by default
    assert flags["--appendfsync"] == "${REDIS_APPENDFSYNC:-everysec}"
    assert flags["--maxmemory-policy"] == "noeviction"
    assert any(str(v).endswith(":/data") for v in redis["volumes"])
    check = " ".join(redis["healthcheck"]["test"])
    assert "redis-cli ping" in check and "PONG" in check  # NOAUTH also exits 0


@pytest.mark.parametrize("name", list(SERVE))
def test_service_mounts_the_model_read_only_and_checks_readiness(
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


def test_cpu_is_the_default_image_and_gpu_a_profile(services: dict[str, Any]) -> None:
    for name in ("api", "scorer"):
        assert services[name]["build"]["target"] == "runtime-cpu"
        assert services[name]["image"] == "${API_IMAGE:-scjepa:cpu}"
        assert _env(services[name])["SCJEPA_PROVIDER"] == "${SCJEPA_PROVIDER:-cpu}"
    assert services["scorer-gpu"]["build"]["target"] == "runtime"
    assert services["scorer-gpu"]["image"] == "${GPU_IMAGE:-scjepa:gpu}"
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", DOCKERFILE.read_text(), re.M)
    assert stages[-1] == "runtime-cpu", "`docker build .` must build the CPU image"


@pytest.mark.parametrize("name", list(SERVE))
def test_healthcheck_follows_the_serve_port(
    services: dict[str, Any], name: str
) -> None:
    # the image's script reads --port from the running `scjepa serve`: a `command:`
    # with another port (host networking) keeps the check right
    test = services[name]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "/usr/local/bin/scjepa-healthcheck"], test
    assert not re.search(r":\d+/readyz", " ".join(test)), test
    # with the ops key: healthy when SCJEPA_OPS_KEY_ROUTES lists /readyz
    assert test[3:] == ["--key-file", "/run/secrets/ops_key", "/readyz"], test


def test_gpu_profile_reserves_an_nvidia_gpu(services: dict[str, Any]) -> None:
    gpu = services["scorer-gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices
    ), devices
    assert _env(gpu)["SCJEPA_PROVIDER"] == "cuda"
    assert serve_flags(gpu)["--role"] == "scorer"  # role api opens no CUDA session
    for name in ("api", "scorer"):
        assert "deploy" not in services[name], f"the default {name} must not need a GPU"


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


# the compose-level variables a test renders with (left out of this shell's)
COMPOSE_VARS = ("BIND_", "SCJEPA_", "GPU_PRECISION", "API_KEYS_DIR", "SECRETS_DIR")


def render(**env: str) -> dict[str, Any]:
    """The file as docker-compose resolves it, every profile: the defaults filled in,
    but for the variables in ``env``."""
    tool = require_tool("docker-compose")
    args: list[str | Path] = [tool, "--project-directory", REPO, "-f", COMPOSE_FILE]
    for p in PROFILES:
        args += ["--profile", p]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(COMPOSE_VARS)}
    proc = subprocess.run([str(a) for a in args] + ["config"], capture_output=True,
                          text=True, env=clean | env, check=False, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return dict(yaml_load(proc.stdout))["services"]


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    """The file as docker-compose resolves it (defaults filled in), every profile."""
    return render()


def test_each_scorer_tier_has_its_own_precision() -> None:
    """SCJEPA_PRECISION is the CPU scorers' (fp32, int8), GPU_PRECISION scorer-gpu's
    (fp32, fp16): fp16 for the GPU scorer must not reach a CPU scorer (which refuses
    to start with it), nor int8 for the CPU scorers the CUDA one."""
    svc = render(SCJEPA_PRECISION="int8", GPU_PRECISION="fp16")
    assert svc["scorer"]["environment"]["SCJEPA_PRECISION"] == "int8"
    assert svc["scorer-gpu"]["environment"]["SCJEPA_PRECISION"] == "fp16"
    svc = render(GPU_PRECISION="fp16")
    assert svc["scorer"]["environment"]["SCJEPA_PRECISION"] == "fp32"
    assert svc["api"]["environment"]["SCJEPA_PRECISION"] == "fp32"
    assert svc["scorer-gpu"]["environment"]["SCJEPA_PRECISION"] == "fp16"
    for name in ("api", "scorer", "scorer-gpu"):
        assert render()[name]["environment"]["SCJEPA_PRECISION"] == "fp32", name


def yaml_load(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def test_published_ports_bind_loopback_by_default(rendered: dict[str, Any]) -> None:
    published = 0
    for name, svc in rendered.items():
        for port in svc.get("ports", []):
            published += 1
            ip = port.get("host_ip") if isinstance(port, dict) else port.split(":")[0]
            assert ip == "127.0.0.1", (name, port)
    assert published >= 4  # api, alertmanager, prometheus, grafana; no scorer


def test_every_service_is_hardened(services: dict[str, Any]) -> None:
    writable = {"grafana", "replay"}  # untestable here / the loaders' caches
    for name, svc in services.items():
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        log = svc["logging"]
        assert log["driver"] == "json-file", name
        assert log["options"]["max-size"] and log["options"]["max-file"], name
        assert svc.get("mem_limit"), f"{name} has no memory limit"
        assert svc.get("read_only") is (name not in writable), name
        if name != "replay":
            assert svc.get("cpus") and svc.get("pids_limit"), name


def test_prometheus_lifecycle_api_is_off(services: dict[str, Any]) -> None:
    assert "--web.enable-lifecycle" not in services["prometheus"]["command"]
    assert "--web.enable-admin-api" not in services["prometheus"]["command"]


def test_passwords_come_from_secret_files(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    text = COMPOSE_FILE.read_text()
    assert not re.search(
        r"(?i)(password|requirepass)[ \t]*[:=][ \t]*[\"']?\w",
        text.replace("GF_SECURITY_ADMIN_PASSWORD__FILE: /run/secrets/", ""),
    )
    secrets = compose["secrets"]
    for name in ("redis_password", "redis_acl", "redis_exporter_passwords",
                 "grafana_admin_password", "ops_key", "replay_api_key"):  # fmt: skip
        assert secrets[name]["file"].startswith("${SECRETS_DIR:-./deploy/secrets}/")
    # the stack's keys: api and scorers accept them, the health checks, Prometheus
    # and the replay send them; never a key in the file or an environment
    for name in SERVE:
        assert {"ops_key", "replay_api_key"} <= set(services[name]["secrets"]), name
    assert services["prometheus"]["secrets"] == ["ops_key"]
    assert services["replay"]["secrets"] == ["replay_api_key"]
    for name in SERVE:  # yours passed through; the stack's added by the command
        assert _env(services[name])["SCJEPA_API_KEYS"] is None, name
    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--aclfile") + 1] == "/run/secrets/redis_acl"
    for name in SERVE:
        assert "redis_password" in services[name]["secrets"]
        script = serve_command(services[name])[0]
        assert "$$(cat /run/secrets/redis_password)" in script
        assert "@" not in _env(services[name])["SCJEPA_REDIS_URL"]  # no password
    graf = _env(services["grafana"])
    assert (
        graf["GF_SECURITY_ADMIN_PASSWORD__FILE"]
        == "/run/secrets/grafana_admin_password"
    )
    assert "GF_SECURITY_ADMIN_PASSWORD" not in graf
    assert (REPO / "deploy/secrets/.gitignore").read_text().splitlines()[-2:] == [
        "*", "!.gitignore"]  # fmt: skip


def test_alertmanager_serves_the_repo_config(services: dict[str, Any]) -> None:
    am = services["alertmanager"]
    assert "./deploy/alertmanager:/etc/alertmanager:ro" in am["volumes"]
    assert "--cluster.listen-address=" in am["command"]  # one instance, no gossip port
    for name in SCORERS:  # the scorers post the stream alerts (role api: none)
        assert _env(services[name])["SCJEPA_ALERTMANAGER_URL"].endswith(
            "http://alertmanager:9093}"
        )
    assert services["prometheus"]["depends_on"]["alertmanager"] == {
        "condition": "service_healthy"}  # fmt: skip


def test_make_secrets_writes_matching_files(tmp_path: Path) -> None:
    """The script run for real: a Redis user file holding the SHA-256 of the password
    file, the exporter's map with the same password, files kept on a second run; and
    a real redis-server accepts that password and refuses a missing one."""
    from support.components import require
    from support.service_helpers import free_port

    script = REPO / "deploy/docker/make-secrets.sh"
    env = dict(os.environ, SECRETS_DIR=str(tmp_path / "s"))
    subprocess.run([str(script)], env=env, check=True, capture_output=True)
    d = tmp_path / "s"
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    password = (d / "redis_password").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{48}", password)
    digest = hashlib.sha256(password.encode()).hexdigest()
    assert (d / "redis.acl").read_text() == f"user default on #{digest} ~* &* +@all\n"
    assert json.loads((d / "redis_exporter_passwords").read_text()) == {
        "redis://redis:6379": password}  # fmt: skip
    grafana = (d / "grafana_admin_password").read_text()
    keys = {n: (d / n).read_text().strip() for n in ("ops_key", "replay_api_key")}
    for name, key in keys.items():
        # safe in an SCJEPA_API_KEYS entry (no ',' or ':'), a header and a URL
        assert re.fullmatch(r"[0-9a-f]{48}", key), name
        assert stat.S_IMODE((d / name).stat().st_mode) == 0o644, name
    assert len({password, *keys.values()}) == 3
    (d / "replay_api_key").unlink()  # an older secrets folder: the new file added
    subprocess.run([str(script)], env=env, check=True, capture_output=True)
    assert (d / "redis_password").read_text().strip() == password  # kept
    assert (d / "grafana_admin_password").read_text() == grafana
    assert (d / "ops_key").read_text().strip() == keys["ops_key"]
    assert re.fullmatch(r"[0-9a-f]{48}", (d / "replay_api_key").read_text().strip())

    import redis

    server = require("redis-server", "checks the generated ACL file")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--aclfile", str(d / "redis.acl")],
                            stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        anon = redis.Redis(port=port, socket_connect_timeout=1)
        for _ in range(100):
            try:
                anon.ping()
                raise AssertionError("Redis answered without the password")
            except redis.AuthenticationError:
                break
            except redis.ConnectionError:
                import time

                time.sleep(0.05)
        assert redis.Redis(port=port, password=password).ping()
    finally:
        proc.kill()
        proc.wait()


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


def test_service_environment_keys_are_settings(services: dict[str, Any]) -> None:
    fields = settings_fields()
    for name in SERVE:
        keys = {k for k in _env(services[name]) if k.startswith("SCJEPA_")}
        assert keys, name
        assert keys <= fields, sorted(keys - fields)


@pytest.mark.parametrize("name", list(SERVE))
def test_every_setting_reaches_the_service_containers(
    services: dict[str, Any], name: str
) -> None:
    # the reverse drift: a setting added to service/config.py but not listed in the
    # compose environment could not be set in the deployment without editing the file
    # (the role excepted: each service's `--role` sets it)
    keys = set(_env(services[name]))
    missing = settings_fields() - keys - {"SCJEPA_ROLE"}
    assert not missing, f"{name}'s environment does not pass {sorted(missing)}"


def test_the_drift_check_catches_an_unknown_variable() -> None:
    text = "environment:\n  SCJEPA_MAX_BATCH: 64\n  SCJEPA_MAX_BATCHES: 64\n"
    assert unknown_scjepa_vars(text) == {"SCJEPA_MAX_BATCHES"}


# --- the stack's keys: SCJEPA_OPS_KEY_ROUTES and tenant keys keep the stack working


def test_the_key_file_folder_is_mounted_read_only(services: dict[str, Any]) -> None:
    """SCJEPA_API_KEYS_FILE usable in compose: its folder (not the file, so that a
    replaced file is seen) mounted read-only at /etc/scjepa in api and scorers; the
    default folder exists in the repo and commits nothing else."""
    for name in SERVE:
        mounts = [v for v in services[name]["volumes"]
                  if isinstance(v, dict) and v["target"] == "/etc/scjepa"]  # fmt: skip
        assert mounts == [{"type": "bind", "source": "${API_KEYS_DIR:-./deploy/keys}",
                           "target": "/etc/scjepa", "read_only": True}], name  # fmt: skip
    assert (REPO / "deploy/keys/.gitignore").read_text().splitlines()[-2:] == [
        "*", "!.gitignore"]  # fmt: skip


STUB = """#!{python}
import json, os, sys
print(json.dumps({{"argv": sys.argv[1:], "keys": os.environ.get("SCJEPA_API_KEYS"),
                  "redis": os.environ.get("SCJEPA_REDIS_URL")}}))
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A secrets folder (make-secrets.sh's files) and a PATH whose `scjepa` prints
    the arguments and the environment it was started with."""
    import sys

    secrets = tmp_path / "secrets"
    subprocess.run([str(REPO / "deploy/docker/make-secrets.sh")], check=True,
                   env=dict(os.environ, SECRETS_DIR=str(secrets)),
                   capture_output=True)  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "scjepa"
    stub.write_text(STUB.format(python=sys.executable))
    stub.chmod(0o755)
    return secrets, {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def run_script(script: str, args: list[str], secrets: Path, env: dict[str, str]) -> Any:
    """A compose `sh -c` script as the container runs it: `$$` is compose's `$`, the
    secrets at their /run/secrets/ paths."""
    text = script.replace("$$", "$").replace("/run/secrets/", f"{secrets}/")
    proc = subprocess.run(["sh", "-c", text, "scjepa", *args], capture_output=True,
                          text=True, env=env, check=False, timeout=30)  # fmt: skip
    assert proc.returncode == 0, explain(proc)
    return json.loads(proc.stdout)


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.mark.parametrize(
    ("api_keys", "key_file", "keyed"),
    [
        ("", None, False),  # open: stays open, only the ops key added
        ("acme:k1", None, True),
        ("k1", None, True),  # the default tenant's
        (f"sha256:{'a' * 64}", None, True),
        ("@admin:a1", None, False),  # no tenant key: still open
        (" @admin:a1 , @ops:o2 ,", None, False),
        ("", "# no tenant\n@admin sha256:" + "b" * 64 + "\n\n", False),
        ("", "  acme sha256:" + "c" * 64 + "  # a tenant\n", True),
        ("@admin:a1", "acme sha256:" + "c" * 64 + "\n", True),
    ],
    ids=["open", "tenant", "default-tenant", "tenant-hash", "admin-only",
         "at-keys-spaced", "file-admin-only", "file-tenant", "admin-and-file"],
)  # fmt: skip
def test_the_serve_command_adds_the_stacks_keys(
    services: dict[str, Any],
    stand_in: tuple[Path, dict[str, str]],
    tmp_path: Path,
    api_keys: str,
    key_file: str | None,
    keyed: bool,
) -> None:
    """The command of api and scorers, run for real: the Redis password into the URL;
    the ops key always (an @ops key: the health checks' and Prometheus' key opens the
    routes SCJEPA_OPS_KEY_ROUTES lists, and leaves an open service open); the replay
    key as tenant `replay` exactly when a tenant key is configured (an entry of
    SCJEPA_API_KEYS or a line of SCJEPA_API_KEYS_FILE whose principal is a tenant).
    The resulting keys loaded by the service's own key code."""
    from service import auth

    secrets, env = stand_in
    if api_keys:
        env["SCJEPA_API_KEYS"] = api_keys
    path = None
    if key_file is not None:
        path = tmp_path / "keys.txt"
        path.write_text(key_file)
        env["SCJEPA_API_KEYS_FILE"] = str(path)
    env["SCJEPA_REDIS_URL"] = "redis://redis:6379/0"
    script, args = serve_command(services["api"])
    got = run_script(script, args, secrets, env)
    assert got["argv"] == ["serve", *args]
    password = (secrets / "redis_password").read_text().strip()
    assert got["redis"] == f"redis://:{password}@redis:6379/0"
    ops, replay = ((secrets / n).read_text().strip()
                   for n in ("ops_key", "replay_api_key"))  # fmt: skip
    want = ([api_keys] if api_keys else []) + [f"@ops:{ops}"]
    want += [f"replay:{replay}"] if keyed else []
    assert got["keys"] == ",".join(want)
    entries = [auth.normalise_entry(e) for e in got["keys"].split(",") if e.strip()]
    keys = auth.Keys(entries, path)
    assert keys.open is not keyed
    ops_identity = keys.identify(ops)
    assert ops_identity is not None and ops_identity.principal == auth.OPS
    who = keys.identify(replay)
    assert (who.principal if who else None) == ("replay" if keyed else None)
    # the scorers run the same script
    for name in SCORERS:
        assert serve_command(services[name])[0] == script


def test_the_replay_sends_its_key(
    services: dict[str, Any], stand_in: tuple[Path, dict[str, str]]
) -> None:
    """The replay profile's entrypoint, run for real: `scjepa` + the command + the
    replay key read from its secret (--api-key, training/demo/replay.py)."""
    secrets, env = stand_in
    replay = services["replay"]
    entrypoint = [str(c) for c in replay["entrypoint"]]
    assert entrypoint[:2] == ["sh", "-c"] and entrypoint[3:] == ["scjepa"], entrypoint
    command = [str(c) for c in replay["command"]]
    got = run_script(entrypoint[2], command, secrets, env)
    key = (secrets / "replay_api_key").read_text().strip()
    assert got["argv"] == [*command, "--api-key", key]
    assert "replay_api_key" in replay["secrets"]
