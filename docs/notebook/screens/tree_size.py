"""Screen, on held-out CV blocks: would the statistics trees warn more with another
size? (results-notes.md, 2026-11-29, twentieth session; criterion there.) The tree
probe has kept scikit-learn's shape since the fourth session (15 leaves, shrinkage
0.05, 200 stages, 20 windows per leaf at least); with 8 to 50 incidents per data set,
smaller or more cautious trees may generalize better.

    python docs/notebook/screens/tree_size.py DATASET RESULTS_DIR [...]

RESULTS_DIR is a `scjepa evaluate` run with cv_scores.npz. The statistics trees are
fitted again out of fold, as `scjepa evaluate` fits them (select.out_of_fold, 3
seeds, every fold), at the default size (a control: it should score as the run's own
"stats (trees)") and four others; then rules.py's nested check, which prints each
candidate's held-out warned rate and PR AUC ("always: ...") and the served rule's with
the five added. No test window is read.
"""

import inspect
import json
import sys
from dataclasses import replace
from pathlib import Path

import rules
import sklearn.ensemble
import torch

from training.data import load_dataset
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.probe import ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import OutOfFold, cv_blocks, out_of_fold, read_out_of_fold
from training.evaluate.warning import EventConfig

torch.set_num_threads(1)
Boosting = sklearn.ensemble.HistGradientBoostingClassifier
MIN_LEAF = {"n": 20}  # scikit-learn's default; the probe does not set it


class MinLeaf(Boosting):  # the probe builds its trees with this one (below)
    def __init__(self, **kw):
        kw.setdefault("min_samples_leaf", MIN_LEAF["n"])
        super().__init__(**kw)


MinLeaf.__init__.__signature__ = inspect.signature(Boosting.__init__)  # get_params
sklearn.ensemble.HistGradientBoostingClassifier = MinLeaf

SIZES = {  # label: (ProbeConfig changes, min_samples_leaf)
    "default refit": ({}, 20),
    "4 leaves": ({"max_leaves": 4}, 20),
    "31 leaves": ({"max_leaves": 31}, 20),
    "shrinkage 0.02": ({"tree_lr": 0.02}, 20),
    "200 windows per leaf": ({}, 200),
}


def sized_trees(name: str, results: Path) -> dict[str, list[OutOfFold]]:
    ds = load_dataset(name)
    cfg = json.loads((results / "results.json").read_text())["config"]
    ev = EventConfig(**cfg["events"])
    probe = replace(ProbeConfig(**cfg["probe"]), kind="trees")
    n_folds = len(next(iter(read_out_of_fold(results / "cv_scores.npz").values())))
    out: dict[str, list[OutOfFold]] = {}
    for f in range(n_folds):
        blocks = cv_blocks(ds, f, 4, ev.stride)
        stats = WindowStatsFeatures(normal_windows(ds, 100, f if ds.folds else None))
        for label, (change, leaf) in SIZES.items():
            MIN_LEAF["n"] = leaf
            o = out_of_fold(blocks, stats, replace(probe, **change), range(3))
            out.setdefault(f"stats (trees, {label})", []).append(o)
        print(f"{name} fold {f}: {len(SIZES)} sizes fitted", flush=True)
    return out


if __name__ == "__main__":
    rules.main(sys.argv[1:], sized_trees)
