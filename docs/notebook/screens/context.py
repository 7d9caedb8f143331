"""Screen, out of fold on train + validation: does a longer context than the current
window help the trees? (results-notes.md, 2026-11-27, seventh session)

    python docs/notebook/screens/context.py msl smd skab daphnet   # $SCJEPA_DATA

The probes read one 100-step window. A slow drift before an incident would show as a
change against the windows before it, which one window cannot see. Here the trees (the
served recipe) read the 18 pooled window statistics of the current window (the served
raw-feature trees) or, beside them, those of the 3 hop windows before it (the 300
steps before its start, read from the entity's series, as a service holding 400 steps
would) and the current window's difference from their mean. A window too close to its
series' start repeats itself as its missing predecessors. Keys and protocol:
_screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.data import Samples
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.protocol import normal_windows

torch.set_num_threads(1)
LAGS, W = 3, 100


def with_context(ds, stats: WindowStatsFeatures):
    def featurize(s: Samples) -> np.ndarray:
        cur = stats(s.x)
        prev = [stats(screen.preceding(ds, s, k)) for k in range(1, LAGS + 1)]
        return np.concatenate([cur, *prev, cur - np.mean(prev, 0)], axis=1)

    return featurize


for name in sys.argv[1:]:
    ds = screen.name_ds(name)
    stats = WindowStatsFeatures(normal_windows(ds, W, 0 if ds.folds else None))
    screen.cv_table(
        name,
        {
            "current window (served)": lambda s, f=stats: f(s.x),
            "current + 3 windows before": with_context(ds, stats),
        },
        [("trees", "every window")],
    )
