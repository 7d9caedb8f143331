"""Readiness follows the store: 503 while Redis is down or full (maxmemory reached,
writes refused), 200 again once it is back or has room."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from support.service_helpers import REDIS_BIN, RedisServer

from service.config import Settings
from service.main import create_app


# single-only: its subject is the one redis-server killed and restarted on its port
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


# single-only: its subject is one node's maxmemory (the admin fills that one node)
@pytest.mark.skipif(REDIS_BIN is None, reason="redis-server not on PATH")
def test_readyz_fails_while_redis_refuses_writes_at_maxmemory(
    tmp_path: Path, artifact_dir: Path
) -> None:
    """A real redis-server with a small maxmemory and noeviction, filled until it
    refuses writes (OOM): PING still answers there, so readiness must write."""
    server = RedisServer(tmp_path).start()
    admin = redis.Redis(port=server.port)
    admin.config_set("maxmemory-policy", "noeviction")
    settings = Settings(
        artifact=artifact_dir, redis_url=server.url, redis_timeout_s=0.5
    )
    reading = {"stream": "s", "readings": [{"ts": 1.0, "values": [1, 2, 3, 4]}]}
    try:
        with TestClient(create_app(settings)) as client:
            assert client.get("/readyz").status_code == 200
            assert client.post("/ingest", json=reading).status_code == 200

            # filled as ingest fills it: each write is checked against the limit on
            # arrival and its data lands after, so the last accepted write carries
            # Redis past maxmemory; from then on every write is refused (OOM)
            used = int(admin.info("memory")["used_memory"])
            admin.config_set("maxmemory", used + 512 * 1024)
            grow = "redis.call('set', KEYS[1], string.rep('x', 131072))"
            filled = 0
            with pytest.raises(redis.ResponseError, match="maxmemory"):
                for filled in range(64):  # 8 MB: far past the 512 kB of room
                    admin.eval(grow, 1, f"fill:{filled}")
            assert filled >= 2, "the fill stopped before using the room it had"
            memory = admin.info("memory")
            assert int(memory["used_memory"]) > int(memory["maxmemory"])
            assert admin.ping()  # Redis is up and answers: only writes are refused

            r = client.get("/readyz")
            assert r.status_code == 503, r.json()
            checks = r.json()["checks"]
            assert checks["store"] is False and "maxmemory" in checks["store_error"]
            assert checks["model"] is True and checks["batcher"] is True
            later = {"stream": "s", "readings": [{"ts": 2.0, "values": [1, 2, 3, 4]}]}
            r = client.post("/ingest", json=later)
            assert r.status_code == 503 and "store unavailable" in r.json()["detail"]

            admin.config_set("maxmemory", 0)  # room again (an operator's fix)
            assert client.get("/readyz").status_code == 200
            r = client.post("/ingest", json=later)
            assert r.status_code == 200 and r.json()["results"][0]["accepted"] == 1
    finally:
        admin.close()
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
