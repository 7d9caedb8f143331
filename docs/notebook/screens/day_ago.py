"""Screen, out of fold on train + validation: does what followed the current time one
and two days earlier add to the window statistics the raw-feature candidates read?
(results-notes.md, 2026-11-28, thirteenth session)

    python docs/notebook/screens/day_ago.py smd   # $SCJEPA_DATA
    python docs/notebook/screens/day_ago.py smd --blocks   # the time of day, per block

Server incidents recur at the same time of day (nightly jobs, daily peaks). For a
window ending at step t, the "day-ago next window" is the stream's readings
[t - P, t - P + 100) with P steps a day (1440 on SMD-19's 1-minute series): what
followed this time of day yesterday. It is in the past (P > 100) and label-free. Its
features: the log kNN distance and log PCA error against the official train windows
(the baselines' detectors) and the pooled window statistics, for P and 2P, each with a
flag saying whether the stream has that history (features set below every value where
not). A
second row reads the time of day instead (sin and cos of its phase), the same for
every stream. Keys and protocol: _screen.cv_table (trees). The
decision rule was written before the run.
"""

import sys

import _screen as screen
import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from training.data import Samples
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.protocol import normal_windows

torch.set_num_threads(1)

DAY = {"smd": 1440}  # steps a day
# no such history: below every feature, so the trees split it off (the probe's trees
# are evaluated by model/trees.py, which has no missing-value routing)
MISSING = -1e9


def day_ago_windows(ds, s: Samples, lag: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, 100, V) windows [end - lag, end - lag + 100) of each sample's stream, and
    whether each exists (zeros where not)."""
    out = np.zeros_like(s.x)
    ok = s.end - lag >= 0
    for i in np.unique(s.entity):
        series = ds.entities[i].test[:, ds.mask]
        view = sliding_window_view(series, 100, axis=0)  # (T - 99, V, 100)
        n = np.flatnonzero((s.entity == i) & ok)
        out[n] = view[s.end[n] - lag].transpose(0, 2, 1)
    return out, ok


def main(name: str) -> None:
    ds = screen.name_ds(name)
    period = DAY[name]
    normal = normal_windows(ds, 100, 0 if ds.folds else None)
    stats = WindowStatsFeatures(normal)
    detect = screen.detector_scores(screen.official_train_windows(ds))

    def context(s: Samples) -> np.ndarray:
        parts = []
        for lag in (period, 2 * period):
            x, ok = day_ago_windows(ds, s, lag)
            f = np.c_[detect(Samples(x, s.y, s.cur, s.entity, s.t, s.end)), stats(x)]
            f[~ok] = MISSING
            parts.append(np.c_[f, ok])
        return np.concatenate(parts, axis=1).astype(np.float32)

    def phase(s: Samples) -> np.ndarray:
        a = 2 * np.pi * (s.end % period) / period
        return np.c_[np.sin(a), np.cos(a)].astype(np.float32)

    if "--blocks" in sys.argv:  # the time of day, held-out block by block
        blocks, oof, ev = screen.cv_table(
            name,
            {
                "pooled statistics (served)": lambda s: stats(s.x),
                "pooled statistics + time of day": lambda s: np.c_[
                    stats(s.x), phase(s)
                ],
            },
            [("trees", "every window")],
        )
        by_block(blocks, oof, ev)
        return
    screen.cv_table(
        name,
        {
            "pooled statistics (served)": lambda s: stats(s.x),
            "pooled statistics + day-ago context": lambda s: np.c_[
                stats(s.x), context(s)
            ],
            "pooled statistics + time of day": lambda s: np.c_[stats(s.x), phase(s)],
            "day-ago context alone": context,
        },
        [("trees", "every window")],
    )


def by_block(blocks, oof, ev) -> None:
    """Per held-out block (in time order within each machine: block 0 the earliest):
    each row's warned rate at 1-10 false alarms per 1,000 windows (threshold set on the
    block's own out-of-fold risks: how well the risks rank, block by block), its
    onset AUC and PR AUC on the hop windows."""
    from training.evaluate.events import event_counts, threshold_at_budget
    from training.evaluate.metrics import pr_auc, roc_auc

    print("\n| block | row | warned at 1-10 | onset AUC | PR AUC |")
    for j, b in enumerate(blocks):
        on = b.hop.cur == 0
        for n, (o,) in oof.items():
            warned = []
            for budget in (1, 2, 5, 10):
                segs = b.segments(o.dense[j][0])
                c = event_counts(
                    segs, threshold_at_budget(segs, ev.lookback, budget), ev.lookback
                )
                warned.append(c.warned_rate)
            h = o.hop[j][0]
            print(
                f"| {j} | {n} | {np.mean(warned):.3f} | "
                f"{roc_auc(b.hop.y[on], h[on]):.3f} | {pr_auc(b.hop.y, h):.3f} |"
            )


if __name__ == "__main__":
    for name in (a for a in sys.argv[1:] if not a.startswith("--")):
        main(name)
