"""Screen, on held-out CV blocks: would scoring twice as often (a window every 5 steps,
8 on Daphnet) warn of more incidents at the same share of windows in false alert?
(results-notes.md, 2026-11-27, eighth session)

    python docs/notebook/screens/stride.py msl skab smd daphnet   # $SCJEPA_DATA
    python docs/notebook/screens/stride.py --runs DATASET HALF_RUN SERVED_RUN [...]

paging.py found a window every 10 steps warning far more than one every 100. Here the
served raw-feature trees (pooled statistics, the served recipe; SMD-19's served model)
are fitted on the served model's CV blocks (fold 0, K = 4: two blocks to fit, the next
to stop on, the held-out one scored; no test window) and score dense windows at half
the evaluated stride. Two paging rules, each held to 1-10 false alarms per 1,000 of the
windows it scores (paging.py): every window at half the stride, and every second one
(the evaluated stride). Keys: select.cv_keys. The decision rule was written before the
run. ``--runs``: the same comparison for the candidate SERVED_RUN serves, its
out-of-fold risks read from HALF_RUN, a `scjepa evaluate --stride` run at half the
stride (its cv_scores.npz only; its test figures are not read).
"""

import json
import sys
from pathlib import Path

import _screen as screen
import numpy as np
import torch
from paging import BUDGETS, paged

from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import (
    CVConfig,
    OutOfFold,
    cv_blocks,
    cv_keys,
    read_out_of_fold,
)

torch.set_num_threads(1)


def compare(name: str, folds: list, oof: list[OutOfFold], lookback: int) -> None:
    """Every window of ``oof`` (out-of-fold risks at the half stride, one per fold of
    ``folds``) against every second one, each held to 1-10 false alarms per 1,000 of
    its own windows (the same bootstrap draws in both cv_keys calls)."""
    cands = {every: paged(folds, oof, every, 1) for every in (1, 2)}
    k1, k2 = (
        cv_keys(folds, cands, lookback, CVConfig(n_boot=1000, budgets=b))
        for b in (BUDGETS, tuple(x / 2 for x in BUDGETS))
    )
    diff = k1.warned_reps[1] - k2.warned_reps[2]
    print(
        f"| {name} ({k1.cv['events']} events) | {k1.warned[1]:.3f} | "
        f"{k2.warned[2]:.3f} | {k1.warned[1] - k2.warned[2]:+.4f} "
        f"({np.std(diff):.3f}) | {k1.warned_one[1]:.3f} / {k2.warned_one[2]:.3f} |",
        flush=True,
    )


def stand_in(name: str) -> None:
    """The served raw-feature trees, fitted here on fold 0's CV blocks."""
    ds = screen.name_ds(name)
    run = Path("docs/results") / (
        "skab-trees" if name == "skab" else f"{name}-trees200"
    )
    ev = json.loads((run / "results.json").read_text())["config"]["events"]
    stride, lookback = ev["stride"] // 2, ev["lookback"]
    blocks = cv_blocks(ds, 0, 4, stride)
    stats = WindowStatsFeatures(normal_windows(ds, 100, 0 if ds.folds else None))
    f_hop = [stats(b.hop.x) for b in blocks]
    k = len(blocks)
    hop, dense = [], []
    for j in range(k):
        v = (j + 1) % k
        fit = [i for i in range(k) if i not in (j, v)]
        probe = Probe(f_hop[0].shape[1], ProbeConfig(kind="trees"), 0)
        probe.fit(
            np.concatenate([f_hop[i] for i in fit]),
            np.concatenate([blocks[i].hop.y for i in fit]),
            f_hop[v],
            blocks[v].hop.y,
        )
        hop.append(np.stack([probe.predict(f_hop[j])] * 3))  # deterministic trees
        dense.append(np.stack([probe.predict(stats(blocks[j].dense.x))] * 3))
    compare(name, [blocks], [OutOfFold(hop, dense, f_hop[0].shape[1])], lookback)


def served(name: str, half_run: Path, served_run: Path) -> None:
    """The candidate ``served_run`` serves, its out-of-fold risks read from
    ``half_run`` (`scjepa evaluate --stride` at half the stride; only its
    cv_scores.npz and config are read, not its test figures)."""
    ds = screen.name_ds(name)
    winner = json.loads((served_run / "results.json").read_text())["leaderboard"]
    ev = json.loads((half_run / "results.json").read_text())["config"]["events"]
    oof = read_out_of_fold(half_run / "cv_scores.npz")[winner["winner"]]
    folds = [cv_blocks(ds, f, 4, ev["stride"]) for f in range(len(oof))]
    compare(f"{name}: {winner['winner']}", folds, oof, ev["lookback"])


args = sys.argv[1:]
if args and args[0] == "--runs":
    for name, half, full in zip(args[1::3], args[2::3], args[3::3], strict=True):
        served(name, Path(half), Path(full))
else:
    for name in args:
        stand_in(name)
