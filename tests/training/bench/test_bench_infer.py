"""`scjepa bench infer`: its time budget bounds the whole run."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from model.config import ModelConfig
from model.export import export_onnx
from service.manifest import Manifest, write_manifest
from training.bench.infer import served_from_config
from training.cli import main

SMALL = {"d_model": 16, "n_layers": 1, "n_heads": 2, "n_codes": 16, "pred_dim": 16}


def tiny_artifact(directory: Path, channels: int = 4) -> Path:
    """A real SC-JEPA graph (random weights, a tiny config) with its manifest."""
    cfg = ModelConfig(**SMALL)
    mask = [True] * channels
    directory.mkdir(parents=True, exist_ok=True)
    export_onnx(served_from_config(cfg, mask, hidden=16), directory / "model.onnx")
    write_manifest(
        directory,
        Manifest(
            name="tiny",
            version="0",
            created_at=datetime.now(UTC),
            git_commit="test",
            model_config=cfg.to_dict(),
            channels=[f"c{i}" for i in range(channels)],
            n_channels=channels,
            channel_mask=mask,
            threshold=0.5,
            calibration={"method": "none", "params": {}},
            eval_metrics={},
            training_data_fingerprint="test",
        ),
    )
    return directory


def test_budget_bounds_the_run(tmp_path: Path) -> None:
    """The run that took 13 min 49 s with --seconds 1.5 (each runtime got SECONDS x
    runtimes per batch size, not SECONDS): now its timing stays about runtimes x batch
    sizes x SECONDS. A generous bound (3x the budget plus set-up), not a speed test."""
    art = tiny_artifact(tmp_path / "art")
    out = tmp_path / "infer.json"
    sizes, seconds = "1,2,4,8", 0.1
    t0 = time.monotonic()
    argv = ["bench", "infer", "--artifact", str(art), "--batch-sizes", sizes]
    assert (
        main([*argv, "--seconds", str(seconds), "--threads", "1", "--json", str(out)])
        == 0
    )
    wall = time.monotonic() - t0
    res = json.loads(out.read_text())
    runtimes = (
        len({r["runtime"] for r in res["rows"]}) + len(res["peak_gflop_per_s"][0]) - 1
    )  # + the matmul peak(s), timed beside them
    budget = runtimes * 4 * seconds
    assert res["timing_s"] <= 3 * budget + 5, (res["timing_s"], budget)
    assert wall <= 3 * budget + 60, (wall, budget)  # set-up: export-free, one load
    assert {r["batch"] for r in res["rows"]} == {1, 2, 4, 8}
