"""Baseline rows every results table carries (evaluation.md, protocol item 7).

Each ``fit_*`` takes the fitting context (downstream train/val samples and the official
train windows, never the test split) and a seed, and returns a scoring function
windows (N, T, V) -> scores (N,), higher = more likely that the next window is anomalous.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from sklearn.decomposition import PCA
from sklearn.ensemble import IsolationForest
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import NearestNeighbors

from training.data import Samples
from training.features import Standardizer, channel_stats, pooled_stats
from training.metrics import pr_auc
from training.probe import Probe, ProbeConfig

Scorer = Callable[[np.ndarray], np.ndarray]


@dataclass
class FitContext:
    train: Samples  # downstream train split (official test series, first 60 %)
    val: Samples  # downstream validation split
    normal: (
        np.ndarray
    )  # (N, T, V) official TRAIN windows: label-free detectors fit here
    probe: ProbeConfig


def fit_always_positive(ctx: FitContext, seed: int) -> Scorer:
    return lambda x: np.ones(len(x))


def fit_random(ctx: FitContext, seed: int) -> Scorer:
    rng = np.random.default_rng(seed)
    return lambda x: rng.random(len(x))


def _flat_stats(x: np.ndarray) -> np.ndarray:
    return channel_stats(x).reshape(len(x), -1)  # (N, 6 * V)


def fit_persistence(ctx: FitContext, seed: int) -> Scorer:
    """ "The next window is like this one": IsolationForest on the current window's stats."""
    scale = Standardizer().fit(_flat_stats(ctx.normal))
    forest = IsolationForest(n_estimators=200, random_state=seed).fit(
        scale(_flat_stats(ctx.normal))
    )
    return lambda x: -forest.score_samples(scale(_flat_stats(x)))


def fit_knn(ctx: FitContext, seed: int, k: int = 5) -> Scorer:
    """Mean distance to the k nearest official-train windows (per-channel stats)."""
    scale = Standardizer().fit(_flat_stats(ctx.normal))
    nn_ = NearestNeighbors(n_neighbors=min(k, len(ctx.normal))).fit(
        scale(_flat_stats(ctx.normal))
    )
    return lambda x: nn_.kneighbors(scale(_flat_stats(x)))[0].mean(1)


def fit_pca(ctx: FitContext, seed: int, variance: float = 0.9) -> Scorer:
    """Reconstruction error of the current window by a PCA of official-train windows."""
    flat = ctx.normal.reshape(len(ctx.normal), -1)
    pca = PCA(n_components=variance, svd_solver="full", random_state=seed).fit(flat)

    def score(x: np.ndarray) -> np.ndarray:
        f = x.reshape(len(x), -1)
        return ((f - pca.inverse_transform(pca.transform(f))) ** 2).mean(1)

    return score


def _predict_lr(
    lr: LogisticRegression, scale: Standardizer, pools: tuple[str, ...], x: np.ndarray
) -> np.ndarray:
    return lr.predict_proba(scale(pooled_stats(x, pools)))[:, 1]


def fit_logistic(ctx: FitContext, seed: int) -> Scorer:
    """Logistic regression on channel-pooled window statistics.

    The pooling (mean; mean/max/min) and the regularisation C are chosen on validation
    PR AUC, so the baseline is as strong as the protocol allows without the test split.
    """
    best: tuple[float, Scorer] | None = None
    for pools in (("mean",), ("mean", "max", "min")):
        scale = Standardizer().fit(pooled_stats(ctx.normal, pools))
        for c in (0.01, 0.1, 1.0):
            lr = LogisticRegression(C=c, max_iter=5000, random_state=seed)
            lr.fit(scale(pooled_stats(ctx.train.x, pools)), ctx.train.y)
            scorer = partial(_predict_lr, lr, scale, pools)
            val = pr_auc(ctx.val.y, scorer(ctx.val.x))
            if best is None or val > best[0]:
                best = (val, scorer)
    assert best is not None
    return best[1]


def fit_feature_probe(
    featurize: Callable[[np.ndarray], np.ndarray],
) -> Callable[[FitContext, int], Scorer]:
    """The SC-JEPA probe (MLP, BCE, calibrated on val) on any featurizer's output."""

    def fit(ctx: FitContext, seed: int) -> Scorer:
        f_tr, f_va = featurize(ctx.train.x), featurize(ctx.val.x)
        probe = Probe(f_tr.shape[1], ctx.probe, seed).fit(
            f_tr, ctx.train.y, f_va, ctx.val.y
        )
        scorer = lambda x: probe.predict(featurize(x))  # noqa: E731
        scorer.probe = probe  # type: ignore[attr-defined]
        return scorer

    return fit


class WindowStatsFeatures:
    """Featurizer: pooled window statistics, z-scored on the official train windows.

    ``scale`` (its mean and std) goes into a served graph that uses these features
    (model/stats.py computes the same statistics inside the graph).
    """

    def __init__(self, normal: np.ndarray) -> None:
        self.scale = Standardizer().fit(pooled_stats(normal))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.scale(pooled_stats(x))


def window_stats(normal: np.ndarray) -> WindowStatsFeatures:
    return WindowStatsFeatures(normal)


def raw_feature_probe(ctx_normal: np.ndarray) -> Callable[[FitContext, int], Scorer]:
    return fit_feature_probe(window_stats(ctx_normal))
