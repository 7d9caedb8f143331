"""Screen, on held-out CV blocks: would the served selection rule choose better if it
were offered two more candidates, the window statistics + band powers (or, with
--own-past, + the stream's own past: own_past.py; with --entity-scale, + the
statistics z-scored per entity: entity_scale.py) read by the MLP and by the trees?
(results-notes.md, 2026-11-28, fifteenth session; criteria there)

    python docs/notebook/screens/candidates.py [--own-past | --entity-scale] DATASET RESULTS_DIR [...]

RESULTS_DIR is a `scjepa evaluate` run with cv_scores.npz (the ten candidates'
out-of-fold risks). The two new candidates' out-of-fold risks are computed on every
fold's blocks by select.out_of_fold, as `scjepa evaluate` computes the ten's (3 seeds,
the run's probe settings); their band powers are spectral.py's, pooled over channels
by mean, max and min and standardised on the fold's official train windows, as the
statistics are. Then rules.py's nested check, on the ten and on the ten + 2.
No test window is read.
"""

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import rules
import torch
from entity_scale import entity_scale
from own_past import own_past
from spectral import band_shares

from training.data import load_dataset
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.features import Standardizer
from training.evaluate.probe import ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import OutOfFold, cv_blocks, out_of_fold, read_out_of_fold
from training.evaluate.warning import EventConfig

torch.set_num_threads(2)
OWN_PAST = False  # --own-past
ENTITY_SCALE = False  # --entity-scale


def pooled_bands(x: np.ndarray) -> np.ndarray:
    f = band_shares(x)
    return np.concatenate([f.mean(2), f.max(2), f.min(2)], axis=1).astype(np.float32)


def band_candidates(name: str, results: Path) -> dict[str, list[OutOfFold]]:
    ds = load_dataset(name)
    cfg = json.loads((results / "results.json").read_text())["config"]
    ev = EventConfig(**cfg["events"])
    probe = ProbeConfig(**cfg["probe"])
    n_folds = len(next(iter(read_out_of_fold(results / "cv_scores.npz").values())))
    out: dict[str, list[OutOfFold]] = {}
    for f in range(n_folds):
        blocks = cv_blocks(ds, f, 4, ev.stride)
        normal = normal_windows(ds, 100, f if ds.folds else None)
        stats = WindowStatsFeatures(normal)
        scale = Standardizer().fit(pooled_bands(normal))

        def featurize(x: np.ndarray, stats=stats, scale=scale) -> np.ndarray:
            return np.c_[stats(x), scale(pooled_bands(x))]

        added = "band powers"
        if OWN_PAST:  # its features need the windows' entities and ends: out_of_fold
            # passes each block's arrays, so they are looked up by identity
            added, past = "own past", own_past(ds, f)
            samples = {id(s.x): s for b in blocks for s in (b.hop, b.dense)}

            def featurize(
                x: np.ndarray, stats=stats, past=past, samples=samples
            ) -> np.ndarray:
                return np.c_[stats(x), past(samples[id(x)])]

        if ENTITY_SCALE:  # the same lookup (entity_scale.py; split in time only)
            added, own = "per-entity z", entity_scale(ds)
            samples = {id(s.x): s for b in blocks for s in (b.hop, b.dense)}

            def featurize(
                x: np.ndarray, stats=stats, own=own, samples=samples
            ) -> np.ndarray:
                return np.c_[stats(x), own(samples[id(x)])]

        for kind, label in (("trees", " (trees)"), ("mlp", "")):
            o = out_of_fold(blocks, featurize, replace(probe, kind=kind), range(3))
            out.setdefault(f"stats + {added}{label}", []).append(o)
        print(f"{name} fold {f}: {added} candidates fitted", flush=True)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--own-past" in args:
        OWN_PAST = True
        args.remove("--own-past")
    if "--entity-scale" in args:
        ENTITY_SCALE = True
        args.remove("--entity-scale")
    rules.main(args, band_candidates)
