"""GET /ui: the built-in live page, served as HTML and rendered by a real headless
Chromium against a live service (uvicorn on a loopback port, in-memory store)."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient
from support.service_helpers import free_port

from service.config import Settings
from service.main import create_app
from service.routes import ui

CHROMIUM = next(
    (
        p
        for p in (shutil.which("chromium"), "/usr/bin/chromium")
        if p and Path(p).exists()
    ),
    None,
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)"
)


def test_ui_is_html(client: TestClient) -> None:
    r = client.get("/ui")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "<title>SC-JEPA risk</title>" in page
    # self-contained: no external script, style or font (the machine may be offline)
    assert not re.search(r"""(src|href)=["']https?://""", page)
    for path in ("/streams", "/models", "/risk/", "/history?limit="):
        assert path in page
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui"


def test_ui_names_the_models_window(client: TestClient) -> None:
    window = client.app.state.model.window  # type: ignore[attr-defined]
    assert f"<b>next</b> {window}-step window" in client.get("/ui").text
    assert "<b>next</b> 37-step window" in ui.page(37)  # the manifest's, no literal
    # a label-free model (scjepa calibrate) says what its number is instead
    lf = ui.page(37, label_free=True)
    assert "how rare each 37-step window is" in lf and "<b>next</b>" not in lf


@contextmanager
def serving(artifact: Path, **more: Any) -> Iterator[str]:
    """The app on a free loopback port (uvicorn in a thread, in-memory store)."""
    port = free_port()
    app = create_app(
        Settings(artifact=artifact, redis_url=None, max_wait_ms=1.0, **more)
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def live_url(request: pytest.FixtureRequest, artifact_dir: Path) -> Iterator[str]:
    """:func:`serving` the test artifact; more settings by indirect parametrization."""
    with serving(artifact_dir, **getattr(request, "param", {})) as url:
        yield url


def ingest(url: str, stream: str, x: np.ndarray, key: str | None = None) -> None:
    readings = [
        {"ts": 1000.0 + i, "values": [float(v) for v in row]} for i, row in enumerate(x)
    ]
    r = httpx.post(
        f"{url}/ingest?wait=20",
        json={"stream": stream, "readings": readings},
        headers={"X-API-Key": key} if key else {},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
        f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000", *extra, url,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def sections(dom: str) -> dict[str, str]:
    """stream name -> the rendered <section> of its card."""
    found = re.findall(r'(<section class="stream"[^>]*>.*?</section>)', dom, re.S)
    out = {}
    for s in found:
        m = re.search(r'data-stream="([^"]+)"', s)
        assert m is not None
        out[m.group(1)] = s
    return out


@needs_chromium
def test_ui_shows_the_drift_monitors_novelty(monitored: Path, tmp_path: Path) -> None:
    """A model with the input-drift monitor: each card says the latest window's
    novelty and the stream's recent novelty, as GET /risk gives them."""
    with serving(monitored) as url:
        rng = np.random.default_rng(0)
        ingest(url, "pump", 3.0 + 0.05 * rng.normal(size=(150, 4)))
        cur = httpx.get(f"{url}/risk/pump").json()
        novelty, recent = cur["novelty"], cur["recent_novelty"]
        assert novelty is not None and 0.0 < novelty < 1.0
        assert recent is not None and f"{recent:.2f}" != f"{novelty:.2f}"
        run = chromium(f"{url}/ui", tmp_path, "--dump-dom")
        assert run.returncode == 0, run.stderr[-2000:]
        card = sections(run.stdout)["pump"]
        assert f"<span>novelty {novelty:.2f}</span>" in card, card
        assert f"<span>recent novelty {recent:.2f}</span>" in card, card


@needs_chromium
def test_ui_renders_streams_in_chromium(live_url: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 350  # 3 scored windows per stream
    # the tiny model's risk grows with |mean| and falls with std (service_artifact.py)
    ingest(live_url, "pump-hot", 3.0 + 0.05 * rng.normal(size=(n, 4)))
    ingest(live_url, "fan-calm", 2.0 * rng.normal(size=(n, 4)))
    api = {
        s: httpx.get(f"{live_url}/risk/{s}").json() for s in ("pump-hot", "fan-calm")
    }
    assert api["pump-hot"]["alert"] is True and api["fan-calm"]["alert"] is False

    run = chromium(f"{live_url}/ui", tmp_path, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    cards = sections(dom)
    assert set(cards) == {"pump-hot", "fan-calm"}, dom[-3000:]
    assert "model tiny 0.0.1" in dom  # from GET /models
    conn = re.search(r'<span id="conn" class="([^"]*)">([^<]*)</span>', dom)
    assert conn is not None and conn.group(2).startswith("updated "), conn
    for name, card in cards.items():
        alert = api[name]["alert"]
        assert f'data-alert="{str(alert).lower()}"' in card
        badge = re.search(r'<span class="badge ([a-z]+)">([^<]*)</span>', card)
        assert badge is not None, card
        assert badge.groups() == (("alert", "ALERT") if alert else ("ok", "OK"))
        assert f"{api[name]['risk']:.3f}" in card  # the current risk
        points = re.search(r'<polyline points="([^"]+)"', card)
        assert points is not None, card
        assert len(points.group(1).split()) == 3  # one point per scored window
        assert 'class="threshold"' in card
        assert "3 windows scored" in card
    # the alerted windows are marked on the sparkline
    assert cards["pump-hot"].count('class="hot"') == 3
    assert 'class="hot"' not in cards["fan-calm"]

    png = tmp_path / "ui.png"
    shot = chromium(
        f"{live_url}/ui", tmp_path, f"--screenshot={png}", "--window-size=1200,800"
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    image = pytest.importorskip("PIL.Image")
    with image.open(png) as im:
        assert im.size == (1200, 800)
        rgb = im.convert("RGB")
        colors = rgb.getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 50  # not a blank page
        # the ALERT badge is drawn in the alert red (#e5534b)
        assert any(
            abs(r - 0xE5) < 12 and abs(g - 0x53) < 12 and abs(b - 0x4B) < 12
            for _, (r, g, b) in colors
        )


@needs_chromium
@pytest.mark.parametrize(
    "live_url",
    [{"api_keys": ["acme:ui-key"], "rate_limit_rps": 0.5, "rate_limit_burst": 12}],
    indirect=True,
)
def test_ui_over_its_rate_limit_keeps_its_cards(live_url: str, tmp_path: Path) -> None:
    """A page whose key runs out of requests (429) says so and keeps the cards it
    has: it dropped every stream whose GET /risk was refused, as if it had expired,
    and showed "cannot reach the service" for a refused /models."""
    rng = np.random.default_rng(0)
    names = [f"pump-{i}" for i in range(4)]
    for name in names:  # 4 of the 12 requests the burst allows
        ingest(live_url, name, rng.normal(size=(120, 4)), key="ui-key")
    # the first refresh takes 3 + 2 x 4 = 11 of the 8 left: three are refused
    run = chromium(f"{live_url}/ui#key=ui-key", tmp_path, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    conn = re.search(r'<span id="conn" class="([^"]*)">([^<]*)</span>', run.stdout)
    assert conn is not None and conn.group(2).startswith("rate limited (429)"), conn
    cards = sections(run.stdout)
    assert cards and set(cards) <= set(names)
    for card in cards.values():  # every card shown is a whole one
        assert "windows scored" in card


@needs_chromium
def test_ui_shows_the_streams_at_highest_risk_past_25(
    live_url: str, tmp_path: Path
) -> None:
    """Past 25 streams the page shows the 25 at highest risk (GET /streams/top),
    highest first, and says so; the two of lowest risk are left out."""
    rng = np.random.default_rng(0)
    names = [f"s-{i:02d}" for i in range(27)]
    for i, name in enumerate(names):  # the tiny model's risk grows with |mean|
        ingest(live_url, name, 0.1 * i + 0.01 * rng.normal(size=(120, 4)))
    risk = {s: httpx.get(f"{live_url}/risk/{s}").json()["risk"] for s in names}
    want = sorted(names, key=lambda s: -risk[s])[:25]
    assert len(set(risk.values())) == 27 and set(names) - set(want) == {"s-00", "s-01"}
    run = chromium(f"{live_url}/ui", tmp_path, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert list(sections(run.stdout)) == want  # in the page's order
    conn = re.search(r'<span id="conn" class="([^"]*)">([^<]*)</span>', run.stdout)
    assert conn is not None and conn.group(2).startswith(
        "the 25 streams at highest risk, of more; updated "
    ), conn
