"""Screen, out of fold on train + validation: do the trees warn more when they can tell
an incident that is ending from one that is starting? (results-notes.md, 2026-12-02,
thirty-fifth session; criterion there.)

    python docs/notebook/screens/last_quarter.py msl smd skab daphnet   # $SCJEPA_DATA
    python docs/notebook/screens/last_quarter.py --folds 1,2,3,4 skab daphnet

false_alarms.py found a quarter to a half of the served trees' false alarms (SMD-19,
SKAB) in windows an incident ended in: pooled over the whole window, the statistics
read alike whether the incident fills its first steps or its last. Rows: the served
statistics trees; the same 18 statistics of the window's last 25 steps beside them
(standardised on the normal windows' last 25 steps); the served trees fitted on the
dense windows (a window every stride steps), which hold about 100 / stride times more
windows an incident ended in. Keys and protocol: _screen.cv_table; then each row's
false alarms by place (false_alarms.breakdown).
"""

import sys

import _screen as screen
import numpy as np
import torch
from false_alarms import breakdowns

from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.protocol import normal_windows

torch.set_num_threads(1)
QUARTER = 25


def with_last_quarter(ds, fold: int, feats):
    """Samples -> the 18 statistics of the window and the 18 of its last 25 steps."""
    normal = normal_windows(ds, 100, fold if ds.folds else None)
    last = WindowStatsFeatures(normal[:, -QUARTER:])
    return lambda s: np.c_[feats(s), last(s.x[:, -QUARTER:])]


screen.statistics_screen(
    sys.argv[1:],
    lambda ds, feats, fold: {
        "statistics + last quarter, trees": screen.held_out(
            with_last_quarter(ds, fold, feats), screen.probe_fit("trees")
        ),
        "statistics, trees, dense windows": screen.held_out(
            feats, screen.probe_fit("trees"), fit_dense=True
        ),
    },
    after=breakdowns,
)
