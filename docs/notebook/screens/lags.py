"""Screen, on validation only: do the previous windows' detector scores help a probe
predict the next window? (results-notes.md, 2026-11-27)

    python docs/notebook/screens/lags.py msl      # or smd; data root: $SCJEPA_DATA

The downstream train / validation splits of `scjepa evaluate` (fold 0; the test split
is not read). Detector scores of each hop window: log kNN distance (window statistics)
and log PCA reconstruction error, fitted on the official train windows as the
baselines are (training/evaluate/baselines.py). Inputs: the current window's scores;
the same plus the previous 1 or 3 windows' scores and the differences (a window with no
predecessor repeats its own); with the window statistics beside them. Two probes per
input set (logistic regression; gradient-boosted trees), fitted on train, scored on
validation: ROC AUC, PR AUC, onset AUC (windows that are normal themselves).
"""

import sys

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score

from training.data import downstream_splits, load_dataset
from training.data.windows import cut_windows
from training.evaluate.baselines import FitContext, fit_knn, fit_pca
from training.evaluate.features import channel_stats

name = sys.argv[1]
ds = load_dataset(name)
sp = downstream_splits(ds)
tr, va = sp["train"], sp["val"]
normal = np.concatenate(
    [cut_windows(e.train[:, ds.mask], 100) for e in ds.entities if len(e.train) >= 100]
).astype(np.float32)
ctx = FitContext(tr, va, normal, None)  # type: ignore[arg-type]
knn, pca = fit_knn(ctx, 0), fit_pca(ctx, 0)


def scores(s):
    stats = channel_stats(s.x.astype(np.float64)).reshape(len(s), -1)
    return np.c_[np.log1p(knn(s.x)), np.log(pca(s.x) + 1e-8)], stats


def lagged(s, d, lags):
    at = {(e, t): i for i, (e, t) in enumerate(zip(s.entity, s.t, strict=True))}
    cols = [d]
    for k in range(1, lags + 1):
        prev = np.array(
            [at.get((e, t - k), -1) for e, t in zip(s.entity, s.t, strict=True)]
        )
        lag = np.where(prev[:, None] >= 0, d[np.maximum(prev, 0)], d)
        cols += [lag, d - lag]
    return np.concatenate(cols, 1)


(dtr, str_), (dva, sva) = scores(tr), scores(va)
sets = {
    "detectors (current window)": (dtr, dva),
    "detectors + 1 previous": (lagged(tr, dtr, 1), lagged(va, dva, 1)),
    "detectors + 3 previous": (lagged(tr, dtr, 3), lagged(va, dva, 3)),
    "stats + detectors": (np.c_[dtr, str_], np.c_[dva, sva]),
    "stats + detectors + 3 previous": (
        np.c_[lagged(tr, dtr, 3), str_],
        np.c_[lagged(va, dva, 3), sva],
    ),
}
on = va.cur == 0
print(
    f"{name}: validation {len(va)} windows, {va.y.sum()} positive, {va.y[on].sum()} onset"
)
for label, (xtr, xva) in sets.items():
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-9
    for probe in (
        LogisticRegression(max_iter=2000),
        HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=0
        ),
    ):
        p = probe.fit((xtr - mu) / sd, tr.y).predict_proba((xva - mu) / sd)[:, 1]
        print(
            f"{label:32s} {type(probe).__name__[:8]:8s} ROC {roc_auc_score(va.y, p):.3f} "
            f"PR {average_precision_score(va.y, p):.3f} "
            f"onset {roc_auc_score(va.y[on], p[on]):.3f}"
        )
