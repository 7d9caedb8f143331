"""The EMA target moves toward the online weights and never receives gradients."""

from __future__ import annotations

import torch
from support.train_helpers import TINY_MODEL

from model import SCJEPA, ModelConfig
from training.pretrain.config import LossConfig
from training.pretrain.ema import ema_update, make_target, online_params
from training.pretrain.losses import scjepa_loss


def _flat(params) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in params])


def test_ema_moves_target_toward_online_by_rho() -> None:
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**TINY_MODEL))
    target = make_target(model)
    torch.testing.assert_close(_flat(target.parameters()), _flat(online_params(model)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    before = _flat(online_params(model)) - _flat(target.parameters())
    ema_update(target, model, rho=0.9)
    after = _flat(online_params(model)) - _flat(target.parameters())
    torch.testing.assert_close(after, 0.9 * before)  # gap shrinks by exactly rho
    assert after.norm() < before.norm()


def test_target_gets_no_gradient_from_the_loss() -> None:
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**TINY_MODEL))
    target = make_target(model)
    x, x_next = torch.randn(2, 4, 100)
    terms = scjepa_loss(model(x), target(x_next), x, LossConfig(), 0.5)
    terms["loss"].backward()
    assert all(p.grad is None and not p.requires_grad for p in target.parameters())
    assert any(p.grad is not None for p in model.encoder.parameters())
