"""Screen, out of fold on train + validation: do the probes warn more when the normal
windows an incident is 100-200 (or 100-300) steps ahead of are fitted with a soft
label of 0.5? (results-notes.md, 2026-12-01, thirty-third session; criterion there.)

    python docs/notebook/screens/precursor_labels.py msl smd skab daphnet   # $SCJEPA_DATA
    python docs/notebook/screens/precursor_labels.py --folds 1,2,3,4 --trees skab daphnet

Each such window is fitted twice, as normal and as positive; stopping and calibration
keep the true labels (the next window's). Input: the 18 pooled window statistics,
read by the trees and by the MLP. Keys and protocol: _screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.data import Dataset, Samples

torch.set_num_threads(1)
WINDOW = 100


def precursors(ds: Dataset, s: Samples, ahead: int) -> np.ndarray:
    """Normal windows (their next window normal too) with an anomalous step in the
    ``ahead`` windows after the next one."""
    out = np.zeros(len(s), bool)
    for n in np.flatnonzero((s.y == 0) & (s.cur == 0)):
        labels = ds.entities[s.entity[n]].labels
        lo = s.end[n] + WINDOW
        out[n] = labels[lo : lo + ahead * WINDOW].any()
    return out


def soft(ds: Dataset, feats, kind: str, ahead: int):
    """An ``extra`` row of cv_table: ``kind`` probes fitted on two blocks with the
    precursor windows fitted twice (normal and positive), stopped and calibrated on
    the next block (true labels), scoring the held-out one."""

    def twice(fit_blocks, f_hop):
        pre = [precursors(ds, b.hop, ahead) for b in fit_blocks]
        x = np.concatenate([f[m] for f, m in zip(f_hop, pre, strict=True)])
        return x, np.ones(len(x), np.int8)

    return screen.held_out(feats, screen.probe_fit(kind), twice if ahead else None)


args = sys.argv[1:]
trees_only = "--trees" in args
ROWS = {
    "statistics, trees, soft 100-200 ahead": ("trees", 1),
    "statistics, trees, soft 100-300 ahead": ("trees", 2),
    "statistics, mlp, as served": ("mlp", 0),
    "statistics, mlp, soft 100-200 ahead": ("mlp", 1),
    "statistics, mlp, soft 100-300 ahead": ("mlp", 2),
}
screen.statistics_screen(
    [a for a in args if a != "--trees"],
    lambda ds, feats, fold: {
        label: soft(ds, feats, kind, ahead)
        for label, (kind, ahead) in ROWS.items()
        if kind == "trees" or not trees_only
    },
)
