"""The cross-validation's fits in worker processes (training/evaluate/parallel.py):
results in order and equal, to the bit, to the same fits run here on one thread, for
the MLP and tree probes and the fine-tuned candidate; one thread per worker whatever
the parent uses; a worker's error, or its death, reaches the caller."""

from __future__ import annotations

import os
import time
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest
import torch
from support.train_helpers import TINY_MODEL

from model import SCJEPA
from model.config import ModelConfig
from training.data import Samples
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.finetune import TuneConfig, TunedCandidate
from training.evaluate.metrics import roc_auc
from training.evaluate.parallel import fork_map, jobs_for, usable_cores
from training.evaluate.probe import ProbeConfig
from training.evaluate.select import HeldOut, out_of_fold

FAST = ProbeConfig(hidden=16, max_epochs=30, patience=5)


@pytest.fixture
def one_thread():
    """The serial reference runs on one thread, as each worker does."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _blocks(rng: np.random.Generator, k: int = 4, n: int = 60) -> list[HeldOut]:
    """Windows (n, 100, 2) whose next-window label rides on channel 0's level."""
    out = []
    for j in range(k):
        x = rng.normal(size=(n, 100, 2)).astype(np.float32)
        y = (rng.random(n) < 0.3).astype(np.int8)
        x[:, :, 0] += 0.25 * y[:, None]  # the mean of 100 steps: SD 0.1
        s = Samples(
            x=x,
            y=y,
            cur=np.zeros(n, np.int8),
            entity=np.zeros(n, np.int32),
            t=np.arange(n, dtype=np.int32),
            end=np.arange(1, n + 1, dtype=np.int64) * 100,
        )
        out.append(HeldOut(0, j, s, s, []))
    return out


def _same(a, b) -> None:
    for name in ("hop", "dense", "cal"):
        got, want = getattr(a, name), getattr(b, name)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            assert np.array_equal(g, w), name


def test_results_in_order_and_one_thread_per_worker() -> None:
    def task(i: int) -> tuple[int, int, int]:
        time.sleep(0.1)  # long enough for every worker to take some
        return i * i, torch.get_num_threads(), os.getpid()

    got = fork_map(task, 7, 3)
    assert [g[0] for g in got] == [i * i for i in range(7)]
    assert {g[1] for g in got} == {1}
    assert os.getpid() not in {g[2] for g in got}
    assert 2 <= len({g[2] for g in got}) <= 3
    # one job (or one task): here, in this process
    assert [g[2] for g in fork_map(task, 3, 1)] == [os.getpid()] * 3
    assert [g[2] for g in fork_map(task, 1, 4)] == [os.getpid()]


def test_a_worker_error_and_a_worker_death_reach_the_caller() -> None:
    def fails(i: int) -> int:
        if i == 2:
            raise ValueError(f"task {i} failed")
        return i

    with pytest.raises(ValueError, match="task 2 failed"):
        fork_map(fails, 4, 2)

    def dies(i: int) -> int:
        if i == 1:
            os._exit(9)  # as the kernel's out-of-memory killer would end it
        return i

    with pytest.raises(BrokenProcessPool):
        fork_map(dies, 4, 2)


def test_jobs_follow_threads() -> None:
    assert jobs_for(3) == 3
    assert jobs_for(0) == usable_cores() >= 1


@pytest.mark.parametrize("kind", ["mlp", "trees"])
def test_probe_cross_validation_equals_the_serial_one(kind, one_thread, rng) -> None:
    blocks = _blocks(rng)
    cfg = ProbeConfig(**{**FAST.__dict__, "kind": kind})

    def featurize(x: np.ndarray) -> np.ndarray:
        return np.stack([x.mean(1), x.std(1)], 1).reshape(len(x), -1)

    serial = out_of_fold(blocks, featurize, cfg, [0, 1], jobs=1)
    forked = out_of_fold(blocks, featurize, cfg, [0, 1], jobs=2)
    _same(forked, serial)
    assert serial.hop[0].shape == (2, 60)
    # fitted risks that read the label, not a constant
    assert roc_auc(blocks[1].hop.y, serial.hop[1].mean(0)) > 0.7


def test_fine_tuned_cross_validation_equals_the_serial_one(one_thread, rng) -> None:
    blocks = _blocks(rng)
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**TINY_MODEL))
    stats = WindowStatsFeatures(np.concatenate([b.hop.x for b in blocks]))
    cand = TunedCandidate(model, stats, "mlp", TuneConfig(epochs=2, patience=1))
    serial = cand.out_of_fold(blocks, FAST, [0], jobs=1)
    forked = cand.out_of_fold(blocks, FAST, [0], jobs=3)
    _same(forked, serial)
    assert [h.shape for h in serial.hop] == [(1, 60)] * 4
