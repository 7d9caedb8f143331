"""What the screens share: the official train windows (the label-free detectors'
reference), the kNN and PCA baselines' scores, and the two probes every screen fits on
train and scores on validation."""

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score

from training.data import Dataset, Samples
from training.data.windows import cut_windows
from training.evaluate.baselines import FitContext, fit_knn, fit_pca


def official_train_windows(ds: Dataset) -> np.ndarray:
    """(N, 100, V kept) float32: every entity's official train series, hop 100."""
    return np.concatenate(
        [
            cut_windows(e.train[:, ds.mask], 100)
            for e in ds.entities
            if len(e.train) >= 100
        ]
    ).astype(np.float32)


def detector_scores(normal: np.ndarray):
    """Samples -> (N, 2): log kNN distance and log PCA error of each window, the
    baselines fitted on ``normal`` as `scjepa evaluate` fits them."""
    ctx = FitContext(None, None, normal, None)  # type: ignore[arg-type]
    knn, pca = fit_knn(ctx, 0), fit_pca(ctx, 0)

    def score(s: Samples) -> np.ndarray:
        return np.c_[np.log1p(knn(s.x)), np.log(pca(s.x) + 1e-8)]

    return score


def sklearn_probes():
    """Logistic regression and gradient-boosted trees, unfitted."""
    return (
        LogisticRegression(max_iter=3000, C=0.1),
        HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=0
        ),
    )


def aucs(y: np.ndarray, onset: np.ndarray, p: np.ndarray) -> str:
    """ "ROC / PR / onset AUC" of scores p; onset: the windows that are normal."""
    return (
        f"{roc_auc_score(y, p):.3f} / {average_precision_score(y, p):.3f}"
        f" / {roc_auc_score(y[onset], p[onset]):.3f}"
    )


def fit_score(xtr, ytr, xva, yva, onset) -> str:
    """Logistic regression and gradient-boosted trees fitted on (xtr, ytr), each
    scored on validation by :func:`aucs`."""
    mu, sd = xtr.mean(0), xtr.std(0) + 1e-9
    out = []
    for probe in sklearn_probes():
        p = probe.fit((xtr - mu) / sd, ytr).predict_proba((xva - mu) / sd)[:, 1]
        out.append(aucs(yva, onset, p))
    return "   ".join(out)
