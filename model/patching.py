"""RevIN normalisation and the two views of a window: fine patches and DownAvg.

RevIN (Kim et al., ICLR 2022, https://openreview.net/forum?id=cGDAkQo1C0p) is applied per
window and per channel, without affine parameters; the statistics are returned so the
reconstruction can be de-normalised.
"""

from __future__ import annotations

import torch
from torch import Tensor


def revin(x: Tensor, eps: float = 1e-5) -> tuple[Tensor, Tensor, Tensor]:
    """Normalise over the last (time) axis. x: (..., T) -> (x_norm, mean, std), stats (..., 1).

    In float64, returned in x's dtype: in float32 the mean of a channel flat at
    98765.43 misses it by an ulp, and (x - mean) / sqrt(var + eps) turns that rounding
    into +-2.5, noise whose sign follows the summation order, so PyTorch and
    onnxruntime read a flat (forward-filled) channel as two different spiky ones. In
    float64 a flat channel is exactly 0 in both."""
    x64 = x.double()
    mean = x64.mean(dim=-1, keepdim=True)  # (..., 1)
    std = torch.sqrt(x64.var(dim=-1, keepdim=True, unbiased=False) + eps)  # (..., 1)
    return ((x64 - mean) / std).to(x.dtype), mean.to(x.dtype), std.to(x.dtype)


def revin_inverse(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Undo :func:`revin`; mean/std broadcast against x."""
    return x * std + mean


def patchify(x: Tensor, patch_len: int) -> Tensor:
    """Non-overlapping patches. x: (N, T) -> (N, P, L), P = T // L."""
    N, T = x.shape
    assert T % patch_len == 0, f"window of {T} steps is not a multiple of {patch_len}"
    return x.reshape(N, T // patch_len, patch_len)  # (N, P, L)


def down_avg(x: Tensor, n_patches: int) -> Tensor:
    """DownAvg_P: mean of each P consecutive steps (stride P). x: (N, T) -> (N, 1, T // P)."""
    N, T = x.shape
    return x.reshape(N, T // n_patches, n_patches).mean(-1).unsqueeze(1)  # (N, 1, L)


def fold_channels(x: Tensor) -> Tensor:
    """Channel independence: (B, T, V) raw windows -> (B*V, T) one-channel series."""
    B, T, V = x.shape
    return x.transpose(1, 2).reshape(B * V, T)  # (B*V, T)


def level_stats(mean: Tensor, std: Tensor) -> Tensor:
    """What RevIN removed, as the stats token's input: (..., 1) each -> (..., 2) of
    [mean, log std] (std already holds RevIN's eps, so the log is finite)."""
    return torch.cat([mean, torch.log(std)], dim=-1)
