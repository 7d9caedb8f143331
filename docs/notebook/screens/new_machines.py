"""Screen, out of fold on train + validation: how does the served recipe do on machines
it was never fitted on, and does each machine's own recent normal, as the reference
of its statistics, help there? (results-notes.md, 2026-12-02, thirty-sixth session;
criterion there.)

    python docs/notebook/screens/new_machines.py msl smd   # $SCJEPA_DATA
    python docs/notebook/screens/new_machines.py --detectors msl smd

MSL and SMD-19 are split in time within each entity, so the served model's
cross-validation (and its test split) holds the same machines it was fitted on. Here
the blocks are whole entities (select.cv_blocks ``by_entity``): fitted on two blocks'
machines, stopped and calibrated on a third's, scoring a fourth's. Rows: the served
statistics trees; the same beside the statistics z-scored on the machine's own last
1,440 steps of its official train split (a day at SMD's one reading a minute: what a
service could learn from a new stream's first day); the same on its whole train split
(a bound). The served trees' time-blocked figures are printed first, for comparison.

``--detectors``: do the label-free detector scores (kNN and PCA, as _screen fits them)
carry to unseen machines better than the statistics? The trees on statistics, on
statistics + kNN + PCA and on kNN + PCA, in time blocks (the detectors referenced on
every machine's train windows, as served) and in machine blocks (referenced on the
fitted machines' train windows only, refitted for each held-out block).
"""

import sys

import _screen as screen
import numpy as np
from entity_scale import entity_scale

from training.data.windows import cut_windows
from training.evaluate.select import OutOfFold

DAY = 1440


def main(name: str) -> None:
    ds = screen.name_ds(name)
    feats = screen.statistics(ds, 0)
    screen.cv_table(
        name, {"statistics, time blocks": feats}, [("trees", "every window")]
    )
    day, whole = entity_scale(ds, DAY), entity_scale(ds)
    screen.cv_table(
        name,
        {
            "statistics, machine blocks": feats,
            "+ own last day": lambda s: np.c_[feats(s), day(s)],
            "+ own train split (bound)": lambda s: np.c_[feats(s), whole(s)],
        },
        [("trees", "every window")],
        by_entity=True,
    )


def reference(ds, entities):
    """Samples -> (N, 2) kNN and PCA scores referenced on ``entities``' train windows."""
    x = [ds.entities[i].train[:, ds.mask].astype(np.float32) for i in entities]
    return screen.detector_scores(np.concatenate([cut_windows(w, 100) for w in x]))


def joined(feats, det, with_stats: bool):
    return (lambda s: np.c_[feats(s), det(s)]) if with_stats else det


def refitted(ds, feats, with_stats: bool):
    """A cv_table row: trees on (statistics +) kNN + PCA, the detectors referenced
    on the fitted blocks' machines alone, for each held-out block."""
    fit = screen.probe_fit("trees")

    def row(blocks) -> OutOfFold:
        k, hop, dense = len(blocks), [], []
        for j in range(k):
            v = (j + 1) % k
            tr = [i for i in range(k) if i not in (j, v)]
            ents = np.unique(np.concatenate([blocks[i].hop.entity for i in tr]))
            f = joined(feats, reference(ds, ents), with_stats)
            x_tr = np.concatenate([f(blocks[i].hop) for i in tr])
            y_tr = np.concatenate([blocks[i].hop.y for i in tr])
            scorers = fit(x_tr, y_tr, f(blocks[v].hop), blocks[v].hop.y)
            fj, dj = f(blocks[j].hop), f(blocks[j].dense)
            hop.append(np.stack([sc(fj) for sc in scorers] * 3))
            dense.append(np.stack([sc(dj) for sc in scorers] * 3))
        return OutOfFold(hop, dense, fj.shape[1])

    return row


def detectors(name: str) -> None:
    ds = screen.name_ds(name)
    feats = screen.statistics(ds, 0)
    served = reference(ds, range(len(ds.entities)))
    screen.cv_table(
        name,
        {
            "statistics, time blocks": feats,
            "statistics + kNN + PCA": joined(feats, served, True),
            "kNN + PCA": served,
        },
        [("trees", "every window")],
    )
    screen.cv_table(
        name,
        {"statistics, machine blocks": feats},
        [("trees", "every window")],
        extra={
            "statistics + kNN + PCA, trees": refitted(ds, feats, True),
            "kNN + PCA, trees": refitted(ds, feats, False),
        },
        by_entity=True,
    )


names = [a for a in sys.argv[1:] if a != "--detectors"]
for name in names:
    (detectors if "--detectors" in sys.argv else main)(name)
