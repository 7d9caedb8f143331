"""Diagnosis, out of fold on train + validation: where do the served trees' false
alarms fall? (results-notes.md, 2026-12-02, thirty-fifth session.)

    python docs/notebook/screens/false_alarms.py msl smd skab daphnet   # $SCJEPA_DATA

The warning at the budget is decided by the few normal windows of highest risk (the
thirty-third and thirty-fourth sessions' screens). The protocol (evaluation.md item 9)
counts as a false alarm an alerting window whose last step is normal and that has no
onset within the look-back after it; a window whose first steps are an incident's last
ones is one. This sorts the false alarms of the statistics trees (fold 0's CV blocks,
out of fold, each seed's threshold at the budget on the pooled blocks) by where they
fall: "tail" (the window holds anomalous steps: an incident ended inside it), "after"
(its first step within one look-back after an incident's end), "other"; beside each,
the share of the windows that could be false alarms (last step normal, no onset
within the look-back) in that place: a false alarm rate the place does not explain
matches it.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.evaluate.events import Segment, events, threshold_at_budget

torch.set_num_threads(1)
WINDOW = 100


def places(labels: np.ndarray, ends: np.ndarray, lookback: int) -> np.ndarray:
    """Per window end: 0 "tail", 1 "after", 2 "other", -1 not a possible false alarm
    (last step anomalous, or an onset within the look-back after it)."""
    runs = events(labels)
    cum = np.r_[0, np.cumsum(labels.astype(np.int64))]
    start = np.maximum(ends - WINDOW, 0)
    held = cum[ends] - cum[start] > 0
    ons, offs = (runs[:, 0], runs[:, 1]) if len(runs) else (np.zeros(0, int),) * 2
    # the last incident end at or before the window's first step
    k = np.searchsorted(offs, start, side="right") - 1
    after = (k >= 0) & (start - np.r_[offs, 0][k] <= lookback)
    nxt = np.searchsorted(ons, ends, side="left")
    announcing = np.r_[ons, 1 << 60][nxt] - ends <= lookback
    out = np.where(held, 0, np.where(after, 1, 2))
    return np.where(labels[ends - 1].astype(bool) | announcing, -1, out)


def breakdown(name: str, label: str, blocks, o, ev) -> None:
    """Print the places of one row's false alarms (its out-of-fold risks ``o``, seed
    0: the trees' seeds are alike) at 1, 3 and 10 per 1,000, after the places of the
    windows that could be false alarms."""
    segs = [
        (st.labels, st.ends, d[0][st.idx])
        for b, d in zip(blocks, o.dense, strict=True)
        for st in b.stretches
    ]
    where = [places(np.asarray(lab), np.asarray(e), ev.lookback) for lab, e, _ in segs]
    pos = np.concatenate(where)
    base = np.array([(pos == c).sum() for c in range(3)]) / max((pos >= 0).sum(), 1)
    print(f"| {name} | {label}: possible false alarms | " + " | ".join(
        f"{b:.3f}" for b in base) + f" | {(pos >= 0).sum()} |")  # fmt: skip
    segments = [Segment(lab, e, s) for lab, e, s in segs]
    for budget in (1.0, 3.0, 10.0):
        thr = threshold_at_budget(segments, ev.lookback, budget)
        fa = np.concatenate(
            [w[(s >= thr) & (w >= 0)] for (_, _, s), w in zip(segs, where, strict=True)]
        )
        share = np.array([(fa == c).sum() for c in range(3)]) / max(len(fa), 1)
        print(f"| {name} | {label}: false alarms at {budget:g} per 1,000 | " + " | ".join(
            f"{x:.3f}" for x in share) + f" | {len(fa)} |", flush=True)  # fmt: skip


HEADER = "| data set | windows | tail | after | other | n |"


def breakdowns(name: str, blocks, oof, ev) -> None:
    """Each row's false alarms by place (:func:`breakdown`): statistics_screen's
    ``after``."""
    print(HEADER)
    for label, o in oof.items():
        breakdown(name, label, blocks, o[0], ev)


if __name__ == "__main__":
    print(HEADER)
    for name in sys.argv[1:]:
        feats = screen.statistics(screen.name_ds(name), 0)
        blocks, oof, ev = screen.cv_table(
            name, {"statistics": feats}, [("trees", "every window")]
        )
        breakdown(name, "served trees", blocks, oof[next(iter(oof))][0], ev)
