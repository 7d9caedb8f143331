"""Transformer building blocks: attention on plain Linear + SDPA, MLP, pre-LN blocks.

Attention is written as ``nn.Linear`` + ``F.scaled_dot_product_attention`` (not
``nn.MultiheadAttention``) so the encoder exports to ONNX and runs fast in onnxruntime.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused qkv projection."""

    def __init__(self, dim: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """x: (B, N, D), mask: (N, N) bool (True = may attend) -> (B, N, D)."""
        B, N, D = x.shape
        H = self.n_heads
        # (3, B, H, N, Dh): q, k and v, heads split off
        qkv = self.qkv(x).view(B, N, 3, H, D // H).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # (B, H, N, Dh) each
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        y = y.transpose(1, 2).reshape(B, N, D)  # (B, N, D)
        return self.proj(y)


class CrossAttention(nn.Module):
    """Multi-head attention of a few queries over a token sequence."""

    def __init__(self, dim: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, q: Tensor, x: Tensor) -> Tensor:
        """q: (B, M, D) queries, x: (B, N, D) tokens -> (B, M, D)."""
        B, M, D = q.shape
        N, H = x.shape[1], self.n_heads
        q = self.q(q).view(B, M, H, D // H).transpose(1, 2)  # (B, H, M, Dh)
        # (2, B, H, N, Dh): k and v, heads split off
        kv = self.kv(x).view(B, N, 2, H, D // H).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)  # (B, H, M, Dh)
        return self.proj(y.transpose(1, 2).reshape(B, M, D))  # (B, M, D)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.out(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LN Transformer block: x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, dim: int, n_heads: int, ffn_mult: int = 4, dropout: float = 0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, n_heads, dropout)
        self.drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, ffn_mult * dim, dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """x: (B, N, D) -> (B, N, D)."""
        x = x + self.drop(self.attn(self.ln1(x), mask))
        return x + self.mlp(self.ln2(x))


class CrossBlock(nn.Module):
    """Pre-LN block whose queries cross-attend over fixed tokens."""

    def __init__(self, dim: int, n_heads: int, ffn_mult: int = 4, dropout: float = 0.0):
        super().__init__()
        self.ln_q = nn.LayerNorm(dim)
        self.ln_x = nn.LayerNorm(dim)
        self.attn = CrossAttention(dim, n_heads, dropout)
        self.drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, ffn_mult * dim, dropout)

    def forward(self, q: Tensor, x: Tensor) -> Tensor:
        """q: (B, M, D), x: (B, N, D) -> (B, M, D)."""
        q = q + self.drop(self.attn(self.ln_q(q), self.ln_x(x)))
        return q + self.mlp(self.ln2(q))


def init_weights(module: nn.Module) -> None:
    """Truncated-normal Linear weights (std 0.02), zero biases, as in ijepa/nanoGPT."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


__all__ = [
    "MLP",
    "Block",
    "CrossAttention",
    "CrossBlock",
    "SelfAttention",
    "init_weights",
]
