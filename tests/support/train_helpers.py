"""Tiny training configs and quick stand-in pairs for the training-loop tests."""

from __future__ import annotations

import numpy as np

from training.data import Pairs
from training.pretrain.config import TrainConfig, from_dict

TINY_MODEL = {
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "n_codes": 12,
    "pred_dim": 16,
    "pred_layers": 1,
    "pred_heads": 2,
    "tok_channels": 4,
}


def tiny_train_config(**sections: dict) -> TrainConfig:
    """TrainConfig with a tiny model, batch 32, 2 epochs, selection from epoch 1."""
    d = {
        "model": dict(TINY_MODEL),
        "optim": {"batch_size": 32, "epochs": 2, "select_from": 1, "patience": 5},
        "run": {"threads": 1, "progress": False, "device": "cpu"},
    }
    for name, values in sections.items():
        d[name] = d.get(name, {}) | values
    return from_dict(d)


def random_pairs(n_train: int = 160, n_val: int = 40, seed: int = 0) -> Pairs:
    """Random-walk (W_t, W_{t+1}) pairs, from no data set."""
    rng = np.random.default_rng(seed)
    walk = rng.standard_normal((n_train + n_val, 200)).cumsum(1).astype(np.float32)
    pairs = walk.reshape(-1, 2, 100)  # (N, 2, T): consecutive windows of one channel
    return Pairs(pairs[:n_train], pairs[n_train:])
