"""Shared fixtures: seeded RNG, the real benchmark data (when shared/ is present), and
the service's: a tiny real ONNX artifact, a real redis-server, apps on both stores."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.service_artifact import build_artifact
from support.service_helpers import REDIS_BIN, ClientFactory, RedisServer

from service.config import Settings
from service.main import create_app

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def data_root() -> Path:
    """Real MSL / SMD-19 data, unpacked once into a cache outside the repo.

    Skips when ../shared/datasets is absent (e.g. a clone without the shared folder).
    """
    unpack = SHARED_DATASETS / "unpack.sh"
    if not unpack.is_file():
        pytest.skip(f"{SHARED_DATASETS} not present: real-data tests skipped")
    dest = Path(os.environ.get("SCJEPA_DATA", "~/.cache/scjepa/datasets")).expanduser()
    subprocess.run(["bash", str(unpack), str(dest)], check=True, capture_output=True)
    return dest


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
