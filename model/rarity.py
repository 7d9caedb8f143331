"""The label-free head: how rare a window is among normal windows, for data without labels.

Where no incident is labelled, no probe can learn the risk of the next window. What
can be served is how unusual the current window is: the mean of its z-scored detector
scores (model/detectors.py), ranked among the same mean over calibration windows,
normal windows the detectors' reference did not include (training/calibrate.py). The
served risk is that rank, the share of calibration windows scoring lower, smoothed by
a Gaussian kernel (Silverman's bandwidth) so that it is smooth in the score.
training/calibrate.py sets the threshold at each budget B (false alarms per 1,000
windows) on the calibration windows' own ranks, so that B of every 1,000 are at or
above it: the budget holds on the calibration data, and on new data as far as they
resemble it.

The head returns the rank as a logit (the served graph applies a sigmoid), clipped to
[:data:`EPS`, 1 - :data:`EPS`] so it stays finite. Arithmetic and erf: it exports to
ONNX with a dynamic batch axis.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

EPS = 1e-6


class Rarity(nn.Module):
    """Detector features (B, n) -> logit of the window's rank (B, 1)."""

    calibration: Tensor  # (N,) sorted mean detector scores of the calibration windows
    bandwidth: Tensor  # () the Gaussian kernel's width, in the scores' units

    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("calibration", torch.zeros(n))
        self.register_buffer("bandwidth", torch.tensor(1.0))

    @classmethod
    def from_state(cls, state: dict[str, Tensor]) -> Rarity:
        head = cls(len(state["calibration"]))
        head.load_state_dict(state)
        return head

    def forward(self, x: Tensor) -> Tensor:
        score = x.mean(1, keepdim=True)  # (B, 1)
        # the calibration scores' distribution function, smoothed by a Gaussian
        # kernel: a step rank would jump by 1 / N where ONNX's rounding moves a score
        # across a calibration score, and near-tied ones are common (periodic data)
        u = (score - self.calibration.unsqueeze(0)) / self.bandwidth  # (B, N)
        rank = (0.5 * (1.0 + torch.erf(u * 0.7071067811865476))).mean(1, keepdim=True)
        rank = rank.clamp(EPS, 1.0 - EPS)
        return torch.log(rank) - torch.log1p(-rank)


def bandwidth(scores: Tensor) -> float:
    """Silverman's rule of thumb for ``scores`` (at least 1e-6)."""
    sd = float(scores.std())
    q = torch.quantile(scores.double(), torch.tensor([0.25, 0.75], dtype=torch.float64))
    iqr = float(q[1] - q[0]) / 1.349
    spread = min(sd, iqr) if iqr > 0 else sd
    return max(0.9 * spread * len(scores) ** -0.2, 1e-6)
