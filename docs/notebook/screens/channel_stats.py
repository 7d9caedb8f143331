"""Screen, out of fold on train + validation: do the window statistics per channel
(6 x V) give a better raw-feature tree candidate than the 18 pooled over channels that
the served candidates read? (results-notes.md, 2026-11-27, seventh session)

    python docs/notebook/screens/channel_stats.py msl smd skab daphnet   # $SCJEPA_DATA

The fourth session's out-of-fold screen (fit_stride_cv.py, SMD-19 and MSL only, AUCs
only) had the per-channel statistics ahead of the pooled ones for the trees on SMD-19
(PR AUC 0.221 against 0.192, 0.251 fitted on dense windows). This one adds SKAB and
Daphnet and the selection rule's event keys. Keys and protocol: _screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.features import Standardizer, channel_stats
from training.evaluate.protocol import normal_windows

torch.set_num_threads(1)


def per_channel(x: np.ndarray) -> np.ndarray:
    return channel_stats(x.astype(np.float64)).reshape(len(x), -1)


for name in sys.argv[1:]:
    ds = screen.name_ds(name)
    normal = normal_windows(ds, 100, 0 if ds.folds else None)
    pooled = WindowStatsFeatures(normal)
    scale = Standardizer().fit(per_channel(normal))
    screen.cv_table(
        name,
        {
            "pooled statistics (served)": lambda s, f=pooled: f(s.x),
            "statistics per channel": lambda s, scale=scale: scale(per_channel(s.x)),
        },
        [
            ("trees", "every window"),
            ("trees", "dense windows"),
            ("mlp", "every window"),
        ],
    )
