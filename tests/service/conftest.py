"""Service fixtures: a tiny real ONNX artifact, a real redis-server, apps on both stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_artifact import build_artifact
from service_helpers import REDIS_BIN, ClientFactory, RedisServer

from service.config import Settings
from service.main import create_app


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_BIN is None:
        pytest.skip("redis-server not on PATH (apt-get install redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def artifact_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("artifact")
    build_artifact(d, int8=True)
    return d


@pytest.fixture(params=["memory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_client(
    request: pytest.FixtureRequest, store_kind: str, artifact_dir: Path
) -> Iterator[ClientFactory]:
    """Start the app (lifespan included) on the parametrized store; settings overridable."""
    opened: list[TestClient] = []

    def factory(**overrides: Any) -> TestClient:
        settings: dict[str, Any] = {
            "artifact": artifact_dir,
            "redis_url": None,
            "key_prefix": f"t{uuid.uuid4().hex[:8]}",  # isolates tests sharing redis
            "max_wait_ms": 1.0,
        }
        if store_kind == "redis":
            settings["redis_url"] = request.getfixturevalue("redis_server").url
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
