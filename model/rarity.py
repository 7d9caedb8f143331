"""The label-free head: how rare a window is among normal windows, for data without labels.

Where no incident is labelled, no probe can learn the risk of the next window. What
can be served is how unusual the current window is: the mean of its z-scored detector
scores (model/detectors.py), ranked among the same mean over calibration windows,
normal windows the detectors' reference did not include (training/calibrate.py). The
served risk is that rank, about the share of calibration windows scoring lower.
training/calibrate.py sets the threshold at each budget B (false alarms per 1,000
windows) on the calibration windows' own ranks, so that B of every 1,000 are at or
above it: the budget holds on the calibration data, and on new data as far as they
resemble it.

The head returns the rank as a logit (the served graph applies a sigmoid), clipped to
[:data:`EPS`, 1 - :data:`EPS`] so it stays finite. A comparison, two gathers and
arithmetic: it exports to ONNX with a dynamic batch axis.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

EPS = 1e-6


class Rarity(nn.Module):
    """Detector features (B, n) -> logit of the window's rank (B, 1)."""

    calibration: Tensor  # (N,) sorted mean detector scores of the calibration windows

    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("calibration", torch.zeros(n))

    @classmethod
    def from_state(cls, state: dict[str, Tensor]) -> Rarity:
        head = cls(len(state["calibration"]))
        head.load_state_dict(state)
        return head

    def forward(self, x: Tensor) -> Tensor:
        score = x.mean(1, keepdim=True)  # (B, 1)
        cal = self.calibration
        n = cal.shape[0]
        # between the sorted calibration scores c_i, at plotting positions
        # (i + 1) / (n + 1), the rank is interpolated linearly (the outer segments
        # extended), so it is continuous in the score: ONNX's float rounding moves it by
        # as little as it moves the score
        below = (score > cal.unsqueeze(0)).sum(1)  # (B,) calibration scores below
        hi = below.clamp(1, n - 1)
        lo = hi - 1
        c_lo, c_hi = cal[lo], cal[hi]
        step = (c_hi - c_lo).clamp_min(1e-12)
        rank = (lo.to(score.dtype) + 1.0 + (score.squeeze(1) - c_lo) / step) / (n + 1)
        rank = rank.clamp(EPS, 1.0 - EPS).unsqueeze(1)
        return torch.log(rank) - torch.log1p(-rank)
