"""Simple window features for the baselines (evaluation.md, protocol item 7)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


def channel_stats(x: np.ndarray) -> np.ndarray:
    """(N, T, V) windows -> (N, 6, V) float64: per-channel mean, std, min, max, last
    value, slope.

    Computed in float64, as model/stats.py computes them in the served graph: in
    float32, numpy, PyTorch and onnxruntime sum in different orders and land a few
    ulps apart, and a tree probe's split can fall between them (tests/training/test_export.py).
    """
    t = np.arange(x.shape[1], dtype=np.float64)
    tc = (t - t.mean()) / ((t - t.mean()) ** 2).sum()  # least-squares slope weights
    out = np.empty((len(x), 6, x.shape[2]))
    for i in range(0, len(x), 1024):  # a float64 copy of 1,024 windows at a time
        c = np.asarray(x[i : i + 1024], dtype=np.float64)
        slope = np.einsum("t,ntv->nv", tc, c)  # (n, V)
        out[i : i + 1024] = np.stack(
            [c.mean(1), c.std(1), c.min(1), c.max(1), c[:, -1], slope], axis=1
        )
    return out


def pooled_stats(
    x: np.ndarray, pools: tuple[str, ...] = ("mean", "max", "min")
) -> np.ndarray:
    """(N, T, V) -> (N, 6 * len(pools)) float64: each channel statistic pooled over
    channels.

    Channel-count independent, like the SC-JEPA probe's variable-wise max.
    """
    s = channel_stats(x)  # (N, 6, V)
    ops: dict[str, Callable[..., np.ndarray]] = {
        "mean": np.mean,
        "max": np.max,
        "min": np.min,
    }
    return np.concatenate([ops[p](s, axis=2) for p in pools], axis=1)  # (N, 6 * pools)


class Standardizer:
    """Per-feature z-score fitted on one split (always the official train windows);
    computed in float64, returned as float32."""

    def fit(self, f: np.ndarray) -> Standardizer:
        f = np.asarray(f, dtype=np.float64)
        self.mean = f.mean(0)
        self.std = f.std(0) + 1e-6
        return self

    def __call__(self, f: np.ndarray) -> np.ndarray:
        return ((np.asarray(f, dtype=np.float64) - self.mean) / self.std).astype(
            np.float32
        )


class PerArrayCache(Generic[T]):
    """``fn(x)``, computed once per input array (by identity).

    Evaluation refits the probe for every seed on the same train/val/test arrays; a
    featurizer wrapped in this encodes each of them once. An entry holds its array, so
    that array's id cannot be reused by another while the cache lives.
    """

    def __init__(self, fn: Callable[[np.ndarray], T]) -> None:
        self.fn = fn
        self._hits: dict[int, tuple[np.ndarray, T]] = {}

    def __call__(self, x: np.ndarray) -> T:
        hit = self._hits.get(id(x))
        if hit is None or hit[0] is not x:
            hit = (x, self.fn(x))
            self._hits[id(x)] = hit
        return hit[1]
