"""Screen, on held-out CV blocks: do the statistics trees warn more when they are also
fitted on the other data sets' labelled windows? And how much do they warn fitted on
the other data sets alone, as a user's stream without labels would be served?
(results-notes.md, 2026-11-29, twentieth session; criterion there.)

    python docs/notebook/screens/pooled_probe.py DATASET RESULTS_DIR [...] \\
        --others msl,smd,skab,daphnet

The 18 pooled window statistics have the same meaning on every data set: each data
set's are z-scored on its own official train windows, so a value says how far a window
is from that data set's normal. For each DATASET (a `scjepa evaluate` run with
cv_scores.npz, every fold) and held-out block j, as select.out_of_fold fits: the
statistics trees fitted on the other blocks of DATASET and on every train + validation
hop window of the data sets in --others but DATASET (their fold 0: never a test
split), stopped and calibrated on block j + 1, scoring block j ("pooled"); and fitted
on the others alone ("others only"). Then rules.py's nested check: each candidate's
held-out warned rate and PR AUC ("always: ..."), beside the run's own "raw-feature
probe (trees)". No test window is read.
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import rules
import torch

from training.data import load_dataset
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import OutOfFold, cross_fit, cv_blocks, read_out_of_fold
from training.evaluate.warning import EventConfig

torch.set_num_threads(1)
OTHERS: list[str] = []  # --others


def stats_of(name: str, fold: int, stride: int):
    ds = load_dataset(name)
    blocks = cv_blocks(ds, fold, 4, stride)
    stats = WindowStatsFeatures(normal_windows(ds, 100, fold if ds.folds else None))
    return ds, blocks, stats


def labelled_windows(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Every train + validation hop window of ``name``'s fold 0: statistics, labels."""
    _, blocks, stats = stats_of(name, 0, 100)
    return (
        np.concatenate([stats(b.hop.x) for b in blocks]),
        np.concatenate([b.hop.y for b in blocks]),
    )


def pooled_candidates(name: str, results: Path) -> dict[str, list[OutOfFold]]:
    cfg = json.loads((results / "results.json").read_text())["config"]
    ev = EventConfig(**cfg["events"])
    probe = replace(ProbeConfig(**cfg["probe"]), kind="trees")
    others = [labelled_windows(o) for o in OTHERS if o != name]
    ox = np.concatenate([x for x, _ in others])
    oy = np.concatenate([y for _, y in others])
    print(f"{name}: {len(oy)} windows of the others ({oy.sum()} positive)", flush=True)
    n_folds = len(next(iter(read_out_of_fold(results / "cv_scores.npz").values())))
    out: dict[str, list[OutOfFold]] = {}
    for f in range(n_folds):
        _, blocks, stats = stats_of(name, f, ev.stride)
        feats = {
            kind: [stats(getattr(b, kind).x) for b in blocks]
            for kind in ("hop", "dense")
        }

        def fitter(own: bool, feats=feats, blocks=blocks):
            def fit(idx: list[int], v: int, seed: int):
                xs = [feats["hop"][i] for i in idx] if own else []
                ys = [blocks[i].hop.y for i in idx] if own else []
                p = Probe(18, probe, seed).fit(
                    np.concatenate([*xs, ox]),
                    np.concatenate([*ys, oy]),
                    feats["hop"][v],
                    blocks[v].hop.y,
                )
                return lambda i, part: p.predict(feats[part][i])

            return fit

        # the trees are deterministic (every feature at each split): one seed
        for label, own in (("pooled", True), ("others only", False)):
            o = cross_fit(blocks, fitter(own), [0], 18)
            three = [
                [np.repeat(a, 3, axis=0) for a in arrays]
                for arrays in (o.hop, o.dense, o.cal)
            ]
            o = OutOfFold(three[0], three[1], 18, three[2])  # as the run's 3 seeds
            out.setdefault(f"stats (trees, {label})", []).append(o)
        print(f"{name} fold {f}: fitted", flush=True)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    i = args.index("--others")
    OTHERS = args[i + 1].split(",")
    del args[i : i + 2]
    rules.main(args, pooled_candidates)
