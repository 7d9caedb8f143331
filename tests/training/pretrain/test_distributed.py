"""Data-parallel pre-training: 2 CPU processes under torchrun (gloo) stay in sync."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from support.train_helpers import TINY_MODEL

from training.pretrain.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_two_cpu_processes_keep_identical_replicas(tmp_path: Path) -> None:
    cfg = {
        "model": TINY_MODEL | {"dropout": 0.1},
        "optim": {"batch_size": 64, "epochs": 2, "select_from": 1, "max_steps": 6},
        "run": {"device": "cpu", "threads": 1, "progress": False},
    }
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    cmd += ["--standalone", "-m", "training.pretrain.train", "--dataset", "synthetic"]
    cmd += ["--config", str(tmp_path / "tiny.yaml"), "--out", str(tmp_path / "run")]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    # own session: on a timeout the workers are killed with torchrun, not orphaned
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, err[-3000:]
    rows = [
        json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()
    ]
    assert json.loads((tmp_path / "run/run.json").read_text())["world"] == 2
    # the global batch of 64 is split 32 + 32, so 1696 pairs make 26 steps an epoch
    assert rows[0]["step"] == 6 and rows[0]["train_loss"] > 0
    # every replica (online model and EMA target) holds exactly rank 0's weights
    assert rows[-1]["replica_spread"] == 0.0
    ckpt = load_checkpoint(tmp_path / "run/last.pt")
    assert ckpt["step"] == 6
    assert not torch.equal(ckpt["target"]["encoder.pos"], ckpt["model"]["encoder.pos"])
