"""Screen, out of fold on train + validation: does the window's last stretch, set
against the rest of the window, add to the window statistics the raw-feature candidates
read? (results-notes.md, 2026-11-27, eighth session)

    python docs/notebook/screens/tail.py msl smd skab daphnet   # $SCJEPA_DATA

An incident is warned when an alert comes within the look-back before its onset, so
the windows that can warn are the last ones before it. If an incident starts to show
a few steps before its label, it shows at the end of those windows, and a window's
pooled statistics dilute it with 90 steps of the past; its "last" value is one noisy
step. The tail features compare the last 10 steps with the first 90 of the same window,
per channel: the shift of the mean and the largest deviation, in units of the first 90
steps' std, and the log ratio of the two parts' stds; pooled over channels by mean,
max and min. Keys and protocol: _screen.cv_table. The decision rule was written before
the run.
"""

import sys

import _screen as screen
import numpy as np
import torch

torch.set_num_threads(1)

TAIL = 10


def tail(x: np.ndarray) -> np.ndarray:
    """(N, T, V) -> (N, 3, V): mean shift, largest deviation and log std ratio of the
    last TAIL steps against the rest, per channel."""
    x = x.astype(np.float64)
    head, end = x[:, :-TAIL], x[:, -TAIL:]
    mu, sd = head.mean(1), head.std(1) + 1e-6
    shift = (end.mean(1) - mu) / sd
    dev = (np.abs(end - mu[:, None]) / sd[:, None]).max(1)
    ratio = np.log((end.std(1) + 1e-6) / sd)
    return np.stack([shift, np.log1p(dev), ratio], axis=1)


for name in sys.argv[1:]:
    screen.beside_statistics(name, "tail", tail)
