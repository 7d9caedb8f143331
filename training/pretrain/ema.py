"""EMA target branch: xi <- rho * xi + (1 - rho) * theta after every optimiser step."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.scjepa import SCJEPA, TargetEncoder


def make_target(model: SCJEPA) -> TargetEncoder:
    """Frozen deep copies of the online encoder and codebook (eval mode, no grad)."""
    return TargetEncoder(model)


def online_params(model: SCJEPA) -> list[nn.Parameter]:
    """The online parameters the target tracks, in the target's parameter order."""
    mods = [model.encoder] + ([model.codebook] if model.codebook is not None else [])
    return [p for m in mods for p in m.parameters()]


@torch.no_grad()
def ema_update(target: TargetEncoder, model: SCJEPA, rho: float) -> None:
    """One EMA step over all tracked tensors at once (foreach: no per-tensor loop cost)."""
    tgt: list[Tensor] = list(target.parameters())
    src = online_params(model)
    assert len(tgt) == len(src), "target and online branches differ in structure"
    torch._foreach_mul_(tgt, rho)
    torch._foreach_add_(tgt, [p.detach() for p in src], alpha=1.0 - rho)
