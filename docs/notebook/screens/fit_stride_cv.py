"""Screen, out of fold on train + validation: fitting the probe on dense windows, and
which probe, by the served model's cross-validation blocks (results-notes.md,
2026-11-27, fourth session). The single validation split of fit_stride.py has 126
positive windows on SMD-19; this pools 4 held-out blocks (no test window is read).

    python docs/notebook/screens/fit_stride_cv.py smd [pooled]   # data: $SCJEPA_DATA

The blocks of training/evaluate/select.py (fold 0; K = 4): for held-out block j the
probe fits on the blocks other than j and j + 1, as hop windows (stride 100) or dense
ones (stride 20), and scores block j's hop windows. The MLP (training/evaluate/
probe.py, the served probe) stops and calibrates on block j + 1's hop windows, as in
the served model's cross-validation; logistic regression and gradient-boosted trees
do not use it. Inputs: the window statistics per channel (6 x V), the kNN / PCA
baselines' scores (fitted on the official train windows), both; with `pooled`
instead the served model's 18 pooled statistics (model/stats.py), alone and with the
per-channel ones. Pooled out-of-fold ROC / PR / onset AUC, mean
over 3 seeds for the MLP and the trees.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.data import Samples, load_dataset
from training.evaluate.features import channel_stats, pooled_stats
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import cv_blocks

torch.set_num_threads(1)
name = sys.argv[1]
ds = load_dataset(name)
K, DENSE = 4, 20
hop_blocks = cv_blocks(ds, 0, K, DENSE)
detectors = screen.detector_scores(normal_windows(ds, 100, 0 if ds.folds else None))


def features(s: Samples) -> dict[str, np.ndarray]:
    st = channel_stats(s.x.astype(np.float64)).reshape(len(s), -1)
    if sys.argv[2:] == ["pooled"]:
        pooled = pooled_stats(s.x.astype(np.float64))
        return {"pooled statistics": pooled, "pooled + per-channel": np.c_[pooled, st]}
    det = detectors(s)
    return {
        "statistics": st,
        "kNN + PCA": det,
        "statistics + kNN + PCA": np.c_[st, det],
    }


f_hop = [features(b.hop) for b in hop_blocks]
f_dense = [features(b.dense) for b in hop_blocks]
y = np.concatenate([b.hop.y for b in hop_blocks])
onset = np.concatenate([b.hop.cur == 0 for b in hop_blocks])
n_ev = sum(len(b.stretches) for b in hop_blocks)
print(
    f"{name}: {K} blocks, {len(y)} hop windows ({y.sum()} positive, "
    f"{y[onset].sum()} onset), {n_ev} entity stretches"
)


def oof(label: str, kind: str, dense: bool, seed: int) -> np.ndarray:
    out = []
    for j in range(K):
        v = (j + 1) % K
        fit = [i for i in range(K) if i not in (j, v)]
        src = f_dense if dense else f_hop
        xtr = np.concatenate([src[i][label] for i in fit])
        ytr = np.concatenate(
            [(hop_blocks[i].dense if dense else hop_blocks[i].hop).y for i in fit]
        )
        mu, sd = xtr.mean(0), xtr.std(0) + 1e-9
        ztr, zv, zj = (
            ((a - mu) / sd).astype(np.float32)
            for a in (xtr, f_hop[v][label], f_hop[j][label])
        )
        if kind == "MLP":
            probe = Probe(xtr.shape[1], ProbeConfig(), seed)
            out.append(probe.fit(ztr, ytr, zv, hop_blocks[v].hop.y).predict(zj))
        else:  # logistic, trees (deterministic: the seed changes nothing)
            m = screen.sklearn_probes()[kind == "trees"].fit(ztr, ytr)
            out.append(m.predict_proba(zj)[:, 1])
    return np.concatenate(out)


def aucs(p: np.ndarray) -> str:
    return screen.aucs(y, onset, p)


print(f"{'':40s} fit on hop windows: ROC / PR / onset AUC   on dense (stride {DENSE})")
for label in f_hop[0]:
    for kind in ("logistic", "trees", "MLP"):
        seeds = (0,) if kind == "logistic" else (0, 1, 2)
        row = []
        for dense in (False, True):
            row.append(aucs(np.mean([oof(label, kind, dense, s) for s in seeds], 0)))
        print(f"{label + ', ' + kind:40s} {'   '.join(row)}", flush=True)
