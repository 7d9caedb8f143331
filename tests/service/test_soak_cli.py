"""`scjepa bench soak` and `scjepa bench streams`, briefly: the commands run a real
service and Redis on loopback, drive their load and report memory over time (the
30-minute and 100,000-stream figures: docs/reference/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.service_helpers import REDIS_BIN

from training.cli import main

pytestmark = pytest.mark.skipif(REDIS_BIN is None, reason="redis-server not on PATH")


def test_soak_runs_and_reports(artifact_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    code = main(["bench", "soak", "--artifact", str(artifact_dir), "--minutes", "0.3",
                 "--sample-s", "6", "--reload-every-s", "8", "--streams", "20",
                 "--rate", "20", "--risk-rate", "20", "--json", str(out)])  # fmt: skip
    report = json.loads(out.read_text())
    s = report["summary"]
    assert code == 0 and s["errors"] == 0, s["error_examples"]
    assert {"ingest", "churn", "risk", "streams", "metrics", "bad", "reload"} <= set(
        s["requests"]
    )
    assert s["requests"]["reload"]["n"] >= 1 and s["requests"]["bad"]["n"] >= 1
    assert len(report["samples"]) >= 3
    for sample in report["samples"]:
        assert sample["service_rss_mb"] > 20 and sample["redis_used_mb"] > 0


def test_streams_bench_reclaims(artifact_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "streams.json"
    code = main(["bench", "streams", "--artifact", str(artifact_dir), "--streams",
                 "2000", "--ttl-s", "6", "--json", str(out)])  # fmt: skip
    report = json.loads(out.read_text())
    assert code == 0
    assert report["keys_per_stream"] == 3.0 and report["redis_bytes_per_stream"] > 0
    assert report["after_ttl"]["keys"] <= report["baseline"]["keys"] + 2
