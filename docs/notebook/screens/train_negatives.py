"""Screen, out of fold on train + validation: do the probes warn more when the official
train split's windows join their fit as normal examples? (results-notes.md,
2026-12-01, thirty-second session; criterion there.)

    python docs/notebook/screens/train_negatives.py msl smd   # $SCJEPA_DATA

The probes are fitted on the downstream train split of the official test series
(evaluation.md item 2), a few thousand windows of which a few hundred are normal
windows before an onset. The alert threshold sits in the far tail of the normal
windows' risks (1 false alarm per 1,000), which the probe learns from those windows
alone, while MSL and SMD-19 ship an official train split of the same entities, as
long again and normal throughout (the label-free detectors' reference), that no probe
reads. Here the fit of each held-out block also takes every official train window
(hop 100, label 0: each is followed by a normal window); stopping and calibration
stay on the validation block as served. Input: the 18 pooled window statistics (SMD-19's
served candidate; their standardisation is fitted on the same official train windows,
as served). Data sets split by entity (SKAB, Daphnet) have no separate train split: the
normal part of each entity is already in the blocks. Keys and protocol:
_screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.protocol import normal_windows

torch.set_num_threads(1)


def with_negatives(kind: str, featurize, extra: np.ndarray):
    """An ``extra`` row of cv_table: ``kind`` probes fitted on two blocks plus
    ``extra`` (features of windows labelled normal), stopped and calibrated on the
    next block, scoring the held-out one (3 seeds for the MLP, one for the trees)."""
    rows = (extra, np.zeros(len(extra), np.int8))
    return screen.held_out(featurize, screen.probe_fit(kind), lambda *_: rows)


for name in sys.argv[1:]:
    ds = screen.name_ds(name)
    assert not ds.folds, f"{name}: split by entity, no separate train split"
    normal = normal_windows(ds, 100, None)
    stats = WindowStatsFeatures(normal)
    feats = lambda s, f=stats: f(s.x)  # noqa: E731
    f_train = stats(normal)
    print(f"{name}: {len(normal)} official train windows join each fit", flush=True)
    screen.cv_table(
        name,
        {"statistics": feats},
        [("trees", "every window"), ("mlp", "every window")],
        extra={
            "statistics, trees, every window + official train": with_negatives(
                "trees", feats, f_train
            ),
            "statistics, mlp, every window + official train": with_negatives(
                "mlp", feats, f_train
            ),
        },
        paired="first",
    )
