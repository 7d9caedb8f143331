"""Screen, on held-out CV blocks: does alerting on the mean of a stream's last few
risks, rather than on the latest one, warn of more incidents at the same false-alarm
budget? (results-notes.md, 2026-11-29, twentieth session; criterion there.)

    python docs/notebook/screens/smoothing.py DATASET RESULTS_DIR [...]

The service scores a window every stride (5 steps; 8 on Daphnet) and alerts when its
risk reaches the threshold. A false alarm is often one spike in a calm stretch; a
precursor, if there is one, may last several windows. Here every candidate's
out-of-fold risks on the dense windows (cv_scores.npz, no refit) are replaced by their
causal mean over the last m windows of the same stream (fewer at its start), with m
spanning a fifth or half of the look-back (20 or 50 steps; Daphnet 32 or 64). The
hop windows' risks (the PR AUC key) are left as they are: only the alerting changes.
Then rules.py's nested check: each candidate's held-out warned rate ("always: ..."),
raw and smoothed. No test window is read.
"""

import json
import sys
from pathlib import Path

import numpy as np
import rules

from training.data import load_dataset
from training.evaluate.select import OutOfFold, cv_blocks, read_out_of_fold
from training.evaluate.warning import EventConfig

SHARES = {"a fifth": 0.2, "half": 0.5}  # of the look-back


def causal_mean(risk: np.ndarray, stretches, m: int) -> np.ndarray:
    """(seeds, windows) -> the same, each stretch's windows averaged over their last m."""
    out = risk.copy()
    for st in stretches:
        r = risk[:, st.idx]
        c = np.cumsum(np.pad(r, ((0, 0), (1, 0))), axis=1)
        n = np.arange(1, r.shape[1] + 1)
        lo = np.maximum(n - m, 0)
        out[:, st.idx] = (c[:, n] - c[:, lo]) / (n - lo)
    return out


def smoothed(name: str, results: Path) -> dict[str, list[OutOfFold]]:
    ds = load_dataset(name)
    ev = EventConfig(
        **json.loads((results / "results.json").read_text())["config"]["events"]
    )
    oof = read_out_of_fold(results / "cv_scores.npz")
    out: dict[str, list[OutOfFold]] = {}
    n_folds = len(next(iter(oof.values())))
    for f in range(n_folds):
        blocks = cv_blocks(ds, f, 4, ev.stride)
        k = len(blocks)
        for share in SHARES.values():
            m = max(2, round(share * ev.lookback / ev.stride))
            for cand, per_fold in oof.items():
                o = per_fold[f]
                dense = [
                    causal_mean(d, blocks[j].stretches, m)
                    for j, d in enumerate(o.dense)
                ]
                cal = [
                    causal_mean(c, blocks[(j + 1) % k].stretches, m)
                    for j, c in enumerate(o.cal)
                ]
                out.setdefault(f"{cand}, mean of {m}", []).append(
                    OutOfFold(o.hop, dense, o.n_inputs, cal)
                )
        print(f"{name} fold {f}: smoothed", flush=True)
    return out


if __name__ == "__main__":
    rules.main(sys.argv[1:], smoothed)
