"""Window-level metrics of anomaly prediction (evaluation.md, protocol items 4-6).

Pure numpy, no point adjustment. Scores are "higher = more anomalous"; a prediction is
positive when ``score >= threshold``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

METRICS = ("precision", "recall", "f1", "roc_auc", "pr_auc")


def _ranks(s: np.ndarray) -> np.ndarray:
    """1-based ranks with ties sharing their average rank."""
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    # boundaries of runs of equal scores
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    avg = (starts + ends + 1) / 2.0  # mean of ranks start+1 .. end
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def roc_auc(y: np.ndarray, s: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counted half; NaN if one class."""
    y = np.asarray(y).astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = _ranks(np.asarray(s, dtype=np.float64))
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def pr_auc(y: np.ndarray, s: np.ndarray) -> float:
    """Average precision: sum over distinct thresholds of (R_k - R_{k-1}) * P_k."""
    y = np.asarray(y).astype(bool)
    n_pos = int(y.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-np.asarray(s, dtype=np.float64), kind="mergesort")
    s_sorted, y_sorted = np.asarray(s)[order], y[order]
    tp = np.cumsum(y_sorted)
    last = np.r_[np.flatnonzero(np.diff(s_sorted)), len(s_sorted) - 1]  # tie runs' ends
    tp, k = tp[last], last + 1
    precision, recall = tp / k, tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def confusion(
    y: np.ndarray, s: np.ndarray, threshold: float | np.ndarray
) -> dict[str, float]:
    """Precision, recall, F1 of the anomaly class. On windows without a positive,
    recall and F1 are undefined: NaN (n/a in the tables, not a zero), and so is
    precision unless some window was flagged (then 0: every alert false); with
    positives, a threshold flagging nothing has precision 0 (the usual convention)."""
    y = np.asarray(y).astype(bool)
    pred = np.asarray(s) >= threshold
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    if not tp + fn:
        nan = float("nan")
        return {"precision": 0.0 if fp else nan, "recall": nan, "f1": nan}
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def metrics(
    y: np.ndarray, s: np.ndarray, threshold: float | np.ndarray
) -> dict[str, float]:
    """Precision, recall, F1 (anomaly class) at ``threshold``; ROC AUC; PR AUC."""
    return confusion(y, s, threshold) | {
        "roc_auc": roc_auc(y, s),
        "pr_auc": pr_auc(y, s),
    }


def best_f1_threshold(y: np.ndarray, s: np.ndarray) -> float:
    """The threshold maximising F1 on (validation) data; among ties, the highest one.

    Candidates are the distinct scores; all predicted positive is always a candidate.
    """
    y = np.asarray(y).astype(bool)
    s = np.asarray(s, dtype=np.float64)
    if not y.any():
        # nothing to find: predict no positive (above the top score at any scale)
        top = float(s.max())
        return top + 1e-12 if top + 1e-12 > top else float(np.nextafter(top, np.inf))
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    tp = np.cumsum(y_sorted)
    last = np.r_[np.flatnonzero(np.diff(s_sorted)), len(s) - 1]
    tp, k = tp[last], last + 1
    f1 = 2 * tp / (k + y.sum())
    best = int(np.flatnonzero(f1 == f1.max())[0])  # first = highest threshold
    return float(s_sorted[last[best]])


def brier(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean((np.asarray(p, dtype=np.float64) - np.asarray(y)) ** 2))


def reliability(y: np.ndarray, p: np.ndarray, bins: int = 10) -> dict[str, list[float]]:
    """Mean predicted vs observed frequency per probability bin (empty bins omitted)."""
    idx = np.minimum((np.asarray(p) * bins).astype(int), bins - 1)
    out: dict[str, list[float]] = {"predicted": [], "observed": [], "count": []}
    for b in range(bins):
        m = idx == b
        if m.any():
            out["predicted"].append(float(np.mean(p[m])))
            out["observed"].append(float(np.mean(y[m])))
            out["count"].append(int(m.sum()))
    return out


def bootstrap_ci(
    y: np.ndarray,
    scores: list[np.ndarray],
    thresholds: Sequence[float | np.ndarray],
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, tuple[float, float]]:
    """95 % percentile interval of the seed-mean of each metric, test windows resampled.

    ``scores``/``thresholds`` hold one entry per seed (a threshold: a float, or one per
    window where folds chose their own); every resample is shared by all seeds, so the
    interval is that of the number the table reports (the mean over seeds).
    """
    rng = np.random.default_rng(seed)
    n = len(y)
    samples: dict[str, list[float]] = {m: [] for m in METRICS}
    for _ in range(n_boot):
        i = rng.integers(0, n, n)
        per_seed = [
            metrics(y[i], s[i], t[i] if isinstance(t, np.ndarray) else t)
            for s, t in zip(scores, thresholds, strict=True)
        ]
        with warnings.catch_warnings():  # a resample where no seed has the figure
            warnings.simplefilter("ignore", RuntimeWarning)
            for m in METRICS:
                samples[m].append(float(np.nanmean([r[m] for r in per_seed])))
    lo, hi = 100 * alpha / 2, 100 * (1 - alpha / 2)
    with warnings.catch_warnings():  # NaN: no resample has it
        warnings.simplefilter("ignore", RuntimeWarning)
        return {
            m: (float(np.nanpercentile(v, lo)), float(np.nanpercentile(v, hi)))
            for m, v in samples.items()
        }
