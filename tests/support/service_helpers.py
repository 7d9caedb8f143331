"""Helpers shared by the service tests: a restartable real redis-server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis
from fastapi.testclient import TestClient

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


ClientFactory = Callable[..., TestClient]
