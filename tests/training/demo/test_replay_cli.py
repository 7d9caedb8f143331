"""`scjepa replay` and the load generator, driven in process (no sockets)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from training.bench.loadtest import run_load_in_process
from training.cli import main as scjepa
from training.demo.replay import read_csv, read_dataset, replay


def write_csv(path: Path, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(n, 4)), 4)
    labels = np.zeros(n, dtype=int)
    labels[230:240] = 1
    lines = ["timestamp,a,b,c,flat,label"]
    for i in range(n):
        cells = ["" if (i == 7 and j == 1) else str(v) for j, v in enumerate(x[i])]
        lines.append(",".join([str(1000.0 + i), *cells, str(labels[i])]))
    path.write_text("\n".join(lines) + "\n")
    return x


def test_read_csv(tmp_path: Path) -> None:
    x = write_csv(tmp_path / "pump.csv", 20)
    s = read_csv(tmp_path / "pump.csv")
    assert s.channels == ["a", "b", "c", "flat"]
    assert s.ts[0] == 1000.0 and s.labels is not None and len(s.labels) == 20
    assert np.isnan(s.values[7, 1])
    np.testing.assert_allclose(s.values[8], x[8])
    (tmp_path / "bad.csv").write_text("a,b\n1,x\n")
    with pytest.raises(
        ValueError, match="non-numeric value 'x' in column 'b', data row 1"
    ):
        read_csv(tmp_path / "bad.csv")


def test_replay_prints_risks_and_labels(client: TestClient, tmp_path: Path) -> None:
    write_csv(tmp_path / "pump.csv", 250)
    lines: list[str] = []
    series = read_csv(tmp_path / "pump.csv")
    window = client.get("/models").json()["models"][0]["manifest"]["window"]
    seen = replay(
        client, series, stream="pump", window=window, batch=30, out=lines.append
    )
    # requests of 30 readings: windows end at readings 100 and 200
    assert [r["n"] for r in seen] == [100, 200]
    assert [r["ts"] for r in seen] == [1099.0, 1199.0]
    assert len(lines) == 2 and "risk=" in lines[0]
    assert seen[0]["label"] == 0  # readings 100..199 are normal
    hist = client.get("/risk/pump/history").json()["items"]
    assert [h["n"] for h in hist] == [200, 100]
    assert seen[-1]["label"] == 1  # readings 200..299 hold the anomaly at 230
    assert "next-window label=1" in lines[-1]


def test_cli_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert scjepa(["serve", "--artifact", str(tmp_path)]) == 2
    assert "manifest.json: file not found" in capsys.readouterr().err
    assert scjepa(["replay", "--file", str(tmp_path / "none.csv")]) == 2
    assert "none.csv" in capsys.readouterr().err


def test_load_generator_in_process(artifact_dir: Path) -> None:
    report = asyncio.run(
        run_load_in_process(
            Settings(artifact=artifact_dir, max_wait_ms=1.0),
            n_streams=4,
            readings_per_request=50,
            concurrency=2,
            duration_s=0.5,
        )
    )
    assert report.requests > 0 and report.errors == 0
    assert report.readings == report.requests * 50
    # each stream got a multiple of 50 readings: floor(r / 100) >= (r - 50) / 100
    assert report.windows_scored >= (report.readings - 4 * 50) // 100 > 0
    assert report.p50_ms <= report.p99_ms <= report.max_ms


def test_read_dataset_entity() -> None:
    s = read_dataset("synthetic", None, "unit-2")
    assert s.name == "synthetic-unit-2"
    assert s.values.shape[1] == len(s.channels) and s.labels is not None
    assert len(s.labels) == len(s.values) == len(s.ts) and np.all(np.diff(s.ts) > 0)
    with pytest.raises(ValueError, match="no entity 'nope'"):
        read_dataset("synthetic", None, "nope")
