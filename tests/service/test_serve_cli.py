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


def test_serve_refuses_a_budget_the_artifact_has_no_threshold_for(
    artifact_dir: Path, tmp_path: Path
) -> None:
    """`scjepa serve --fa-budget B` (SCJEPA_FA_BUDGET) without such an operating point
    in the manifest stops at start-up with one line saying so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    args = [scjepa_exe(), "serve", "--artifact", str(artifact_dir), "--fa-budget", "3"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("scjepa serve: error: SCJEPA_FA_BUDGET=3: ")
    assert "choose one of them, or export the model with --fa-budget" in done.stderr
    assert "Traceback" not in done.stderr
