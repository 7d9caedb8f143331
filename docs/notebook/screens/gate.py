"""Screen, out of fold on train + validation: do the trees warn of more incidents when
no alert is raised on a window that looks like part of an incident? (results-notes.md,
2026-12-02, thirty-sixth session; criterion there.)

    python docs/notebook/screens/gate.py msl smd skab daphnet   # $SCJEPA_DATA
    python docs/notebook/screens/gate.py --folds 1,2,3,4 skab daphnet

A window an incident ended in (its first steps anomalous, its last normal) is a false
alarm when it alerts (false_alarms.py: a quarter of SMD-19's, a third to a half of
SKAB's), and a window that ends before an onset never holds an incident's steps unless
another incident came just before. The gate: a second set of trees, on the same 18
statistics, fitted to whether the window holds any anomalous step (``cur``), stopped
and calibrated like the risk's; a window alerts only where that probability is below
0.5. The risk itself is the served trees' (its PR AUC unchanged: the gate decides
alerts, so the rows' "PR AUC" is that of the gated score). Rows: the served statistics
trees; gated; gated by the true ``cur`` (a bound no model reaches, not a candidate).
"""

import sys

import _screen as screen
import numpy as np
import torch
from false_alarms import breakdowns

from training.evaluate.select import OutOfFold

torch.set_num_threads(1)
LEVEL = 0.5


def trees(x_tr, y_tr, x_v, y_v):
    return screen.probe_fit("trees")(x_tr, y_tr, x_v, y_v)[0]  # one: deterministic


def gated(feats, oracle: bool = False):
    """A cv_table row: the served trees' risk, 0 where the gate holds the window part
    of an incident (its trees' probability >= LEVEL, or with ``oracle`` the truth)."""

    def row(blocks) -> OutOfFold:
        k = len(blocks)
        f_hop = [feats(b.hop) for b in blocks]
        f_dense = [feats(b.dense) for b in blocks]
        hop, dense = [], []
        for j in range(k):
            v = (j + 1) % k
            tr = [i for i in range(k) if i not in (j, v)]
            x_tr = np.concatenate([f_hop[i] for i in tr])
            y_tr = np.concatenate([blocks[i].hop.y for i in tr])
            risk = trees(x_tr, y_tr, f_hop[v], blocks[v].hop.y)
            if not oracle:
                c_tr = np.concatenate([blocks[i].hop.cur for i in tr])
                inside = trees(x_tr, c_tr, f_hop[v], blocks[v].hop.cur)
            for f, s, out in ((f_hop[j], blocks[j].hop, hop),
                              (f_dense[j], blocks[j].dense, dense)):  # fmt: skip
                held = s.cur == 1 if oracle else inside(f) >= LEVEL
                out.append(np.stack([np.where(held, 0.0, risk(f))] * 3))
        return OutOfFold(hop, dense, f_hop[0].shape[1])

    return row


screen.statistics_screen(
    sys.argv[1:],
    lambda ds, feats, fold: {
        f"statistics, trees, gated at {LEVEL}": gated(feats),
        "statistics, trees, gated by the truth (bound)": gated(feats, oracle=True),
    },
    after=breakdowns,
)
