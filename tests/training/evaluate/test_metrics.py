"""Metric code against brute-force recomputation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from training.evaluate.metrics import (
    best_f1_threshold,
    bootstrap_ci,
    confusion,
    pr_auc,
    roc_auc,
)


def brute_auc(y, s):
    pos, neg = s[y == 1], s[y == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def brute_ap(y, s):
    ap, prev_recall = 0.0, 0.0
    for t in sorted(set(s), reverse=True):
        pred = s >= t
        tp = (pred & (y == 1)).sum()
        p, r = tp / pred.sum(), tp / y.sum()
        ap += (r - prev_recall) * p
        prev_recall = r
    return ap


def brute_f1(y, s, t):
    pred = s >= t
    tp, fp, fn = (
        (pred & (y == 1)).sum(),
        (pred & (y == 0)).sum(),
        (~pred & (y == 1)).sum(),
    )
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


@pytest.mark.parametrize("seed", range(6))
def test_against_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    y = (rng.random(n) < 0.3).astype(int)
    y[0], y[1] = 1, 0
    s = np.round(rng.random(n) + 0.5 * y, 1)  # coarse rounding: many ties
    assert roc_auc(y, s) == pytest.approx(brute_auc(y, s))
    assert pr_auc(y, s) == pytest.approx(brute_ap(y, s))
    for t in np.unique(s):
        assert confusion(y, s, t)["f1"] == pytest.approx(brute_f1(y, s, t))
    t = best_f1_threshold(y, s)
    assert brute_f1(y, s, t) == pytest.approx(
        max(brute_f1(y, s, u) for u in np.unique(s))
    )


def test_degenerate_cases() -> None:
    assert np.isnan(roc_auc(np.zeros(5), np.arange(5)))
    assert np.isnan(pr_auc(np.zeros(5), np.arange(5)))
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert confusion(np.array([1, 0]), np.array([0.0, 0.0]), 0.5)["f1"] == 0.0
    # always-positive F1 = 2p / (1 + p)
    y = np.array([1, 0, 0, 0])
    assert confusion(y, np.ones(4), 1.0)["f1"] == pytest.approx(2 * 0.25 / 1.25)


def test_bootstrap_interval_contains_point_estimate() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random(300) < 0.2).astype(int)
    s = rng.random(300) + 0.5 * y
    ci = bootstrap_ci(y, [s], [1.0], n_boot=200)
    lo, hi = ci["roc_auc"]
    assert lo < roc_auc(y, s) < hi and hi - lo < 0.2
