"""Channel-independent patch encoder E: conv tokenizer, positions, pre-LN Transformer.

The same weights encode 1..P tokens, so the 5 fine patches of a window and its single
DownAvg patch share one encoder (target side encodes both in one pass, see
:meth:`PatchEncoder.forward` ``mask``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.layers import Block, init_weights


class PatchTokenizer(nn.Module):
    """Residual 1-D conv block over the L steps, then the MLP projection 64 -> 32 -> D.

    The conv features (C channels) are average-pooled to ``tok_pool`` steps, giving the
    C * tok_pool = 64 inputs of the paper's projection.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        C = cfg.tok_channels
        self.stem = nn.Conv1d(1, C, kernel_size=3, padding=1)
        self.conv1 = nn.Conv1d(C, C, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(C, C, kernel_size=3, padding=1)
        assert cfg.patch_len % cfg.tok_pool == 0, "patch_len must divide by tok_pool"
        self.tok_pool = cfg.tok_pool
        self.fc1 = nn.Linear(C * cfg.tok_pool, cfg.tok_hidden)
        self.fc2 = nn.Linear(cfg.tok_hidden, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        """x: (N, n, L) patches -> (N, n, D) tokens."""
        N, n, L = x.shape
        y = self.stem(x.reshape(N * n, 1, L))  # (N*n, C, L)
        y = y + self.conv2(F.gelu(self.conv1(F.gelu(y))))  # residual conv block
        # Average pool to tok_pool steps as a reshape + mean: exports to ONNX with a
        # dynamic batch (adaptive pooling does not) and equals AdaptiveAvgPool1d here.
        y = y.view(N * n, -1, self.tok_pool, L // self.tok_pool).mean(-1).flatten(1)
        y = self.fc2(F.gelu(self.fc1(y)))  # (N*n, D)
        return y.view(N, n, -1)  # (N, n, D)


class PatchEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.tokenizer = PatchTokenizer(cfg)
        self.pos = nn.Parameter(0.02 * torch.randn(cfg.n_patches, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, cfg.n_heads, cfg.ffn_mult, cfg.dropout)
            for _ in range(cfg.n_layers)
        )
        self.ln = nn.LayerNorm(cfg.d_model)
        self.stats_proj: nn.Sequential | None = None
        if cfg.stats_token:  # [mean, log std] of the raw channel window -> one token
            self.stats_proj = nn.Sequential(
                nn.Linear(2, cfg.tok_hidden),
                nn.GELU(),
                nn.Linear(cfg.tok_hidden, cfg.d_model),
            )
            self.stats_pos = nn.Parameter(0.02 * torch.randn(cfg.d_model))
        init_weights(self)

    def forward(
        self,
        patches: Tensor,
        pos: Tensor | None = None,
        mask: Tensor | None = None,
        stats: Tensor | None = None,
    ) -> Tensor:
        """patches: (N, n, L) -> h: (N, n, D), or (N, n + 1, D) with ``stats``.

        ``pos`` (n,) picks each token's position (default 0..n-1); ``mask`` bool
        restricts attention, e.g. block-diagonal to encode two views in one pass (it
        covers the stats token too, last). ``stats`` (N, 2): the window's level and
        scale (:func:`model.patching.level_stats`), appended as the last token.
        """
        n = patches.shape[1]
        assert n <= self.pos.shape[0] or pos is not None, (
            f"{n} tokens > {self.pos.shape[0]}"
        )
        pe = self.pos[:n] if pos is None else self.pos[pos]  # (n, D)
        x = self.tokenizer(patches) + pe  # (N, n, D)
        if stats is not None:
            assert self.stats_proj is not None, "this encoder has no stats token"
            tok = self.stats_proj(stats) + self.stats_pos  # (N, D)
            x = torch.cat([x, tok.unsqueeze(1)], dim=1)  # (N, n + 1, D)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, mask)
        return self.ln(x)
