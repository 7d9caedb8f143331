"""A tiny ModelConfig: every model test runs in well under a second."""

from __future__ import annotations

from model import ModelConfig

TINY = {
    "d_model": 16,
    "n_layers": 2,
    "n_heads": 2,
    "n_codes": 12,
    "pred_dim": 16,
    "pred_layers": 1,
    "pred_heads": 2,
    "tok_channels": 4,
    "dropout": 0.0,
}


def tiny_config(**overrides: object) -> ModelConfig:
    return ModelConfig(**(TINY | overrides))
