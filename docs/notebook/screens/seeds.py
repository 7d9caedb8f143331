"""Screen, on held-out CV blocks: does the mean of an MLP candidate's probe seeds
(one model, the seed ensemble) warn more than a single seed? (results-notes.md,
2026-11-27, eighth session)

    python docs/notebook/screens/seeds.py DATASET RUN_DIR [DATASET RUN_DIR ...]

The MLP probes' figures are means over seeds of each seed's figures, and export serves
one seed's probe. Averaging the seeds' risks is the usual way to lower a model's
variance. RUN_DIR is a `scjepa evaluate` run with cv_scores.npz (3 seeds per held-out
block): each MLP candidate's out-of-fold risks are scored as the selection rule scores
them (select.cv_keys: warned rate at 1-10 false alarms per 1,000 windows, mean over
seeds) and as one model, the mean of the seeds' risks; the same bootstrap draws. No
refit, no test window. The decision rule was written before the run.
"""

import json
import sys
from pathlib import Path

import numpy as np

from training.data import load_dataset
from training.evaluate.select import (
    CVConfig,
    OutOfFold,
    cv_blocks,
    cv_keys,
    read_out_of_fold,
)


def ensembled(o: OutOfFold) -> OutOfFold:
    """The seeds' mean risk, repeated for every seed (one model)."""

    def mean(a: np.ndarray) -> np.ndarray:
        return np.repeat(a.mean(0, keepdims=True), len(a), axis=0)

    return OutOfFold([mean(h) for h in o.hop], [mean(d) for d in o.dense], o.n_inputs)


def screen(name: str, run: Path) -> None:
    ds = load_dataset(name)
    ev = json.loads((run / "results.json").read_text())["config"]["events"]
    oof = read_out_of_fold(run / "cv_scores.npz")
    mlps = [n for n in oof if "(trees)" not in n]
    folds = [cv_blocks(ds, f, 4, ev["stride"]) for f in range(len(oof[mlps[0]]))]
    cands = {}
    for n in mlps:
        cands[n] = oof[n]
        cands[f"{n} [seed mean]"] = [ensembled(o) for o in oof[n]]
    keys = cv_keys(folds, cands, ev["lookback"], CVConfig(n_boot=1000))
    print(
        f"\n## {name}: {keys.cv['events']} events\n| MLP candidate | warned at 1-10: "
        "seeds / seed mean | difference (SD) | PR AUC: seeds / seed mean |"
    )
    for n in mlps:
        e = f"{n} [seed mean]"
        d = keys.warned_reps[e] - keys.warned_reps[n]
        print(
            f"| {n} | {keys.warned[n]:.3f} / {keys.warned[e]:.3f} | "
            f"{keys.warned[e] - keys.warned[n]:+.4f} ({np.std(d):.3f}) | "
            f"{keys.pr_auc[n]:.3f} / {keys.pr_auc[e]:.3f} |",
            flush=True,
        )


args = sys.argv[1:]
for name, run in zip(args[::2], args[1::2], strict=True):
    screen(name, Path(run))
