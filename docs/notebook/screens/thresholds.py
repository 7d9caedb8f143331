"""Screen, on held-out CV blocks: does the served threshold hold its false-alarm budget
on data it was not set on, and does ranking each window's risk among its own stream's
earlier risks hold it better? (results-notes.md, 2026-11-27, seventh session)

    python docs/notebook/screens/thresholds.py DATASET RUN_DIR [DATASET RUN_DIR ...]

RUN_DIR is a `scjepa evaluate` run with cv_scores.npz; its served candidate's
out-of-fold risks are read (seed by seed; no refit, no test window). For every held-out
block j of every fold, the threshold is set at 1 false alarm per 1,000 windows on block
j + 1 (the block the probe was calibrated on, as the served threshold is set on the
validation split) or on every other block pooled (the same seed's risks, or every
seed's: what `scjepa evaluate`'s cross-fitted threshold pools, 2026-11-28, tenth
session), or the higher of the first and the last (the served rule since then), or,
where cv_scores.npz has the calibration-block risks, as a quantile: the budget set on
every other block's risks turned into quantiles within their block, carried to block j's
fold model as that quantile of its risks on block j + 1. Each is applied to block j:
the realized false alarms per 1,000 windows and the warned rate, counted over the
blocks and folds (mean over seeds).

Scores: the raw risk, and the per-stream rank, the share of the stream's earlier
windows (in the same stretch, so in time order; label-free, causal) whose risk is
below this one's, plus 0.001 x the risk to order the windows above all their past. A
stretch's first 100 windows get no rank and never alert.
"""

import bisect
import json
import os
import sys
from pathlib import Path

import numpy as np

from training.data import load_dataset
from training.evaluate.events import Segment, event_counts, threshold_at_budget
from training.evaluate.select import (
    cv_blocks,
    ecdf,
    quantile_threshold,
    read_out_of_fold,
)
from training.evaluate.warning import EventConfig

WARMUP = 100
BUDGET = float(os.environ.get("SCREEN_BUDGET", "1.0"))  # false alarms per 1,000 windows


def own_rank(scores: np.ndarray) -> np.ndarray:
    out = np.full(len(scores), -1.0)
    past: list[float] = []
    for i, r in enumerate(scores.tolist()):
        if i >= WARMUP:
            out[i] = bisect.bisect_left(past, r) / len(past) + 1e-3 * r
        bisect.insort(past, r)
    return out


def scored(score: str, risk: np.ndarray) -> np.ndarray:
    return own_rank(risk) if score == "rank" else risk


def screen(name: str, run: Path) -> dict[str, tuple[float, float]]:
    ds = load_dataset(name)
    res = json.loads((run / "results.json").read_text())
    ev = EventConfig(**res["config"]["events"])
    served = res["leaderboard"]["winner"]
    oof = read_out_of_fold(run / "cv_scores.npz")[served]
    out: dict[str, list] = {}
    for f, per_fold in enumerate(oof):
        blocks = cv_blocks(ds, f, 4, ev.stride)
        k = len(blocks)
        n_seeds = per_fold.dense[0].shape[0]
        # segs[s][score][b]: block b's stretches scored with seed s's risks
        segs = [
            {
                score: [
                    [
                        Segment(st.labels, st.ends, scored(score, risk[st.idx]))
                        for st in blocks[b].stretches
                    ]
                    for b, risk in enumerate(per_fold.dense[i][s] for i in range(k))
                ]
                for score in ("risk", "rank")
            }
            for s in range(n_seeds)
        ]
        # each block's risks as their quantile within the block and seed (ecdf)
        qsegs = [
            [
                [
                    Segment(st.labels, st.ends, ecdf(per_fold.dense[b][t])[st.idx])
                    for st in blocks[b].stretches
                ]
                for b in range(k)
            ]
            for t in range(n_seeds)
        ]
        for s in range(n_seeds):
            for score, by_block in segs[s].items():
                for j in range(k):
                    v = (j + 1) % k
                    others = [g for b in range(k) if b != j for g in by_block[b]]
                    every = [
                        g
                        for t in range(n_seeds)
                        for b in range(k)
                        if b != j
                        for g in segs[t][score][b]
                    ]
                    got: dict[str, float] = {}
                    for source, fit in (
                        ("block j+1", by_block[v]),
                        ("pooled", others),
                        ("pooled, every seed", every),
                    ):
                        if score == "rank" and source == "pooled, every seed":
                            continue
                        thr = threshold_at_budget(fit, ev.lookback, BUDGET)
                        c = event_counts(by_block[j], thr, ev.lookback)
                        out.setdefault((score, source), []).append(
                            (c.false_alarms, c.windows, c.warned, c.events, s)
                        )
                        got[source] = thr
                    if score == "risk" and per_fold.cal:
                        # the budget in quantile space, carried to model j's own
                        # calibration block (tenth session)
                        pooled_q = [
                            g
                            for t in range(n_seeds)
                            for b in range(k)
                            if b != j
                            for g in qsegs[t][b]
                        ]
                        u = threshold_at_budget(pooled_q, ev.lookback, BUDGET)
                        thr = quantile_threshold(per_fold.cal[j][s], u)
                        c = event_counts(by_block[j], thr, ev.lookback)
                        out.setdefault(
                            (score, "pooled quantile on block j+1"), []
                        ).append((c.false_alarms, c.windows, c.warned, c.events, s))
                        got["quantile"] = thr
                    if score == "risk":  # the more cautious of the two estimates
                        thr = max(got["block j+1"], got["pooled, every seed"])
                        c = event_counts(by_block[j], thr, ev.lookback)
                        out.setdefault(
                            (score, "max(j+1, pooled every seed)"), []
                        ).append((c.false_alarms, c.windows, c.warned, c.events, s))
                        if "quantile" in got:
                            thr = max(thr, got["quantile"])
                            c = event_counts(by_block[j], thr, ev.lookback)
                            out.setdefault((score, "max(the last two)"), []).append(
                                (c.false_alarms, c.windows, c.warned, c.events, s)
                            )
                    # the oracle: the threshold set on block j itself
                    thr = threshold_at_budget(by_block[j], ev.lookback, BUDGET)
                    c = event_counts(by_block[j], thr, ev.lookback)
                    out.setdefault((score, "block j itself"), []).append(
                        (c.false_alarms, c.windows, c.warned, c.events, s)
                    )
    print(f"\n## {name} ({served}), budget {BUDGET:g}: realized false alarms per 1,000"
          " / warned rate")  # fmt: skip
    summary = {}
    for (score, source), rows in out.items():
        a = np.array(rows, dtype=float)
        fa, warned = [], []
        for s in np.unique(a[:, 4]):
            r = a[a[:, 4] == s].sum(0)
            fa.append(1000 * r[0] / r[1])
            warned.append(r[2] / r[3])
        summary[f"{score}, threshold from {source}"] = (np.mean(fa), np.mean(warned))
        print(f"| {score}, threshold from {source} | {np.mean(fa):.2f} | "
              f"{np.mean(warned):.3f} |", flush=True)  # fmt: skip
    return summary


if __name__ == "__main__":
    args = sys.argv[1:]
    every = [screen(n, Path(d)) for n, d in zip(args[::2], args[1::2], strict=True)]
    print("\n## mean over the data sets")
    for key in every[0]:
        fa, w = np.mean([e[key] for e in every], axis=0)
        print(f"| {key} | {fa:.2f} | {w:.3f} |")
