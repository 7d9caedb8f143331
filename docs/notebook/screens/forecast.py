"""Screen, on validation only: does the predictor's forecast of the next window's codes
predict that window's anomaly? (results-notes.md, 2026-11-27, fourth session)

    python docs/notebook/screens/forecast.py smd CKPT [untrained]   # data: $SCJEPA_DATA

(`untrained`: `scjepa evaluate`'s untrained twin of CKPT, the floor of every SC-JEPA
row.)

The issue names the forecast as a probe input; no candidate reads it yet. The
downstream train / validation splits of `scjepa evaluate` (fold 0; the test split is
not read). From the current window's code probabilities p (B, V, P, K) the fine
predictor forecasts the next window's, q = softmax(fine(p)), and the coarse predictor
its down-averaged token. Inputs, each pooled over channels by max as the spec's probe
pools p:
- the forecast codes (fine: P * K; + coarse: K);
- two label-free scores per channel, pooled by mean and by max over channels:
  *change*, KL(q || p) summed over tokens (how far the predictor expects the next
  window to move from this one), and *rarity*, the cross-entropy of q under the train
  windows' code frequencies per token (how unusual the forecast window is).
Beside them: the current codes, and the kNN / PCA baselines' scores of the current
window. Probes as in pretraining_length.py (logistic regression, gradient-boosted
trees; fitted on train, scored on validation). The label-free scores are also ranked
alone (no fit): their own ROC / PR / onset AUC on validation.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.data import downstream_splits, load_dataset
from training.evaluate.protocol import load_encoders
from training.pretrain.checkpoint import load_model

torch.set_num_threads(1)  # beside a pre-training run on a 2-core machine
name, ckpt = sys.argv[1], sys.argv[2]
ds = load_dataset(name)
sp = downstream_splits(ds)
tr, va = sp["train"], sp["val"]
on = va.cur == 0
untrained = sys.argv[3:] == ["untrained"]
model = (load_encoders(ckpt)[1] if untrained else load_model(ckpt)).eval()
print(
    f"{name} {ckpt}{' (untrained twin)' if untrained else ''}: train {len(tr)} windows ({tr.y.sum()} positive), validation "
    f"{len(va)} ({va.y.sum()} positive, {va.y[on].sum()} onset)"
)


@torch.no_grad()
def encode(x: np.ndarray, batch: int = 128) -> dict[str, np.ndarray]:
    out: dict[str, list[np.ndarray]] = {"p": [], "q": [], "c": [], "pfull": []}
    for i in range(0, len(x), batch):
        xb = torch.from_numpy(np.ascontiguousarray(x[i : i + batch]))
        p = model.probe_inputs(xb)  # (B, V, P, K)
        B, V = p.shape[:2]
        flat = p.flatten(0, 1)
        q = model.fine_predictor(flat).softmax(-1).view_as(p)
        c = model.coarse_predictor(flat).softmax(-1).view(B, V, 1, -1)
        for k, v in (("p", p), ("q", q), ("c", c)):
            out[k].append(v.amax(1).flatten(1).numpy())
        out["pfull"].append(torch.cat([p, q], -1).numpy())  # kept for the scores
    return {k: np.concatenate(v) for k, v in out.items()}


etr, eva = encode(tr.x), encode(va.x)
K = model.cfg.n_codes
# train code frequencies per token position (over windows and channels)
freq = etr["pfull"][..., :K].mean((0, 1)) + 1e-6  # (P, K)


def own(e: dict[str, np.ndarray]) -> np.ndarray:
    p, q = e["pfull"][..., :K], e["pfull"][..., K:]
    change = (q * (np.log(q + 1e-8) - np.log(p + 1e-8))).sum((-1, -2))  # (N, V)
    rarity = -(q * np.log(freq)).sum(-1).mean(-1)  # (N, V)
    return np.c_[change.mean(1), change.max(1), rarity.mean(1), rarity.max(1)]


otr, ova = own(etr), own(eva)
det = screen.detector_scores(screen.official_train_windows(ds))
dtr, dva = det(tr), det(va)


def aucs(p: np.ndarray) -> str:
    return screen.aucs(va.y, on, p)


def fit_score(xtr, xva):
    return screen.fit_score(xtr, tr.y, xva, va.y, on)


print("label-free, alone: ROC / PR / onset AUC on validation")
for j, label in enumerate(
    ("change, mean", "change, max", "rarity, mean", "rarity, max")
):
    print(f"  {label:16s} {aucs(ova[:, j])}")
print(f"{'':40s} logistic: ROC / PR / onset AUC   trees: the same")
for label, (a, b) in {
    "current codes (spec probe inputs)": (etr["p"], eva["p"]),
    "forecast codes (fine)": (etr["q"], eva["q"]),
    "forecast codes (fine + coarse)": (
        np.c_[etr["q"], etr["c"]],
        np.c_[eva["q"], eva["c"]],
    ),
    "current + forecast codes": (np.c_[etr["p"], etr["q"]], np.c_[eva["p"], eva["q"]]),
    "change + rarity": (otr, ova),
    "kNN + PCA (current window)": (dtr, dva),
    "kNN + PCA + change + rarity": (np.c_[dtr, otr], np.c_[dva, ova]),
}.items():
    print(f"{label:40s} {fit_score(a, b)}")
