"""Service fixtures: a tiny real ONNX artifact, a real redis-server, apps on both stores."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from service.config import Settings
from service.main import create_app
from tests.service.artifact import build_artifact

REDIS_BIN = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A throwaway redis-server on a loopback port (no persistence), restartable."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        assert REDIS_BIN is not None
        self.proc = subprocess.Popen(
            [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        for _ in range(100):
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


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


ClientFactory = Callable[..., TestClient]


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
