"""`scjepa bench infer`: its time budget bounds the whole run; its parity and devices."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from model.config import ModelConfig
from model.export import export_onnx
from service.manifest import Manifest, write_manifest
from training.bench.infer import Runtime, drop_failing, served_from_config
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


def test_parity_of_each_onnxruntime_row(tmp_path: Path) -> None:
    """Every onnxruntime row but the reference is checked against onnxruntime's CPU fp32
    risks; the service's chunked runtime gives the same risks and the same alerts."""
    art = tiny_artifact(tmp_path / "art")
    out = tmp_path / "infer.json"
    argv = ["bench", "infer", "--artifact", str(art), "--batch-sizes", "1,4"]
    assert (
        main([*argv, "--seconds", "0.05", "--devices", "cpu", "--json", str(out)]) == 0
    )
    res = json.loads(out.read_text())
    agree = res["parity_vs_cpu_fp32"]
    assert "onnxruntime cpu fp32" not in agree  # the reference itself
    (served,) = [k for k in agree if k.startswith("service runtime cpu fp32")]
    assert agree[served]["max_abs_risk_diff"] <= 1e-6
    assert agree[served]["alert_flips"] == 0 and agree[served]["windows"] == 256
    assert res["devices"] == ["cpu"]
    assert not any("cuda" in r["runtime"] for r in res["rows"])


def test_devices_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    art = tiny_artifact(tmp_path / "art")
    argv = ["bench", "infer", "--artifact", str(art), "--seconds", "0.05"]
    assert main([*argv, "--devices", "gpu"]) == 2
    assert "--devices 'gpu'" in capsys.readouterr().err
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        # CUDA rows only: on a machine without CUDA that is nothing to time, said so
        assert main([*argv, "--devices", "cuda", "--batch-sizes", "1"]) == 2
        assert "nothing to time" in capsys.readouterr().err


def test_a_failing_runtime_leaves_the_run() -> None:
    """A runtime that fails at a batch size (the GPU out of memory at 16,384 windows,
    seen on an H100) is dropped with its error noted; the run goes on without it."""

    def fine(x: np.ndarray) -> np.ndarray:
        return x

    def oom(x: np.ndarray) -> np.ndarray:
        if len(x) > 2:
            raise RuntimeError(
                "Failed to allocate memory for requested buffer\n(trace)"
            )
        return x

    runtimes: dict[str, Runtime] = {
        "a": (fine, "a", "cpu fp32"),
        "b": (oom, "a", "cpu fp32"),
    }
    notes: dict[str, str] = {}
    drop_failing(runtimes, np.zeros((2, 3), np.float32), notes)
    assert set(runtimes) == {"a", "b"} and not notes
    drop_failing(runtimes, np.zeros((4, 3), np.float32), notes)
    assert set(runtimes) == {"a"}
    assert notes == {
        "b": "failed at batch 4: RuntimeError: Failed to allocate memory for "
        "requested buffer"
    }
