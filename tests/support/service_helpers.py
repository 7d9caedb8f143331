"""Helpers shared by the service tests: a restartable real redis-server, a local
3-master Redis Cluster, and the one interface the store tests use on either
(``url``: what SCJEPA_REDIS_URL takes, ``client()``: a synchronous client for checks)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import redis
from fastapi.testclient import TestClient

REDIS_BIN = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_port() -> int:
    """A free loopback port whose cluster bus port (port + 10000) is free and valid
    too: an ephemeral port above 55535 would give a node no bus port."""
    while True:
        port = free_port()
        if port + 10_000 > 65_535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port


class RedisServer:
    """A throwaway redis-server on a loopback port (no persistence unless ``aof``),
    restartable (``stop`` is a kill -9)."""

    def __init__(
        self, workdir: Path, port: int | None = None, *, aof: bool = False
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.aof = aof  # append-only file, fsync'ed at every write (appendfsync always)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A synchronous client, for a test's own checks of what the service wrote."""
        return redis.Redis(port=self.port)

    def start(self) -> RedisServer:
        assert REDIS_BIN is not None
        self.proc = subprocess.Popen(
            [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--dir", str(self.workdir),
             *(["--appendonly", "yes", "--appendfsync", "always"] if self.aof
               else ["--appendonly", "no"])],
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


REDIS_CLI = shutil.which("redis-cli")


class RedisCluster:
    """A throwaway 3-master Redis Cluster on loopback ports (no replicas, no
    persistence): ``url`` is what SCJEPA_REDIS_URL takes (``redis+cluster://``)."""

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.workdir, self.masters = workdir, masters
        self.nodes = self._new_nodes(0)

    def _new_nodes(self, attempt: int) -> list[RedisServer]:
        ports: set[int] = set()
        while len(ports) < self.masters:  # free_port may hand out one port twice
            ports.add(cluster_port())
        return [
            RedisServer(self.workdir / f"a{attempt}n{i}", port)
            for i, port in enumerate(sorted(ports))
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def client(self) -> redis.RedisCluster:
        """A synchronous cluster client: ``scan_iter`` spans every master, ``keys``
        asks one node (redis-py 8) unless given ``target_nodes=RedisCluster.PRIMARIES``."""
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def start(self, attempts: int = 3) -> RedisCluster:
        """Start the nodes and create the cluster; on a node that does not come up (a
        port taken meanwhile by another test run), again on other ports."""
        for attempt in range(attempts):
            try:
                return self._start()
            except (RuntimeError, subprocess.SubprocessError):
                self.stop()
                if attempt == attempts - 1:
                    raise
                self.nodes = self._new_nodes(attempt + 1)
        raise AssertionError("unreachable")

    def _start(self) -> RedisCluster:
        assert REDIS_BIN is not None and REDIS_CLI is not None
        for node in self.nodes:
            node.workdir.mkdir(parents=True, exist_ok=True)
            node.proc = subprocess.Popen(
                [REDIS_BIN, "--port", str(node.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(node.workdir),
                 "--cluster-enabled", "yes",
                 "--cluster-config-file", str(node.workdir / "nodes.conf")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
        for node in self.nodes:
            client = redis.Redis(
                port=node.port, socket_connect_timeout=0.2, socket_timeout=1.0
            )
            up = False
            for _ in range(100):
                if node.proc is None or node.proc.poll() is not None:
                    break  # exited: its port (or its bus port) was taken
                try:
                    up = bool(client.ping())
                    break
                except (redis.ConnectionError, redis.TimeoutError):
                    time.sleep(0.05)
            if not up or node.proc is None or node.proc.poll() is not None:
                raise RuntimeError(f"cluster node on port {node.port} did not start")
        subprocess.run(
            [REDIS_CLI, "--cluster", "create",
             *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        # every node ok and agreeing on who serves which slots (the configuration
        # spreads by gossip: one node ok is not all nodes routing alike)
        clients = [redis.Redis(port=n.port) for n in self.nodes]
        try:
            for _ in range(400):
                infos = [c.execute_command("CLUSTER", "INFO").decode() for c in clients]
                slots = [sorted(map(str, c.execute_command("CLUSTER", "SLOTS")))
                         for c in clients]  # fmt: skip
                if all("cluster_state:ok" in i for i in infos) and all(
                    s == slots[0] for s in slots
                ):
                    return self
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# a Redis the store runs on: one redis-server or the 3-master cluster (tests/conftest.py
# parametrizes the store tests over both)
AnyRedis = RedisServer | RedisCluster


class Hook:
    """A webhook receiver on a loopback port: what Alertmanager notifies."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_reads(reads: list[bytes], pause_s: float = 0.02) -> tuple[bytes, bool]:
    """``scjepa serve``'s HTTP protocol (service.http) on an in-memory transport, each
    of ``reads`` handed over as one read (what the kernel hands over, which a real
    socket cannot pin down), to an app that reads the body and answers 200: what the
    protocol wrote, and whether it closed the connection."""
    import asyncio

    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from service.http import GuardedHttpToolsProtocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    class Transport(asyncio.Transport):
        def __init__(self) -> None:
            super().__init__()
            self.out, self.closed = bytearray(), False

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            peers = {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}
            return peers.get(name, default)

        def write(self, data: Any) -> None:
            if not self.closed:  # as asyncio's: nothing goes out after close()
                self.out += data

        def is_closing(self) -> bool:
            return self.closed

        def close(self) -> None:
            self.closed = True

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

    async def go() -> tuple[bytes, bool]:
        config = Config(app=app, http=GuardedHttpToolsProtocol, lifespan="off")
        config.load()
        proto = GuardedHttpToolsProtocol(
            config=config, server_state=ServerState(), app_state={}
        )
        transport = Transport()
        proto.connection_made(transport)
        for data in reads:
            if not transport.closed:
                proto.data_received(data)
            await asyncio.sleep(pause_s)
        closed = transport.closed  # by the protocol (the client's leaving below)
        proto.connection_lost(None)
        return bytes(transport.out), closed

    return asyncio.run(go())
