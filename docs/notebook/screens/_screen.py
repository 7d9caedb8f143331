"""What the screens share: the official train windows (the label-free detectors'
reference) and the two probes every screen fits on train and scores on validation."""

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score

from training.data import Dataset
from training.data.windows import cut_windows


def official_train_windows(ds: Dataset) -> np.ndarray:
    """(N, 100, V kept) float32: every entity's official train series, hop 100."""
    return np.concatenate(
        [
            cut_windows(e.train[:, ds.mask], 100)
            for e in ds.entities
            if len(e.train) >= 100
        ]
    ).astype(np.float32)


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
    for probe in (
        LogisticRegression(max_iter=3000, C=0.1),
        HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=0
        ),
    ):
        p = probe.fit((xtr - mu) / sd, ytr).predict_proba((xva - mu) / sd)[:, 1]
        out.append(aucs(yva, onset, p))
    return "   ".join(out)
