"""Simple window features for the baselines (evaluation.md, protocol item 7)."""

from __future__ import annotations

import numpy as np

STATS = ("mean", "std", "min", "max", "last", "slope")


def channel_stats(x: np.ndarray) -> np.ndarray:
    """(N, T, V) windows -> (N, 6, V): per-channel mean, std, min, max, last value, slope."""
    t = np.arange(x.shape[1], dtype=np.float64)
    tc = (t - t.mean()) / ((t - t.mean()) ** 2).sum()  # least-squares slope weights
    slope = np.einsum("t,ntv->nv", tc, x)  # (N, V)
    return np.stack(
        [x.mean(1), x.std(1), x.min(1), x.max(1), x[:, -1], slope], axis=1
    ).astype(np.float32)  # (N, 6, V)


def pooled_stats(
    x: np.ndarray, pools: tuple[str, ...] = ("mean", "max", "min")
) -> np.ndarray:
    """(N, T, V) -> (N, 6 * len(pools)): each channel statistic pooled over channels.

    Channel-count independent, like the SC-JEPA probe's variable-wise max.
    """
    s = channel_stats(x)  # (N, 6, V)
    ops = {"mean": np.mean, "max": np.max, "min": np.min}
    return np.concatenate([ops[p](s, axis=2) for p in pools], axis=1)  # (N, 6 * pools)


class Standardizer:
    """Per-feature z-score fitted on one split (always the official train windows)."""

    def fit(self, f: np.ndarray) -> Standardizer:
        self.mean = f.mean(0)
        self.std = f.std(0) + 1e-6
        return self

    def __call__(self, f: np.ndarray) -> np.ndarray:
        return ((f - self.mean) / self.std).astype(np.float32)
