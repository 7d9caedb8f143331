"""Shared fixtures: seeded RNG, the real benchmark data (when shared/ is present), and
the service's: a tiny real ONNX artifact, a real redis-server, apps on both stores.

Missing components (support/components.py): a test that needs one skips locally and
FAILS under CI=true; every skip, however it is raised, goes through that rule (the
report hooks below), and the run ends with the list of absent components."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections import Counter
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.components import (
    COMPONENTS,
    component_of,
    in_ci,
    may_skip_in_ci,
    require,
)
from support.service_artifact import NOVELTY, build_artifact
from support.service_helpers import AnyRedis, ClientFactory, RedisCluster, RedisServer

from service.config import Settings
from service.main import create_app

REPO = Path(__file__).resolve().parents[1]
# the processes tests start (`scjepa serve`, python -m ...) import this checkout's code,
# not that of the checkout the venv's editable install names (worktrees share a venv)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def data_root() -> Path:
    """Real MSL / SMD-19 data, unpacked once into a cache outside the repo.

    Skips (fails under CI) when ../shared/datasets is absent (e.g. a clone without the
    shared folder).
    """
    unpack = Path(require("datasets", "real-data tests"))
    dest = Path(os.environ.get("SCJEPA_DATA", "~/.cache/scjepa/datasets")).expanduser()
    subprocess.run(["bash", str(unpack), str(dest)], check=True, capture_output=True)
    return dest


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    require("redis-server", "tests on the Redis store")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A local 3-master Redis Cluster (redis-server --cluster-enabled, redis-cli
    --cluster create) on free loopback ports."""
    require("redis-server", "tests on a Redis Cluster")
    cluster = RedisCluster(tmp_path_factory.mktemp("cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def artifact_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("artifact")
    build_artifact(d, int8=True)
    return d


@pytest.fixture(scope="session")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test artifact with the input-drift monitor (a window's novelty is its mean
    absolute value / 10: support/service_artifact.py)."""
    d = tmp_path_factory.mktemp("monitored")
    build_artifact(d, novelty=NOVELTY)
    return d


@pytest.fixture(params=["memory", "redis", "cluster"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """The store a service test runs on: in memory, one redis-server, or the 3-master
    Redis Cluster (both Redis kinds started once per session)."""
    return str(request.param)


@pytest.fixture
def store_url(request: pytest.FixtureRequest, store_kind: str) -> str | None:
    """SCJEPA_REDIS_URL for the parametrized store (None: in memory)."""
    if store_kind == "memory":
        return None
    fixture = "redis_server" if store_kind == "redis" else "redis_cluster"
    return str(request.getfixturevalue(fixture).url)


@pytest.fixture(params=["single", "cluster"])
def any_redis(request: pytest.FixtureRequest) -> AnyRedis:
    """For the tests of what the service keeps in Redis: one redis-server, then the
    3-master cluster (``url`` for the settings, ``client()`` for the test's checks)."""
    fixture = "redis_server" if request.param == "single" else "redis_cluster"
    return cast(AnyRedis, request.getfixturevalue(fixture))


@pytest.fixture
def make_client(store_url: str | None, artifact_dir: Path) -> Iterator[ClientFactory]:
    """Start the app (lifespan included) on the parametrized store; settings overridable."""
    opened: list[TestClient] = []

    def factory(**overrides: Any) -> TestClient:
        settings: dict[str, Any] = {
            "artifact": artifact_dir,
            "redis_url": store_url,
            "key_prefix": f"t{uuid.uuid4().hex[:8]}",  # isolates tests sharing redis
            "max_wait_ms": 1.0,
        }
        settings.update(overrides)
        client = TestClient(create_app(Settings(**settings)))
        client.__enter__()
        opened.append(client)
        return client

    yield factory
    for c in opened:
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    return make_client()


# --- skips: allowed locally, failures under CI (support/components.py)

SKIPPED_FOR: Counter[str] = Counter()  # component -> tests skipped (or failed) for it


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_skip_in_ci(
    report: pytest.CollectReport | pytest.TestReport, hardware_marked: bool
) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    SKIPPED_FOR[component_of(reason) or "other"] += 1
    if in_ci() and not may_skip_in_ci(reason, hardware_marked):
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, where every test must run: {reason}\n"
            "(install the missing component; support/components.py lists them)"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    cuda = item.get_closest_marker("requires_cuda") is not None
    _fail_skip_in_ci(outcome.get_result(), hardware_marked=cuda)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, Any, None]:
    outcome = yield  # a module-level skip (importorskip) skips at collection
    _fail_skip_in_ci(outcome.get_result(), hardware_marked=False)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    absent = {n: c for n, c in COMPONENTS.items() if c.probe() is None}
    tr = terminalreporter
    tr.section("optional components")
    if not absent:
        tr.write_line(f"all present: {', '.join(COMPONENTS)}")
    for name, comp in absent.items():
        n = SKIPPED_FOR.get(name, 0)
        rule = (
            "skipped even under CI"
            if comp.hardware or comp.external
            else "a failure under CI"
        )
        tr.write_line(
            f"absent: {name}: {n} test(s) not run ({rule}); install: {comp.install}"
        )
    if SKIPPED_FOR.get("other"):
        tr.write_line(
            f"{SKIPPED_FOR['other']} test(s) skipped for a reason naming no component"
        )
    rule = "FAIL" if in_ci() else "skip"
    tr.write_line(f"CI={os.environ.get('CI', '')!r}: missing components {rule} tests")
