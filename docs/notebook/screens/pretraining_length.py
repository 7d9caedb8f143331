"""Screen, on validation only: does longer pre-training make SC-JEPA's codes predict
the next window? (results-notes.md, 2026-11-27, third session)

    python docs/notebook/screens/pretraining_length.py smd untrained CKPT [CKPT ...]

The downstream train / validation splits of `scjepa evaluate` (fold 0; the test split
is not read). Per checkpoint (or `untrained`: `scjepa evaluate`'s untrained twin of
the last checkpoint named, seed 0): the spec's probe inputs (code probabilities, max
over channels, P * K features) and SC-JEPA's own label-free scores of the window
(surprise, reconstruction error); beside them the window statistics. Two probes
(logistic regression, gradient-boosted trees), fitted on train, scored on validation:
ROC AUC, PR AUC, onset AUC (windows that are normal themselves). The spec's MLP probe
selects its epoch on validation, so it is not used here: scoring it on the split it
stopped on would flatter it.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from _screen import fit_score as fit_and_score

from training.data import downstream_splits, load_dataset
from training.evaluate.encode import CodeFeatures
from training.evaluate.features import channel_stats
from training.evaluate.protocol import load_encoders
from training.pretrain.checkpoint import load_checkpoint, load_model

torch.set_num_threads(1)  # beside a pre-training run on a 2-core machine
name, args = sys.argv[1], sys.argv[2:]
ds = load_dataset(name)
sp = downstream_splits(ds)
tr, va = sp["train"], sp["val"]
on = va.cur == 0
print(
    f"{name}: train {len(tr)} windows ({tr.y.sum()} positive), validation {len(va)} "
    f"({va.y.sum()} positive, {va.y[on].sum()} onset)"
)


def stats(s):
    return channel_stats(s.x.astype(np.float64)).reshape(len(s), -1)


def fit_score(xtr, xva):
    return fit_and_score(xtr, tr.y, xva, va.y, on)


str_, sva = stats(tr), stats(va)
print(f"{'':44s} logistic: ROC / PR / onset AUC   trees: the same")
print(f"{'window statistics alone':44s} {fit_score(str_, sva)}")
for ck in args:
    if ck == "untrained":  # scjepa evaluate's untrained twin of the last checkpoint
        model, epoch = load_encoders(Path(args[-1]))[1], 0
    else:
        model, epoch = load_model(ck), load_checkpoint(ck)["epoch"]
    print(ck)
    f = CodeFeatures(model, batch_size=256)
    ctr, cva = f(tr.x), f(va.x)
    own_tr = np.c_[[f.scores(tr.x)[k] for k in ("surprise", "recon")]].T
    own_va = np.c_[[f.scores(va.x)[k] for k in ("surprise", "recon")]].T
    for label, (a, b) in {
        "codes": (ctr, cva),
        "codes + own scores": (np.c_[ctr, own_tr], np.c_[cva, own_va]),
        "codes + statistics": (np.c_[ctr, str_], np.c_[cva, sva]),
    }.items():
        print(f"epoch {epoch:3d} {label:34s} {fit_score(a, b)}")
