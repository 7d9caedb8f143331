"""deploy/docker/healthcheck.py, the service images' HEALTHCHECK: it probes /readyz on
the --host/--port of the `scjepa serve` it finds in /proc, so a container started with
another port (a host-network deployment, `make deploy-test`) is still checked right;
it sends the ops key (--key-file, else /run/secrets/ops_key when present), so a
/readyz behind SCJEPA_OPS_KEY_ROUTES is still checked; and against the real service
with /readyz behind an @ops key."""

from __future__ import annotations

import http.server
import importlib.util
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
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
    key: str | None = None  # the X-API-Key /readyz needs; None: open

    def do_GET(self) -> None:
        status = self.status if self.path == "/readyz" else 404
        if self.key is not None and self.headers.get("X-API-Key") != self.key:
            status = 401
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[int, type[_Handler]]]:
    handler = type("H", (_Handler,), {"status": 200, "key": None})
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
    none = tmp_path / "no-such-key"
    assert hc.main(["healthcheck", "/readyz"], proc, none) == 0
    handler.status = 503  # not ready: unhealthy
    assert hc.main(["healthcheck", "/readyz"], proc, none) == 1
    other = fake_proc(tmp_path / "other", {1: [*VENV, "--port", str(free_port())]})
    assert hc.main(["healthcheck"], other, none) == 1  # nothing listens there


@pytest.mark.parametrize(
    "argv",
    [
        ["--key-file", "/k", "/readyz"],
        ["--key-file=/k"],
        ["/healthz", "--key-file", "/k"],
    ],
)
def test_parse_args(hc: ModuleType, argv: list[str]) -> None:
    key_file, path = hc.parse_args(["healthcheck", *argv])
    assert key_file == Path("/k")
    assert path == ("/healthz" if "/healthz" in argv else "/readyz")
    assert hc.parse_args(["healthcheck"]) == (None, "/readyz")


def test_main_sends_the_ops_key(
    hc: ModuleType,
    tmp_path: Path,
    server: tuple[int, type[_Handler]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """/readyz behind a key (SCJEPA_OPS_KEY_ROUTES): the check sends --key-file's
    key, else the default file's (compose's ops_key secret); no key, a wrong one, or
    a --key-file that cannot be read: unhealthy, and the reason never shows the key."""
    port, handler = server
    handler.key = "k" * 48
    proc = fake_proc(tmp_path / "p", {1: [*VENV, "--port", str(port)]})
    key = tmp_path / "ops_key"
    key.write_text(handler.key + "\n")  # make-secrets.sh's files end in a newline
    none = tmp_path / "no-such-key"
    assert hc.main(["healthcheck", "--key-file", str(key), "/readyz"], proc, none) == 0
    assert hc.main(["healthcheck", "/readyz"], proc, key) == 0  # the default file
    assert hc.main(["healthcheck", "/readyz"], proc, none) == 1  # no key: 401
    assert "401" in capsys.readouterr().err
    wrong = tmp_path / "wrong"
    wrong.write_text("w" * 48)
    assert hc.main(["healthcheck", "--key-file", str(wrong)], proc, key) == 1
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert hc.main(["healthcheck", "--key-file", str(empty)], proc, key) == 1
    assert hc.main(["healthcheck", "--key-file", str(none)], proc, key) == 1
    err = capsys.readouterr().err
    assert "no ops key to send" in err and handler.key not in err


@pytest.mark.slow
def test_the_real_service_behind_an_ops_key(
    hc: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scjepa serve`'s own app with SCJEPA_OPS_KEY_ROUTES=/readyz and the stack's
    ops key as compose's command adds it (@ops:KEY): /readyz without the key is 401
    (what broke the compose health checks), with it 200 through the check."""
    from support.components import require

    scjepa = require("scjepa-cli", "runs `scjepa serve`")
    from support.service_artifact import build_artifact

    require("torch", "exports the tiny model artifact")
    build_artifact(tmp_path / "artifact", threshold=0.0)
    key = "0123456789abcdef" * 3
    (tmp_path / "ops_key").write_text(key + "\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    env.update(SCJEPA_ARTIFACT=str(tmp_path / "artifact"),
               SCJEPA_API_KEYS=f"@ops:{key}",
               SCJEPA_OPS_KEY_ROUTES="/healthz,/readyz,/metrics")  # fmt: skip
    argv = [scjepa, "serve", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)  # fmt: skip
    proc = fake_proc(tmp_path / "p", {1: ["scjepa", "serve", "--port", str(port)]})
    try:
        deadline = time.monotonic() + 60
        with_key = ["healthcheck", "--key-file", str(tmp_path / "ops_key"), "/readyz"]
        while hc.main(with_key, proc, tmp_path / "none") != 0:
            assert server.poll() is None, "scjepa serve exited"
            assert time.monotonic() < deadline, "never ready with the ops key"
            time.sleep(0.3)
        assert hc.main(["healthcheck", "/readyz"], proc, tmp_path / "none") == 1
        for path in ("/readyz", "/metrics"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
            assert e.value.code == 401, path
            bearer = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                            headers={"Authorization": f"Bearer {key}"})  # fmt: skip
            with urllib.request.urlopen(bearer, timeout=5) as r:  # Prometheus' way
                assert r.status == 200, path
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
