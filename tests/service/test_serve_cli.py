"""`scjepa serve` as an operator starts it: a real uvicorn process whose start-up log
says which model it loaded, on which provider, and which CPU slices it got."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
from served import scjepa_exe
from support.service_helpers import free_port


def test_serve_logs_model_provider_and_slices(
    artifact_dir: Path, tmp_path: Path
) -> None:
    exe = scjepa_exe()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [exe, "serve", "--artifact", str(artifact_dir), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log.read_text()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        finally:
            proc.terminate()
            proc.wait(10)
    text = log.read_text()
    # the service's own lines, timestamped (service/logs.py, SCJEPA_LOG_FORMAT=text)
    assert " INFO service.main: loaded " in text, text
    assert " on CPUExecutionProvider" in text, text
    assert " INFO service.main: CPU slices: event loop " in text, text
    assert "Traceback" not in text, text
