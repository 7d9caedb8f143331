"""deploy/docker/healthcheck.py, the service images' HEALTHCHECK: it probes /readyz on
the --host/--port of the `scjepa serve` it finds in /proc, so a container started with
another port (a host-network deployment, `make deploy-test`) is still checked right."""

from __future__ import annotations

import http.server
import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.deploy_helpers import REPO
from support.service_helpers import free_port

SCRIPT = REPO / "deploy/docker/healthcheck.py"


@pytest.fixture(scope="module")
def hc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scjepa_healthcheck", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VENV = ["/opt/venv/bin/python", "/opt/venv/bin/scjepa", "serve"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([*VENV, "--host", "0.0.0.0", "--port", "8000"], ("127.0.0.1", 8000)),
        ([*VENV, "--host", "127.0.0.1", "--port", "41234"], ("127.0.0.1", 41234)),
        ([*VENV, "--port=9001", "--host=10.1.2.3"], ("10.1.2.3", 9001)),
        ([*VENV, "--host", "::", "--port", "8080"], ("::1", 8080)),
        (VENV, ("127.0.0.1", 8000)),  # serve's defaults
        (["scjepa", "serve", "--artifact", "/m", "--port", "7"], ("127.0.0.1", 7)),
        (["scjepa", "replay", "--port", "7"], None),  # not the server
        (["redis-server", "--port", "6379"], None),
        (["/bin/sh", "-c", "scjepa serve --port 9"], None),  # its child is found
    ],
)
def test_serve_address(
    hc: ModuleType, argv: list[str], expected: tuple[str, int] | None
) -> None:
    assert hc.serve_address(argv) == expected


def fake_proc(root: Path, procs: dict[int, list[str]]) -> Path:
    for pid, argv in procs.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv))
    (root / "self").mkdir(parents=True)  # non-numeric entries are ignored
    return root


def test_find_server_reads_the_serving_process(hc: ModuleType, tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        {
            1: ["/sbin/docker-init", "--", "scjepa", "serve", "--port", "5"],
            7: [*VENV, "--host", "0.0.0.0", "--port", "45678"],
            9: ["python", "/usr/local/bin/scjepa-healthcheck", "/readyz"],
        },
    )
    # docker-init's argv also names `scjepa serve` with the same port as the child
    assert hc.find_server(proc) == ("127.0.0.1", 5)
    (proc / "1" / "cmdline").write_bytes(b"/sbin/docker-init\0--\0sleep\0")
    assert hc.find_server(proc) == ("127.0.0.1", 45678)
    assert hc.find_server(fake_proc(tmp_path / "empty", {})) is None


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[int, type[_Handler]]]:
    handler = type("H", (_Handler,), {"status": 200})
    srv = http.server.HTTPServer(("127.0.0.1", free_port()), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1], handler
    srv.shutdown()
    srv.server_close()


def test_main_probes_the_port_of_the_server(
    hc: ModuleType, tmp_path: Path, server: tuple[int, type[_Handler]]
) -> None:
    port, handler = server
    proc = fake_proc(tmp_path, {1: [*VENV, "--host", "0.0.0.0", "--port", str(port)]})
    assert hc.main(["healthcheck", "/readyz"], proc) == 0
    handler.status = 503  # not ready: unhealthy
    assert hc.main(["healthcheck", "/readyz"], proc) == 1
    other = fake_proc(tmp_path / "other", {1: [*VENV, "--port", str(free_port())]})
    assert hc.main(["healthcheck"], other) == 1  # nothing listens there
