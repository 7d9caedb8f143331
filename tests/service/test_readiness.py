"""Readiness follows the store: 503 while Redis is down, 200 again once it is back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.service_helpers import REDIS_BIN, RedisServer

from service.config import Settings
from service.main import create_app


@pytest.mark.skipif(REDIS_BIN is None, reason="redis-server not on PATH")
def test_readyz_fails_while_redis_is_down_and_recovers(
    tmp_path: Path, artifact_dir: Path
) -> None:
    server = RedisServer(tmp_path).start()
    settings = Settings(
        artifact=artifact_dir, redis_url=server.url, redis_timeout_s=0.5
    )
    try:
        with TestClient(create_app(settings)) as client:
            assert client.get("/readyz").status_code == 200
            reading = {"stream": "s", "readings": [{"ts": 1.0, "values": [1, 2, 3, 4]}]}
            assert client.post("/ingest", json=reading).status_code == 200

            server.stop()
            r = client.get("/readyz")
            assert r.status_code == 503
            body = r.json()
            assert body["status"] == "unavailable"
            assert body["checks"]["store"] is False
            assert body["checks"]["provider"] == "CPUExecutionProvider"
            r = client.post("/ingest", json=reading)
            assert r.status_code == 503
            assert "store unavailable" in r.json()["detail"]
            r = client.get("/risk/s")  # the fast read path passes it on to the route
            assert r.status_code == 503 and r.headers["retry-after"] == "1"

            server.start()  # same port, empty data set (no persistence)
            deadline = time.monotonic() + 10
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "readyz did not recover"
                time.sleep(0.1)
            r = client.post("/ingest", json=reading)
            assert r.status_code == 200
            assert r.json()["results"][0]["accepted"] == 1
    finally:
        server.stop()


def test_app_refuses_a_broken_artifact(tmp_path: Path, artifact_dir: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(
        (artifact_dir / "model.onnx").read_bytes() + b"x"
    )
    (tmp_path / "manifest.json").write_text(
        (artifact_dir / "manifest.json").read_text()
    )
    with (
        pytest.raises(ValueError, match="SHA-256"),
        TestClient(create_app(Settings(artifact=tmp_path))),
    ):
        pass
