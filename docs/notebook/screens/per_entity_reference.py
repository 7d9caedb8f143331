"""Screen, on train and validation only: a per-entity reference for the kNN detector
(each entity's own official train windows) against the pooled one (all entities'),
as the label-free score of the next window (results-notes.md, 2026-11-27).

    python docs/notebook/screens/per_entity_reference.py smd   # data root: $SCJEPA_DATA

kNN = mean distance to the 5 nearest reference windows in the window-statistics space
(training/evaluate/features.channel_stats), z-scored on the reference. The per-entity
reference uses windows every 10 steps of the entity's train series. ROC AUC, PR AUC and
onset AUC on the downstream train and validation splits (the test split is not read).
"""

import sys

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from sklearn.metrics import average_precision_score, roc_auc_score

from training.data import downstream_splits, load_dataset
from training.data.windows import cut_windows
from training.evaluate.features import channel_stats

ds = load_dataset(sys.argv[1])
splits = downstream_splits(ds)


def stats(x):
    return channel_stats(x.astype(np.float64)).reshape(len(x), -1)


def knn(ref, q, k=5):
    d2 = (q * q).sum(1)[:, None] - 2 * q @ ref.T + (ref * ref).sum(1)[None]
    return np.sqrt(np.clip(np.sort(d2, 1)[:, :k], 0, None)).mean(1)


own = {}
for i, e in enumerate(ds.entities):
    f = stats(
        sliding_window_view(e.train[:, ds.mask], (100, int(ds.mask.sum())))[::10, 0]
    )
    m, s = f.mean(0), f.std(0) + 1e-6
    own[i] = (m, s, (f - m) / s)
pool = np.concatenate(
    [stats(cut_windows(e.train[:, ds.mask], 100)) for e in ds.entities]
)
pm, ps = pool.mean(0), pool.std(0) + 1e-6
for split in ("train", "val"):
    s = splits[split]
    f = stats(s.x)
    pooled = knn((pool - pm) / ps, (f - pm) / ps)
    mine = np.zeros(len(s))
    for i in np.unique(s.entity):
        at = s.entity == i
        m, sd, ref = own[i]
        mine[at] = knn(ref, (f[at] - m) / sd)
    on = s.cur == 0
    for label, score in (("pooled reference", pooled), ("per-entity reference", mine)):
        print(
            f"{split:5s} {label:21s} ROC {roc_auc_score(s.y, score):.3f} "
            f"PR {average_precision_score(s.y, score):.3f} "
            f"onset {roc_auc_score(s.y[on], score[on]):.3f}"
        )
