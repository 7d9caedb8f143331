"""`scjepa evaluate`: the anomaly-prediction protocol of evaluation.md, end to end.

    scjepa evaluate --dataset msl --root DIR --checkpoint runs/msl/best.pt --seeds 5 --out results/msl

Step 1 fits every method (baselines and SC-JEPA probes, every seed) and picks its
threshold on the train/validation splits; step 2 reads the test split once and scores
all of them. Writes results.json (everything a table needs, with split sizes, seeds,
config, git commit, wall time), results.md, test scores (scores.npz) and figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.baselines import (
    FitContext,
    Scorer,
    fit_always_positive,
    fit_knn,
    fit_logistic,
    fit_pca,
    fit_persistence,
    fit_random,
    raw_feature_probe,
)
from training.data import Dataset, Samples, cut_windows, downstream_splits
from training.metrics import (
    METRICS,
    best_f1_threshold,
    bootstrap_ci,
    brier,
    metrics,
    reliability,
)

FitFn = Callable[[FitContext, int], Scorer]
SUBSETS = ("all", "onset", "continuation")


@dataclass
class Fitted:
    seed: int
    scorer: Scorer
    threshold: float
    val: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)


def normal_windows(ds: Dataset, window: int = 100) -> np.ndarray:
    """Official TRAIN windows of every entity (masked channels), for label-free fits."""
    return np.concatenate(
        [cut_windows(e.train[:, ds.mask], window) for e in ds.entities]
    )


def baseline_methods(normal: np.ndarray) -> dict[str, FitFn]:
    return {
        "always-positive": fit_always_positive,
        "random": fit_random,
        "persistence (IForest)": fit_persistence,
        "kNN to train windows": fit_knn,
        "PCA reconstruction": fit_pca,
        "logistic, pooled stats": fit_logistic,
        "raw-feature probe (MLP)": raw_feature_probe(normal),
    }


def fit_methods(
    ctx: FitContext, methods: dict[str, FitFn], seeds: list[int]
) -> dict[str, list[Fitted]]:
    """Step 1: fit and threshold every method on train/val. Never sees the test split."""
    fitted: dict[str, list[Fitted]] = {}
    for name, fit in methods.items():
        fitted[name] = []
        for seed in seeds:
            scorer = fit(ctx, seed)
            s_val = scorer(ctx.val.x)
            thr = best_f1_threshold(ctx.val.y, s_val)
            probe = getattr(scorer, "probe", None)
            info = probe.state() if probe is not None else {}
            fitted[name].append(
                Fitted(seed, scorer, thr, metrics(ctx.val.y, s_val, thr), info)
            )
    return fitted


def _subset(s: Samples, name: str) -> np.ndarray:
    return {
        "all": np.ones(len(s), bool),
        "onset": s.cur == 0,
        "continuation": s.cur == 1,
    }[name]


def _summary(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        m: {
            "mean": float(np.nanmean([r[m] for r in rows])),
            "std": float(np.nanstd([r[m] for r in rows])),
        }
        for m in METRICS
    }


def score_test(
    fitted: dict[str, list[Fitted]], test: Samples, n_boot: int = 1000
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Step 2: the test split, read once: metrics per subset, seed mean/std, bootstrap CI."""
    rows: dict[str, Any] = {}
    scores: dict[str, np.ndarray] = {}
    for name, runs in fitted.items():
        s_test = [f.scorer(test.x) for f in runs]
        thr = [f.threshold for f in runs]
        scores[name] = np.stack(s_test)  # (seeds, N)
        row: dict[str, Any] = {
            "thresholds": thr,
            "val": _summary([f.val for f in runs]),
        }
        for sub in SUBSETS:
            m = _subset(test, sub)
            per_seed = [
                metrics(test.y[m], s[m], t) for s, t in zip(s_test, thr, strict=True)
            ]
            row[sub] = _summary(per_seed) | {
                "n": int(m.sum()),
                "positives": int(test.y[m].sum()),
            }
        row["ci95"] = bootstrap_ci(test.y, s_test, thr, n_boot=n_boot)
        if runs[0].info:
            row["probe"] = [f.info for f in runs]
            p = np.mean(s_test, axis=0)
            row["brier"] = brier(test.y, p)
            row["reliability"] = reliability(test.y, p)
        rows[name] = row
    return rows, scores


def split_summary(splits: dict[str, Samples]) -> dict[str, Any]:
    return {
        k: {
            "windows": len(s),
            "positives": int(s.y.sum()),
            "prevalence": float(s.y.mean()),
            "onsets": int(((s.cur == 0) & (s.y == 1)).sum()),
            "onset_windows": int((s.cur == 0).sum()),
        }
        for k, s in splits.items()
    }


def evaluate(
    ds: Dataset,
    methods: dict[str, FitFn],
    seeds: list[int],
    ctx_probe: Any,
    n_boot: int = 1000,
    splits: dict[str, Samples] | None = None,
) -> dict[str, Any]:
    """The whole protocol on one data set; returns the results dict (plus test scores)."""
    t0 = time.time()
    splits = splits or downstream_splits(ds)
    ctx = FitContext(splits["train"], splits["val"], normal_windows(ds), ctx_probe)
    fitted = fit_methods(ctx, methods, seeds)
    rows, scores = score_test(fitted, splits["test"], n_boot)
    return {
        "dataset": ds.name,
        "splits": split_summary(splits),
        "seeds": seeds,
        "rows": rows,
        "wall_time_s": time.time() - t0,
        "_scores": scores,
        "_test": splits["test"],
    }
