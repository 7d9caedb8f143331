"""GET /docs works without internet: Swagger UI's JS and CSS are served from the package
(FastAPI's default page loads them from a CDN, a blank page in a plant network), and a
headless Chromium with every hostname unresolvable renders the operations."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient
from test_ui import chromium, live_url, needs_chromium

__all__ = ["live_url"]  # the fixture, shared with test_ui


def test_docs_page_loads_nothing_from_outside(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    refs = re.findall(r"""(?:src|href)=["']([^"']+)""", page.text)
    assert refs and all(r.startswith("/docs/assets/") for r in refs), refs
    assert "http://" not in page.text and "https://" not in page.text
    for ref in refs:
        asset = client.get(ref)
        assert asset.status_code == 200 and len(asset.content) > 1000, ref
    js = client.get("/docs/assets/swagger-ui-bundle.js").text
    assert "SwaggerUIBundle" in js
    assert client.get("/redoc").status_code == 404  # no CDN page left behind


@needs_chromium
def test_docs_render_offline_in_chromium(live_url: str, tmp_path: Path) -> None:
    offline = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
    run = chromium(f"{live_url}/docs", tmp_path, offline, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    # Swagger UI rendered the schema: the title and every operation's path
    assert "SC-JEPA risk service" in dom, dom[-3000:]
    paths = set(re.findall(r'data-path="([^"]+)"', dom))
    assert {"/ingest", "/risk/{stream}", "/streams", "/admin/reload"} <= paths, paths
    assert "Failed to load API definition" not in dom
