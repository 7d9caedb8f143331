"""Decoder: an MLP from each patch latent z (D) back to the patch's L steps."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig


class PatchDecoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.patch_len)

    def forward(self, z: Tensor) -> Tensor:
        """z: (N, P, D) -> normalised reconstruction (N, P, L)."""
        return self.out(F.gelu(self.fc(z)))
