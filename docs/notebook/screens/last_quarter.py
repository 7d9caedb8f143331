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
from false_alarms import HEADER, breakdown

from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.protocol import normal_windows
from training.evaluate.select import OutOfFold

torch.set_num_threads(1)
QUARTER = 25


def with_last_quarter(ds, fold: int, feats):
    """Samples -> the 18 statistics of the window and the 18 of its last 25 steps."""
    normal = normal_windows(ds, 100, fold if ds.folds else None)
    last = WindowStatsFeatures(normal[:, -QUARTER:])
    return lambda s: np.c_[feats(s), last(s.x[:, -QUARTER:])]


def dense_fit(feats):
    """A cv_table ``extra`` row: the served trees fitted on the fit blocks' dense
    windows, stopped and calibrated on the next block's hop windows as served."""
    fit = screen.probe_fit("trees")

    def row(blocks) -> OutOfFold:
        k = len(blocks)
        f_hop = [feats(b.hop) for b in blocks]
        f_dense = [feats(b.dense) for b in blocks]
        hop, dense = [], []
        for j in range(k):
            v = (j + 1) % k
            tr = [i for i in range(k) if i not in (j, v)]
            x_tr = np.concatenate([f_dense[i] for i in tr])
            y_tr = np.concatenate([blocks[i].dense.y for i in tr])
            (score,) = fit(x_tr, y_tr, f_hop[v], blocks[v].hop.y)
            hop.append(np.stack([score(f_hop[j])] * 3))
            dense.append(np.stack([score(f_dense[j])] * 3))
        return OutOfFold(hop, dense, f_hop[0].shape[1])

    return row


def main(args: list[str]) -> None:
    folds = [0]
    if "--folds" in args:
        i = args.index("--folds")
        folds = [int(f) for f in args.pop(i + 1).split(",")]
        args.pop(i)
    for name in args:
        ds = screen.name_ds(name)
        for fold in folds:
            feats = screen.statistics(ds, fold)
            quarter = with_last_quarter(ds, fold, feats)
            blocks, oof, ev = screen.cv_table(
                name,
                {"statistics": feats},
                [("trees", "every window")],
                fold=fold,
                extra={
                    "statistics + last quarter, trees": screen.held_out(
                        quarter, screen.probe_fit("trees")
                    ),
                    "statistics, trees, dense windows": dense_fit(feats),
                },
            )
            print(HEADER)
            for label, o in oof.items():
                breakdown(name, label, blocks, o[0], ev)


if __name__ == "__main__":
    main(sys.argv[1:])
