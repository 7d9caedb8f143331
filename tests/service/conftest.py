"""Fixtures of the service tests that start ``scjepa serve`` as a real process (what
RSS, slow clients and SIGHUP need), key files, and the long fuzz run's marker.

``fuzz_full`` tests (>= 10,000 generated cases) run only when the marker expression
names them (``pytest -m fuzz_full tests/service``): the default run, ``make test``'s
``-m "not requires_cuda and not deploy"`` included, deselects them (a deselection, not a
skip, so CI does not count it as a missing component).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from served import Served, ServeFactory, scjepa_exe
from support.service_artifact import build_artifact
from support.service_helpers import Hook, free_port


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    if "fuzz_full" in (config.getoption("markexpr", "") or ""):
        return
    full = [i for i in items if i.get_closest_marker("fuzz_full") is not None]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [i for i in items if i.get_closest_marker("fuzz_full") is None]


# the operating points of `art_points` (scjepa export lists them in the manifest): the
# exported one (1 false alarm per 1,000 windows, the manifest's threshold 0.9), a
# looser one with what the test split measured there, and one without a threshold
POINTS = [
    {"false_alarms_per_1000": 0.1, "threshold": None},
    {"false_alarms_per_1000": 1.0, "threshold": 0.9},
    {
        "false_alarms_per_1000": 3.0,
        "threshold": 0.25,
        "test": {
            "events": 50,
            "warned_rate": 0.1,
            "false_pages_per_1000": 0.8,
            "false_pages_per_1000_ci95": [0.4, 1.3],
            "lead_quartiles_steps": None,
        },
    },
]


@pytest.fixture(scope="module")
def art_points(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test artifact at threshold 0.9 (constant zeros score 0.5, under it; 50s
    about 1.0) with the operating points ``POINTS`` (3: threshold 0.25)."""
    d = tmp_path_factory.mktemp("points")
    build_artifact(d, threshold=0.9)
    raw = json.loads((d / "manifest.json").read_text())
    assert raw["threshold"] == 0.9
    raw["eval_metrics"]["threshold"] = {
        "rule": "cv-budget",
        "false_alarms_per_1000": 1.0,
        "operating_points": POINTS,
    }
    (d / "manifest.json").write_text(json.dumps(raw))
    return d


@pytest.fixture(scope="module")
def sharp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with threshold 0.9: constant 50s score ~1.0, zeros ~0.5."""
    d = tmp_path_factory.mktemp("sharp")
    build_artifact(d, threshold=0.9)
    return d


@pytest.fixture
def serve(artifact_dir: Path, tmp_path: Path) -> Iterator[ServeFactory]:
    """Start ``scjepa serve`` on a free loopback port with SCJEPA_* settings from the
    keyword arguments (``artifact`` defaults to the test artifact); waits for /readyz.
    Every process started is terminated at the end."""
    started: list[Served] = []
    exe = scjepa_exe()

    def start(**settings: object) -> Served:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
        env |= {f"SCJEPA_{k.upper()}": str(v) for k, v in settings.items()}
        env.setdefault("SCJEPA_ARTIFACT", str(artifact_dir))
        log = tmp_path / f"serve-{port}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [exe, "serve", "--port", str(port), "--host", "127.0.0.1"],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
            )  # fmt: skip
        served = Served(f"http://127.0.0.1:{port}", port, proc, log)
        started.append(served)
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{served.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        return served

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.terminate()
            try:
                s.proc.wait(10)
            except subprocess.TimeoutExpired:
                s.proc.kill()
                s.proc.wait()


@pytest.fixture
def hook() -> Iterator[Hook]:
    """A webhook on a loopback port standing in for Alertmanager's receiver."""
    h = Hook()
    yield h
    h.close()
