"""Predictors from the code assignments of W_t to those of W_{t+1}.

Fine: Pi_t (P x K) -> Linear 128 + positions -> 2-layer Transformer (4 heads) -> K logits
per patch. Coarse: the same trunk shape, but a learnable query cross-attends over the P
tokens -> 1 x K logits. With the codebook module ablated the inputs and outputs are the
continuous latents (D instead of K).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from model.config import ModelConfig
from model.layers import Block, CrossBlock, init_weights


class FinePredictor(nn.Module):
    def __init__(self, cfg: ModelConfig, in_dim: int, out_dim: int) -> None:
        super().__init__()
        d = cfg.pred_dim
        self.proj = nn.Linear(in_dim, d)
        self.pos = nn.Parameter(0.02 * torch.randn(cfg.n_tokens, d))
        self.blocks = nn.ModuleList(
            Block(d, cfg.pred_heads, cfg.ffn_mult, cfg.dropout)
            for _ in range(cfg.pred_layers)
        )
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, out_dim)
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        """x: (N, P, K) assignments of W_t -> (N, P, K) logits for W_{t+1}."""
        h = self.proj(x) + self.pos[: x.shape[1]]  # (N, P, d)
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln(h))


class CoarsePredictor(nn.Module):
    def __init__(self, cfg: ModelConfig, in_dim: int, out_dim: int) -> None:
        super().__init__()
        d = cfg.pred_dim
        self.proj = nn.Linear(in_dim, d)
        self.pos = nn.Parameter(0.02 * torch.randn(cfg.n_tokens, d))
        self.query = nn.Parameter(0.02 * torch.randn(1, 1, d))
        self.blocks = nn.ModuleList(
            CrossBlock(d, cfg.pred_heads, cfg.ffn_mult, cfg.dropout)
            for _ in range(cfg.pred_layers)
        )
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, out_dim)
        init_weights(self)

    def forward(self, x: Tensor) -> Tensor:
        """x: (N, P, K) assignments of W_t -> (N, 1, K) logits for DownAvg(W_{t+1})."""
        tokens = self.proj(x) + self.pos[: x.shape[1]]  # (N, P, d)
        q = self.query.expand(x.shape[0], -1, -1)  # (N, 1, d)
        for block in self.blocks:
            q = block(q, tokens)
        return self.head(self.ln(q))  # (N, 1, K)
