"""Metrics other benchmarks publish, computed on our alerts so a row can be set beside
their leaderboards (the protocols still differ; docs/reference/results.md says how).

SKAB (waico/SKAB, ``core/metrics.py``: ``chp_score``, as its notebooks call it):

- outlier detection, ``metric="binary"``: point-wise confusion of the predicted 0/1
  series against the ``anomaly`` column, summed over runs; F1 = TP / (TP + (FN + FP) / 2),
  FAR = FP / (FP + TN) in %, MAR = FN / (FN + TP) in %;
- changepoint detection, ``metric="nab"`` with ``window_width="60s"``,
  ``anomaly_window_destination="righter"``: a detection window [cp, cp + 60 s] after
  each true change point (the ``changepoint`` column; overlapping windows: "cut right
  window"), predicted change points = |diff| of the predicted series (its first value
  counted as one); per window the first prediction inside is a TP scored by SKAB's
  "improved" scale function (A_tp at the window's start falling to A_fp at its end),
  a window with none costs A_fn, every prediction outside all windows costs A_fp;
  NAB = 100 (S - S_null) / (S_perfect - S_null) over all runs, for the Standard
  (A_fp = -0.11, A_fn = -1), LowFP (-0.22, -1) and LowFN (-0.11, -2) profiles.

Our windows predict the NEXT window; a step's predicted label is the alert state of
the last window scored before it (what the service shows between two scores), 0 before
the first score.

Daphnet (pre-freeze classification): windows whose own steps hold no freeze are
*pre-freeze* when a freeze begins at most ``lookback`` steps after their end, *normal*
when no freeze step lies in those steps; sensitivity = share of
pre-freeze windows in alert, specificity = share of normal windows not in alert.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from training.evaluate.events import events

NAB_PROFILES = {
    "Standard": (-0.11, -1.0),
    "LowFP": (-0.22, -1.0),
    "LowFN": (-0.11, -2.0),
}
NAB_WINDOW_S = 60.0
# SKAB's README leaderboards (test split), quoted for comparison, not recomputed
SKAB_PUBLISHED = {
    "outlier": "Conv-AE F1 0.78 / FAR 13.55 % / MAR 28.02 %",
    "changepoint": "MSCRED NAB (standard) 32.42",
}


def point_predictions(n_steps: int, ends: np.ndarray, alerts: np.ndarray) -> np.ndarray:
    """(n_steps,) 0/1: each step takes the alert of the last window ending at or before
    it (a window ending at e is scored once steps < e are in), 0 before the first."""
    ends = np.asarray(ends, dtype=np.int64)
    order = np.argsort(ends, kind="stable")
    ends, alerts = ends[order], np.asarray(alerts, dtype=bool)[order]
    k = np.searchsorted(ends, np.arange(n_steps), side="right") - 1  # last end <= t
    out = np.zeros(n_steps, dtype=np.int8)
    ok = k >= 0
    out[ok] = alerts[k[ok]]
    return out


def skab_binary(
    labels: Sequence[np.ndarray], preds: Sequence[np.ndarray]
) -> dict[str, float]:
    """SKAB's outlier-detection F1, FAR (%), MAR (%) over runs (``chp_score`` binary)."""
    tp = tn = fp = fn = 0
    for y, p in zip(labels, preds, strict=True):
        y, p = np.asarray(y) == 1, np.asarray(p) == 1
        tp += int((y & p).sum())
        tn += int((~y & ~p).sum())
        fp += int((~y & p).sum())
        fn += int((y & ~p).sum())
    return {
        "f1": tp / (tp + (fn + fp) / 2) if tp + fn + fp else float("nan"),
        "far": 100 * fp / (fp + tn) if fp + tn else float("nan"),
        "mar": 100 * fn / (fn + tp) if fn + tp else float("nan"),
    }


def _scale(start: float, t: float, end: float, a_tp: float, a_fp: float) -> float:
    """SKAB's "improved" NAB scale function (``my_scale``, detalization 1000)."""
    x = np.linspace(-np.pi / 2, np.pi / 2, 1000)
    y = (a_tp - a_fp) / 2 * -np.tanh(x) / np.tanh(np.pi / 2) + (a_tp - a_fp) / 2 + a_fp
    event = int((t - start) / (end - start) * 1000) if end > start else 0
    return float(y[min(event, len(x) - 1)])


def _nab_windows(cp_times: np.ndarray, width: float) -> list[list[float]]:
    """[cp, cp + width] per change point; overlaps resolved by "cut right window"."""
    wins = [[float(t), float(t) + width] for t in cp_times]
    for i in range(len(wins) - 1):
        if wins[i][1] >= wins[i + 1][0]:
            wins[i + 1][0] = wins[i][1]
    return wins


def _nab_run(
    cp_times: np.ndarray, pred_times: np.ndarray, width: float
) -> dict[str, tuple[float, float, float]]:
    """(score, null, perfect) per profile for one run, as ``single_evaluate_nab``."""
    wins = _nab_windows(cp_times, width)
    t = np.sort(np.asarray(pred_times, dtype=np.float64))
    if wins:
        fp = int((t < wins[0][0]).sum())
        for i in range(len(wins) - 1):
            fp += int(((t > wins[i][1]) & (t < wins[i + 1][0])).sum())
        fp += int((t > wins[-1][1]).sum())
    else:
        fp = len(t)
    tps: list[tuple[float, float, float]] = []
    fn = 0
    for lo, hi in wins:
        inside = t[(t >= lo) & (t <= hi)]
        if len(inside):
            tps.append((lo, float(inside[0]), hi))
        else:
            fn += 1
    out = {}
    for name, (a_fp, a_fn) in NAB_PROFILES.items():
        score = a_fp * fp + a_fn * fn + sum(_scale(*w, 1.0, a_fp) for w in tps)
        out[name] = (score, len(wins) * a_fn, len(wins) * 1.0)
    return out


def skab_nab(
    changepoints: Sequence[np.ndarray],
    preds: Sequence[np.ndarray],
    times: Sequence[np.ndarray],
    width: float = NAB_WINDOW_S,
) -> dict[str, float]:
    """SKAB's NAB scores (Standard, LowFP, LowFN) over runs: true change points from
    each run's ``changepoint`` column, predicted ones where its 0/1 prediction
    changes (and its first step, when 1); ``times`` in seconds."""
    total = {name: np.zeros(3) for name in NAB_PROFILES}
    for cp, p, ts in zip(changepoints, preds, times, strict=True):
        p = np.asarray(p, dtype=np.int64)
        changes = np.abs(np.diff(p, prepend=0)) == 1  # first step: its own value
        ts = np.asarray(ts, dtype=np.float64)
        run = _nab_run(ts[np.asarray(cp) == 1], ts[changes], width)
        for name, v in run.items():
            total[name] += v
    return {
        name: float(100 * (s - null) / (perfect - null))
        if perfect != null
        else float("nan")
        for name, (s, null, perfect) in total.items()
    }


def prefreeze(
    labels: Sequence[np.ndarray],
    ends: Sequence[np.ndarray],
    alerts: Sequence[np.ndarray],
    window: int,
    lookback: int,
) -> dict[str, float]:
    """Pre-freeze sensitivity and specificity of windows (see the module docstring),
    pooled over stretches; also the window counts they rest on."""
    pre_hit = pre_n = norm_ok = norm_n = 0
    for y, e, a in zip(labels, ends, alerts, strict=True):
        y = np.asarray(y).astype(np.int64)
        e = np.asarray(e, dtype=np.int64)
        a = np.asarray(a, dtype=bool)
        c = np.r_[0, np.cumsum(y)]
        hi = np.minimum(e + lookback + 1, len(y))
        own = c[e] - c[np.maximum(e - window, 0)] > 0  # a freeze step in the window
        ahead = c[hi] - c[e] > 0  # a freeze step in [e, e + lookback]
        onsets = events(y)[:, 0]
        onsets = onsets[onsets > 0]
        nxt = np.searchsorted(onsets, e, side="left")
        padded = np.r_[onsets, np.iinfo(np.int64).max // 2]
        pre = ~own & (padded[nxt] - e <= lookback)
        normal = ~own & ~ahead
        pre_hit += int((a & pre).sum())
        pre_n += int(pre.sum())
        norm_ok += int((~a & normal).sum())
        norm_n += int(normal.sum())
    return {
        "sensitivity": pre_hit / pre_n if pre_n else float("nan"),
        "specificity": norm_ok / norm_n if norm_n else float("nan"),
        "prefreeze_windows": pre_n,
        "normal_windows": norm_n,
    }
