"""Structured logs (service/logs.py) and the middleware's access line and route labels:
JSON lines with timestamp, level, route, status, latency (and streams for ingest); text
lines timestamped; /openapi.json and /docs' assets labelled by their own route; no
``_created`` series in /metrics."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from support.service_helpers import ClientFactory

from service import logs


class Lines(logging.Handler):
    """Formatted records, as the configured handler would write them."""

    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self.setFormatter(formatter)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def json_access() -> Iterator[Lines]:
    handler = Lines(logs.JsonFormatter())
    logs.ACCESS.addHandler(handler)
    level = logs.ACCESS.level
    logs.ACCESS.setLevel(logging.INFO)
    yield handler
    logs.ACCESS.removeHandler(handler)
    logs.ACCESS.setLevel(level)


TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_access_lines_are_json_with_route_status_latency(
    client: TestClient, json_access: Lines
) -> None:
    assert client.get("/risk/pump-7").status_code == 404  # the fast read path
    assert client.get("/no/such/route").status_code == 404
    assert client.get("/readyz").status_code == 200
    got = [json.loads(line) for line in json_access.lines]
    assert [(g["method"], g["route"], g["status"]) for g in got] == [
        ("GET", "/risk/{stream}", 404),  # the template, never the stream's name
        ("GET", "unmatched", 404),
        ("GET", "/readyz", 200),
    ]
    for g in got:
        assert TS.match(g["ts"]), g
        assert g["level"] == "INFO" and g["logger"] == "service.access"
        assert isinstance(g["latency_ms"], float) and g["latency_ms"] > 0
        assert "pump-7" not in json.dumps(g)


def test_an_ingest_line_counts_its_streams(
    client: TestClient, json_access: Lines
) -> None:
    body = {
        "streams": [
            {"stream": s, "readings": [{"ts": 1.0, "values": [1, 2, 3, 4]}]}
            for s in ("a", "b", "c")
        ]
    }
    assert client.post("/ingest", json=body).status_code == 200
    (line,) = [json.loads(x) for x in json_access.lines]
    assert (line["route"], line["status"], line["streams"]) == ("/ingest", 200, 3)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_serve_logging_config_stamps_every_line(fmt: str) -> None:
    """logs.config() applied as uvicorn applies it (dictConfig), in a fresh process:
    the service's loggers and uvicorn's write timestamped lines in the chosen format."""
    code = (
        "import logging, logging.config; from service import logs; "
        f"logging.config.dictConfig(logs.config({fmt!r}, 'info')); "
        "logging.getLogger('service.main').info('loaded %s', 'm'); "
        "logging.getLogger('uvicorn.error').info('Started server'); "
        "logs.access('POST', '/ingest', 200, 0.0042, 2); "
        "logging.getLogger('service.debugging').debug('not shown')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, proc.stderr
    if fmt == "json":
        got = [json.loads(line) for line in lines]
        assert [g["logger"] for g in got] == ["service.main", "uvicorn.error",
                                              "service.access"]  # fmt: skip
        assert all(TS.match(g["ts"]) and g["level"] == "INFO" for g in got)
        assert got[0]["msg"] == "loaded m"
        assert got[2]["streams"] == 2 and got[2]["latency_ms"] == 4.2
    else:
        for line in lines:
            stamp = line.split(" ", 1)[0]
            assert TS.match(stamp), line
        assert lines[2].endswith("service.access: POST /ingest 200 4.200ms streams=2")


def _routes_seen(text: str) -> set[str]:
    return set(re.findall(r'scjepa_http_request_duration_seconds_count\{[^}]*route="([^"]+)"', text))  # fmt: skip


def test_starlette_routes_are_labelled_by_their_path(client: TestClient) -> None:
    assert client.get("/openapi.json").status_code == 200
    assert client.get("/docs").status_code == 200
    assert client.get("/docs/assets/swagger-ui.css").status_code == 200
    seen = _routes_seen(client.get("/metrics").text)
    assert {"/openapi.json", "/docs", "/docs/assets"} <= seen, seen


def test_metrics_carry_no_created_series(make_client: ClientFactory) -> None:
    client = make_client()
    client.get("/readyz")
    text = client.get("/metrics").text
    assert "scjepa_http_request_duration_seconds_count" in text
    assert "_created" not in text
