"""Screen, out of fold on train + validation: how should the tree probe stop?
(results-notes.md, 2026-11-27, fourth session: as `scjepa evaluate --tree-probes`
stops them, by class-weighted validation loss, they fall to one tree.)

    python docs/notebook/screens/tree_stopping.py smd [CKPT]   # data: $SCJEPA_DATA

The served model's cross-validation blocks (training/evaluate/select.py, fold 0,
K = 4): fit on the blocks other than j and j + 1, stop (and calibrate) on j + 1, score
j; every train + validation hop window scored once; no test window read. Inputs: the
served 18 pooled window statistics (z-scored on the official train windows, as
model/stats.py), and with CKPT the codes + statistics (the candidate the trees won
with on SMD-19). Probes: the MLP as the protocol runs it; the trees as the protocol
runs them (class weights, stopped on validation loss), stopped on validation ROC AUC
(`--probe tree_select_on=val_auc`), without class weights, and 200 stages with no
stopping and no class weights (the earlier screens' trees; the tree probe's defaults
since this screen). Pooled out-of-fold ROC / PR / onset AUC, and the median
number of trees (epochs for the MLP) kept.
"""

import sys
from dataclasses import replace

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from training.data import load_dataset
from training.evaluate.baselines import window_stats
from training.evaluate.encode import CodeFeatures
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import cv_blocks
from training.pretrain.checkpoint import load_model

torch.set_num_threads(1)
name = sys.argv[1]
ds = load_dataset(name)
K = 4
blocks = cv_blocks(ds, 0, K, 100)
stats = window_stats(normal_windows(ds, 100, 0 if ds.folds else None))
inputs = {"pooled statistics": [stats(b.hop.x) for b in blocks]}
if sys.argv[2:]:
    codes = CodeFeatures(load_model(sys.argv[2]), 256)
    inputs["codes + statistics"] = [
        np.c_[codes(b.hop.x), f]
        for b, f in zip(blocks, inputs["pooled statistics"], strict=True)
    ]
y = np.concatenate([b.hop.y for b in blocks])
onset = np.concatenate([b.hop.cur == 0 for b in blocks])
print(f"{name}: {len(y)} hop windows ({y.sum()} positive, {y[onset].sum()} onset)")
TREES = ProbeConfig(kind="trees")
WEIGHTED = replace(TREES, tree_class_weight=True)
probes = {
    "MLP (protocol)": ProbeConfig(),
    "trees (protocol: weighted val loss)": replace(WEIGHTED, tree_select_on="val_loss"),
    "trees, stopped on val ROC AUC": replace(WEIGHTED, tree_select_on="val_auc"),
    "trees, no class weights": replace(TREES, tree_select_on="val_loss"),
    "trees, 200 stages, no stopping": TREES,  # the tree probe's defaults now
}


def oof(feats: list[np.ndarray], label: str, cfg: ProbeConfig, seed: int):
    out, kept = [], []
    for j in range(K):
        v = (j + 1) % K
        fit = [i for i in range(K) if i not in (j, v)]
        xtr = np.concatenate([feats[i] for i in fit]).astype(np.float32)
        ytr = np.concatenate([blocks[i].hop.y for i in fit])
        probe = Probe(xtr.shape[1], cfg, seed).fit(
            xtr, ytr, feats[v].astype(np.float32), blocks[v].hop.y
        )
        out.append(probe.predict(feats[j].astype(np.float32)))
        kept.append(probe.best_epoch + 1)
    return np.concatenate(out), kept


print(f"{'':58s} ROC / PR / onset AUC   kept (median)")
for feat, feats in inputs.items():
    for label, cfg in probes.items():
        seeds = (0,) if cfg.kind == "trees" else (0, 1, 2)  # trees: deterministic
        runs = [oof(feats, label, cfg, s) for s in seeds]
        p = np.mean([r[0] for r in runs], 0)
        kept = int(np.median([k for r in runs for k in r[1]]))
        print(
            f"{feat + ', ' + label:58s} {roc_auc_score(y, p):.3f} / "
            f"{average_precision_score(y, p):.3f} / "
            f"{roc_auc_score(y[onset], p[onset]):.3f}   {kept}",
            flush=True,
        )
