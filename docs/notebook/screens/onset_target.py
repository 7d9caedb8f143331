"""Screen, out of fold on train + validation: should the probe learn only from windows
that are normal themselves? (results-notes.md, 2026-11-27, seventh session)

    python docs/notebook/screens/onset_target.py msl smd skab daphnet   # $SCJEPA_DATA

The probes learn P(next window anomalous) from every window, so most of their
positives on SMD-19 and MSL are windows inside an incident that is already under way
(the next window anomalous because this one is). The event metric ignores those
windows: a warning counts when an alert ends before an onset, a false alarm when an
alert is not followed by one, and an alert inside an incident is neither. Here the
probe is fitted (and stopped and calibrated) either on every window, as served, or on
the normal windows only (label: the next window anomalous, that is an onset follows).
Inputs: the 18 pooled window statistics (the served raw-feature candidates) and the
same with the kNN and PCA scores. Keys and protocol: _screen.cv_table.
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
for name in sys.argv[1:]:
    ds = screen.name_ds(name)
    normal = normal_windows(ds, 100, 0 if ds.folds else None)
    stats = WindowStatsFeatures(normal)
    train = np.concatenate([b.hop.x for b in cv_blocks(ds, 0, 4, 100)])
    knn_pca = DetectorScores(normal, train).columns(("knn", "pca"))
    screen.cv_table(
        name,
        {
            "statistics": lambda s, f=stats: f(s.x),
            "statistics + kNN + PCA": lambda s, f=stats, d=knn_pca: np.c_[
                f(s.x), d(s.x)
            ],
        },
        [(k, t) for k in ("mlp", "trees") for t in ("every window", "normal windows")],
        paired="previous",  # each "normal windows" row against its "every window" one
    )
