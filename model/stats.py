"""Pooled window statistics as probe features: the level and scale that RevIN removes.

The same definition as ``training.evaluate.features.pooled_stats`` (per-channel mean, std, min,
max, last value and least-squares slope, each pooled over channels by mean, max and min:
18 features, channel-count independent), z-scored with the official train windows'
statistics. This module is the one inside the served graph; a test holds the two equal.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

N_STATS = 18  # 6 statistics x 3 pools


class WindowStats(nn.Module):
    """Computed in float64, cast to float32 at the end: in float32, PyTorch and
    onnxruntime (and the numpy featurizer the probe was fitted on) sum in different
    orders and land a few ulps apart, enough to send a window on a tree probe's split
    either way. In float64 they agree to far below float32's resolution."""

    tc: Tensor  # (T,) least-squares slope weights
    mean: Tensor  # (18,) train-set scaling of the features
    std: Tensor  # (18,)

    def __init__(self, mean: list[float], std: list[float], seq_len: int) -> None:
        super().__init__()
        assert len(mean) == len(std) == N_STATS, f"expected {N_STATS} statistics"
        t = torch.arange(seq_len, dtype=torch.float64)
        tc = (t - t.mean()) / ((t - t.mean()) ** 2).sum()  # least-squares slope weights
        self.register_buffer("tc", tc, persistent=False)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float64))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float64))

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, T, V) raw windows (kept channels) -> (B, 18) standardized features."""
        x = x.double()
        slope = torch.einsum("t,btv->bv", self.tc, x)  # (B, V)
        # (B, 6, V): per channel mean, std, min, max, last value, slope
        stats = [
            x.mean(1),
            x.std(1, correction=0),
            x.amin(1),
            x.amax(1),
            x[:, -1],
            slope,
        ]
        s = torch.stack(stats, dim=1)
        f = torch.cat([s.mean(2), s.amax(2), s.amin(2)], dim=1)  # (B, 18)
        return ((f - self.mean) / self.std).float()
