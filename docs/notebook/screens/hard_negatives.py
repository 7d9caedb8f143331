"""Screen, out of fold on train + validation: do the tree probes warn more when the
normal windows they rank highest are fitted again with more weight (hard negatives)?
(results-notes.md, 2026-12-02, thirty-fourth session; criterion there.)

    python docs/notebook/screens/hard_negatives.py msl smd skab daphnet   # $SCJEPA_DATA
    python docs/notebook/screens/hard_negatives.py --folds 1,2,3,4 skab daphnet

A first fit ranks the fit windows without seeing them: the fit windows are cut in two
halves in time (about the two CV blocks), trees fitted on each half score the other.
The normal windows (next window normal) whose risk is in the top ``share`` of the
normal windows' are then repeated so that they weigh ``weight`` in the second fit,
which is the one scored. Both fits stop and calibrate on the next block as served.
Input: the 18 pooled window statistics. Keys and protocol: _screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.evaluate.probe import Probe, ProbeConfig

torch.set_num_threads(1)
CFG = ProbeConfig(kind="trees")


def hard(share: float, weight: int):
    """``fit`` for _screen.held_out: the served trees, refitted with the top ``share``
    of the normal windows (by the cross-fitted first risks) weighing ``weight``."""

    def fit(x_tr, y_tr, x_v, y_v):
        half = len(x_tr) // 2
        first = np.empty(len(x_tr))
        for a, b in ((slice(0, half), slice(half, None)),
                     (slice(half, None), slice(0, half))):  # fmt: skip
            p = Probe(x_tr.shape[1], CFG, 0).fit(x_tr[a], y_tr[a], x_v, y_v)
            first[b] = p.predict(x_tr[b])
        normal = np.flatnonzero(y_tr == 0)
        top = normal[first[normal] >= np.quantile(first[normal], 1 - share)]
        again = np.repeat(top, weight - 1)
        x2 = np.concatenate([x_tr, x_tr[again]])
        y2 = np.concatenate([y_tr, y_tr[again]])
        return [Probe(x_tr.shape[1], CFG, 0).fit(x2, y2, x_v, y_v).predict]

    return fit


ROWS = {
    "statistics, trees, top 2 % of normal windows x2": (0.02, 2),
    "statistics, trees, top 2 % x4": (0.02, 4),
    "statistics, trees, top 5 % x2": (0.05, 2),
}
screen.statistics_screen(
    sys.argv[1:],
    lambda ds, feats, fold: {
        label: screen.held_out(feats, hard(share, weight))
        for label, (share, weight) in ROWS.items()
    },
)
