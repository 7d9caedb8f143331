"""Screen, on validation only: does fitting the probe on dense train windows (a window
every `stride` steps instead of every 100) help it predict the next window?
(results-notes.md, 2026-11-27, fourth session)

    python docs/notebook/screens/fit_stride.py smd [CKPT] [mlp]   # data: $SCJEPA_DATA

`scjepa evaluate --fit-stride` exists but no run has used it. The downstream train
split of fold 0 cut every 100, 20 or 10 steps (10x the windows, overlapping, so not
10x the information); the validation split stays the hop windows every row is scored
on (the test split is not read). Inputs: the window statistics (the statistics MLP's
input), the kNN / PCA baselines' scores, both together, and with CKPT the spec's code
inputs. Probes as in pretraining_length.py (logistic regression, gradient-boosted
trees), fitted on train, scored on validation: ROC / PR / onset AUC. With `mlp`, also
the served probe (training/evaluate/probe.py; 3 seeds, mean): it stops and calibrates
on validation, which flatters it, equally at every stride.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.data import downstream_splits, load_dataset
from training.evaluate.encode import CodeFeatures
from training.evaluate.features import channel_stats
from training.evaluate.probe import Probe, ProbeConfig
from training.pretrain.checkpoint import load_model

torch.set_num_threads(1)
name = sys.argv[1]
ds = load_dataset(name)
va = downstream_splits(ds)["val"]
on = va.cur == 0
normal = screen.official_train_windows(ds)
mlp = "mlp" in sys.argv[2:]
ckpt = [a for a in sys.argv[2:] if a != "mlp"]
codes = CodeFeatures(load_model(ckpt[0]), 256) if ckpt else None


detectors = screen.detector_scores(normal)


def features(s):
    st = channel_stats(s.x.astype(np.float64)).reshape(len(s), -1)
    det = detectors(s)
    out = {"statistics": st, "kNN + PCA": det, "statistics + kNN + PCA": np.c_[st, det]}
    if codes is not None:
        out["codes"] = codes(s.x)
    return out


def aucs(p: np.ndarray) -> str:
    return screen.aucs(va.y, on, p)


print(
    f"{'':46s} logistic: ROC / PR / onset AUC   trees: the same"
    + ("   MLP: the same" if mlp else "")
)
for stride in (100, 20, 10):
    tr = downstream_splits(ds, 100, stride)["train"]
    ftr, fva = features(tr), features(va)
    for label in ftr:
        xtr, xva = ftr[label], fva[label]
        row = [screen.fit_score(xtr, tr.y, xva, va.y, on)]
        if mlp:
            mu, sd = xtr.mean(0), xtr.std(0) + 1e-9
            xs = ((xtr - mu) / sd).astype(np.float32)
            vs = ((xva - mu) / sd).astype(np.float32)
            p = np.mean(
                [
                    Probe(xs.shape[1], ProbeConfig(), seed)
                    .fit(xs, tr.y, vs, va.y)
                    .predict(vs)
                    for seed in range(3)
                ],
                0,
            )
            row.append(aucs(p))
        head = f"stride {stride:3d} ({len(tr)} windows, {tr.y.sum()} positive)"
        print(f"{head:30s} {label:22s} {'   '.join(row)}", flush=True)
