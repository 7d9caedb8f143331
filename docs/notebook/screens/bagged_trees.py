"""Screen, out of fold on train + validation: do bagged trees, trees drawn on half the
features, or a random forest warn more than the served trees? (results-notes.md,
2026-12-01, thirty-third session; criterion there.)

    python docs/notebook/screens/bagged_trees.py msl smd skab daphnet   # $SCJEPA_DATA

Input: the 18 pooled window statistics, standardised on the fold's normal windows as
served. Rows: the served trees (the control), the served trees with ``max_features``
0.5, the mean risk of 5 such trees each fitted on a bootstrap resample of the fit
windows (each stopped and calibrated on the validation block as served), and a random
forest (its vote is the risk). Keys and protocol: _screen.cv_table.
"""

import sys
from dataclasses import replace

import _screen as screen
import numpy as np
import torch
from sklearn.ensemble import RandomForestClassifier

from training.evaluate.probe import Probe, ProbeConfig

torch.set_num_threads(1)
HALF = replace(ProbeConfig(kind="trees"), max_features=0.5)
BAGS = 5


def bagged(x_tr, y_tr, x_v, y_v):
    probes = []
    for seed in range(BAGS):
        i = np.random.default_rng(seed).integers(0, len(x_tr), len(x_tr))
        p = Probe(x_tr.shape[1], HALF, seed)
        p.fit(x_tr[i], y_tr[i], x_v, y_v)
        probes.append(p)
    return [lambda f: np.mean([p.predict(f) for p in probes], 0)]


def forest(x_tr, y_tr, x_v, y_v):
    rf = RandomForestClassifier(
        n_estimators=300, min_samples_leaf=20, max_features="sqrt", random_state=0
    ).fit(x_tr, y_tr)
    return [lambda f: rf.predict_proba(f)[:, 1]]


screen.statistics_screen(
    sys.argv[1:],
    lambda ds, feats, fold: {
        "statistics, trees, max_features 0.5": screen.held_out(
            feats, screen.probe_fit("trees", HALF)
        ),
        f"statistics, {BAGS} bagged trees, max_features 0.5": screen.held_out(
            feats, bagged
        ),
        "statistics, random forest": screen.held_out(feats, forest),
    },
)
