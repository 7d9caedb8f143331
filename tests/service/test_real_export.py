"""The service serves what model/export.py writes: a tiny untrained SC-JEPA + probe,
with the input-drift monitor fitted as `scjepa evaluate` fits it, exported by the
project's exporter, loads, passes the contract checks and matches PyTorch, and scores
through the HTTP API."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from torch import nn

from model.config import ModelConfig
from model.export import NoveltyMonitor, ServedModel, export_onnx
from model.scjepa import SCJEPA
from service.config import Settings
from service.inference import load_model
from service.main import create_app
from service.manifest import Manifest, Novelty, write_manifest
from training.calibrate import novelty_record
from training.evaluate.detectors import DetectorScores

MASK = [True, False, True, True, True]  # channel 1 is constant in training


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ServedModel]:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_layers=1, n_heads=2, n_codes=16, pred_dim=32,
                      pred_layers=1)  # fmt: skip
    probe = nn.Sequential(nn.Linear(cfg.n_patches * cfg.n_codes, 1))
    # the monitor of normal windows (kept channels), reference and calibration apart
    normal = np.random.default_rng(2).normal(size=(500, 100, sum(MASK)))
    ref, cal = normal[:300].astype(np.float32), normal[300:].astype(np.float32)
    record = novelty_record(DetectorScores(ref, cal), cal, len(ref), "test")
    monitor = NoveltyMonitor.from_record(record)
    served = ServedModel(SCJEPA(cfg), probe, MASK, (1.5, -0.2), novelty=monitor)
    served = served.eval()
    d = tmp_path_factory.mktemp("real")
    export_onnx(served, d / "model.onnx")
    write_manifest(
        d,
        Manifest(
            name="scjepa-tiny", version="1", created_at=datetime.now(UTC), git_commit="t",
            model_config=cfg.to_dict(), channels=[f"c{i}" for i in range(5)],
            n_channels=5, channel_mask=MASK, threshold=0.5,
            calibration={"method": "platt", "params": {"a": 1.5, "b": -0.2}},
            eval_metrics={}, training_data_fingerprint="none",
            novelty=Novelty(**{k: record[k] for k in Novelty.model_fields}),
        ),
    )  # fmt: skip
    return d, served


def test_exported_model_matches_pytorch(exported: tuple[Path, ServedModel]) -> None:
    d, served = exported
    model = load_model(d, max_batch=4)
    x = (np.random.default_rng(0).normal(size=(6, 100, 5)) * 2 + 1).astype(np.float32)
    out = model.score(x)
    with torch.no_grad():
        risk, contrib, codes, _, novelty = served(torch.from_numpy(x))
    np.testing.assert_allclose(out.risk, risk.numpy(), atol=1e-4)
    assert out.novelty is not None
    np.testing.assert_allclose(out.novelty, novelty.numpy(), atol=1e-4)
    np.testing.assert_allclose(out.contrib, contrib.numpy(), atol=1e-4)
    np.testing.assert_array_equal(out.codes, codes.numpy())
    assert np.all(out.contrib[:, 1] == 0)  # masked channel


def test_exported_model_serves(exported: tuple[Path, ServedModel]) -> None:
    d, _ = exported
    x = np.random.default_rng(1).normal(size=(100, 5)).round(4)
    body = {"stream": "m", "readings": [{"ts": float(i), "values": r.tolist()}
                                        for i, r in enumerate(x)]}  # fmt: skip
    with TestClient(create_app(Settings(artifact=d))) as client:
        res = client.post("/ingest?wait=20", json=body).json()["results"][0]
        assert res["windows_scored"] == 1 and 0.0 < res["risk"] < 1.0
        risk = client.get("/risk/m").json()
        top = risk["top_channels"]
        assert top and "c1" not in [c["name"] for c in top]
        # the training data's kind of window: neither unlike it nor typical-only
        assert 0.0 < risk["novelty"] < 0.99
        assert abs(sum(c["share"] for c in top) - 1.0) < 1e-4
