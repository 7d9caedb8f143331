"""The span of a stream's recent novelty (service/store: NOVELTY_SPAN): an
exponentially weighted mean of its scored windows' novelty, starting at 0.5, over how
many windows? (results-notes.md, 2026-12-01.)

    python docs/notebook/screens/novelty_span.py msl smd skab daphnet   # $SCJEPA_DATA

The monitor is fitted as drift_monitor.py fits it (the served model's, fold 0). Each
entity is a stream; its dense windows (every evaluation stride, as served) are scored
in time order. For each span, on the validation split (the data the calibration
windows come from, incidents included): the 99th percentile of the recent novelty over
every stream and window, what a stream like the training data reaches 1 % of the
time, so the lowest sustained mean novelty that stands out of such streams in the
dashboard's table; and the windows a stream that turns wholly unlike the training
data (novelty 1 from then on) takes to pass it from 0.5 (the lag).
"""

import sys

import numpy as np
import torch
from _screen import served_monitor

from training.calibrate import novelty_of

SPANS = (10, 30, 60, 120, 240)


def recent(nov: np.ndarray, entity: np.ndarray, t: np.ndarray, span: int) -> np.ndarray:
    """Each window's recent novelty: the EWMA over its entity's windows up to it."""
    a = 2 / (span + 1)
    out = np.empty_like(nov)
    for e in np.unique(entity):
        idx = np.flatnonzero(entity == e)
        idx = idx[np.argsort(t[idx], kind="stable")]
        r = 0.5
        for i in idx:
            r += a * (nov[i] - r)
            out[i] = r
    return out


torch.set_num_threads(1)
for name in sys.argv[1:]:
    ev, fold, record = served_monitor(name)
    val = fold.dense["val"]
    nov = novelty_of(record, val.x)
    print(
        f"\n{name}: stride {ev.stride}, {len(np.unique(val.entity))} streams, "
        f"{len(val)} windows, mean novelty {nov.mean():.3f}"
    )
    for span in SPANS:
        p99 = float(np.quantile(recent(nov, val.entity, val.t, span), 0.99))
        lag = np.log((1 - p99) / 0.5) / np.log(1 - 2 / (span + 1))
        print(
            f"  span {span:3d} ({span * ev.stride:4d} readings): p99 {p99:.3f}, "
            f"a step to 1 passes it after {lag:.0f} windows"
        )
