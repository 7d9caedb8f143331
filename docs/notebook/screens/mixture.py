"""Screen, out of fold on train + validation: a mixture that reads the normal-window
fit's ranking and keeps the risk's meaning (results-notes.md, 2026-11-28, fourteenth
session; criterion there).

    python docs/notebook/screens/mixture.py msl smd skab daphnet   # $SCJEPA_DATA
    python docs/notebook/screens/mixture.py --normal skab@1 daphnet@1 ...  # other folds

The seventh session's onset_target.py fitted the probe on the normal windows only: the
windows the warning is judged on. Its trees on statistics + kNN + PCA warned more out
of fold, but the risk then meant "an incident begins next" and said nothing during
one. The mixture keeps P(next window anomalous):
    risk = p_cur * cont + (1 - p_cur) * onset
onset fitted on the normal windows, cont on the anomalous ones, p_cur (the current
window anomalous) on every window. Each row is compared with the one fitted on every
window, the served recipe. Keys and protocol: _screen.cv_table. With --normal: the
statistics + kNN + PCA trees fitted on every window and on the normal windows alone,
on the cross-validation blocks of the fold after "@" (SKAB and Daphnet: by entity).
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.detectors import DetectorScores
from training.evaluate.protocol import normal_windows
from training.evaluate.select import cv_blocks

torch.set_num_threads(1)
only_normal = "--normal" in sys.argv
for arg in (a for a in sys.argv[1:] if a != "--normal"):
    name, _, fold_arg = arg.partition("@")
    fold = int(fold_arg or 0)
    ds = screen.name_ds(name)
    normal = normal_windows(ds, 100, fold if ds.folds else None)
    stats = WindowStatsFeatures(normal)
    train = np.concatenate([b.hop.x for b in cv_blocks(ds, fold, 4, 100)])
    knn_pca = DetectorScores(normal, train).columns(("knn", "pca"))
    inputs = {
        "statistics + kNN + PCA": lambda s, f=stats, d=knn_pca: np.c_[f(s.x), d(s.x)],
        "statistics": lambda s, f=stats: f(s.x),
    }
    fits = ("every window", "mixture", "normal windows")
    if only_normal:
        inputs.pop("statistics")
        fits = ("every window", "normal windows")
    screen.cv_table(
        name,
        inputs,
        [("trees", t) for t in fits],
        paired="first of its input",
        fold=fold,
    )
