"""Screen, out of fold on train + validation: each entity's own official train data
as the reference of the window statistics, beside the pooled statistics the
raw-feature candidates read (results-notes.md, 2026-11-28, fifteenth session;
criterion there).

    python docs/notebook/screens/entity_scale.py msl smd   # $SCJEPA_DATA
    python docs/notebook/screens/entity_scale.py smd --blocks   # held-out block by block

The served statistics are z-scored on every entity's train windows pooled, so a
machine whose normal level is unusual looks unusual all the time. Here, per channel,
the window's six statistics are also z-scored on the same entity's official train
windows (the std floored at 0.1 times the pooled one), pooled over channels by mean,
max and min (18 features). Data sets split in time only: a SKAB run's or a Daphnet
subject's train part is cut by its labels, so a test entity has none to use. Keys and
protocol: _screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch
from day_ago import by_block

from training.data import Samples
from training.data.windows import cut_windows, dense_windows
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.features import channel_stats
from training.evaluate.protocol import normal_windows

torch.set_num_threads(2)


def entity_scale(ds, steps: int | None = None):
    """Samples -> (N, 18): the window's per-channel statistics z-scored on its
    entity's official train windows (``steps``: the last ``steps`` of them only, a
    window every 10 steps), pooled over channels by mean, max and min."""
    normal = normal_windows(ds, 100)
    floor = 0.1 * channel_stats(normal).std(0)
    ref = {}
    for i, e in enumerate(ds.entities):
        x = e.train[:, ds.mask].astype(np.float32)
        w = cut_windows(x, 100) if steps is None else dense_windows(x[-steps:], 100, 10)
        if len(w) >= 2:
            s = channel_stats(w)
            ref[i] = (s.mean(0), s.std(0) + floor + 1e-6)

    def featurize(s: Samples) -> np.ndarray:
        out = np.zeros((len(s), 18), np.float32)
        for i in np.unique(s.entity):
            if i not in ref:
                continue
            m = s.entity == i
            z = (channel_stats(s.x[m]) - ref[i][0]) / ref[i][1]  # (n, 6, V)
            out[m] = np.c_[z.mean(2), z.max(2), z.min(2)]
        return out

    return featurize


def main(name: str) -> None:
    ds = screen.name_ds(name)
    stats = WindowStatsFeatures(normal_windows(ds, 100))
    own = entity_scale(ds)
    blocks, oof, ev = screen.cv_table(
        name,
        {
            "pooled statistics (served)": lambda s: stats(s.x),
            "statistics + per-entity z": lambda s: np.c_[stats(s.x), own(s)],
        },
        [("trees", "every window")],
    )
    if "--blocks" in sys.argv:
        by_block(blocks, oof, ev)


if __name__ == "__main__":
    for name in (a for a in sys.argv[1:] if not a.startswith("--")):
        main(name)
