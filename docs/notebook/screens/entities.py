"""Screen, on train and validation only: does the served model gain from more
entities? (results-notes.md, 2026-11-30, twenty-fifth session; criterion there.)

    python docs/notebook/screens/entities.py skab 'RUNS/skab@{fold}/best.pt' daphnet 'RUNS/daphnet@{fold}/best.pt'
    python docs/notebook/screens/entities.py --serving daphnet 'RUNS/daphnet@{fold}/best.pt' RUNS/daphnet@serve/best.pt
    # from the repository root; $SCJEPA_DATA

On a data set split by entity the served model is fold 0's, fitted on its train
entities (3 of Daphnet's 5 subjects, 20 of SKAB's 34 runs). A model fitted on every
entity would see about a third more. This screen measures the other side of that
step: each fold's model fitted on all of its train entities ("all") against the same
fitted without a quarter to a third of them ("fewer": each of Daphnet's train
subjects left out in turn; a quarter of SKAB's train runs, three random draws). The
left-out entities leave everything the fit reads: the probe's labelled windows, the
label-free reference (kNN, PCA, the statistics' scaling) and the detectors' scaling;
the pre-training checkpoint is the fold's own in both arms. Each arm is scored on the
fold's validation entities (evaluate's stopping and calibration split too; the test
entities are not read): ROC AUC and PR AUC of the hop windows, mean over the MLP's
seeds 0-2 (the trees are deterministic). Two candidates: the one served on the data
set (SKAB: the spec's code probe; Daphnet: the detector-score probe; both MLPs) and
the statistics' trees, which need no checkpoint.
"""

import dataclasses
import sys

import _screen as screen
import numpy as np
import torch

from training.data import downstream_splits, serving_view
from training.evaluate.baselines import FitContext, fit_feature_probe
from training.evaluate.detectors import DetectorScores, ProbeInputs
from training.evaluate.encode import CodeFeatures
from training.evaluate.metrics import pr_auc, roc_auc
from training.evaluate.probe import ProbeConfig
from training.evaluate.protocol import (
    CANDIDATES,
    DET_ONLY_ROW,
    load_encoders,
    normal_windows,
    window_stats,
)

torch.set_num_threads(1)
SERVED = {"skab": "SC-JEPA probe", "daphnet": DET_ONLY_ROW}
DRAWS = 3


def without(ds, fold: int, drop: list[int]):
    """``ds`` with the entities ``drop`` out of fold ``fold``'s train group and their
    train parts emptied (so the label-free reference leaves them too)."""
    folds = [dict(f) for f in ds.folds]
    folds[fold]["train"] = [i for i in folds[fold]["train"] if i not in drop]
    entities = [
        dataclasses.replace(e, train=e.train[:0]) if i in drop else e
        for i, e in enumerate(ds.entities)
    ]
    return dataclasses.replace(ds, entities=entities, folds=folds)


def left_out(ds, fold: int) -> list[list[int]]:
    """The arms' left-out entities: each train subject in turn (Daphnet, grouped by
    subject), or a quarter of the train runs in three random draws (SKAB)."""
    train = ds.folds[fold]["train"]
    groups = sorted({ds.entities[i].group for i in train})
    if ds.name.startswith("daphnet"):
        return [[i for i in train if ds.entities[i].group == g] for g in groups]
    rng = np.random.default_rng(fold)
    return [
        sorted(rng.choice(train, size=len(train) // 4, replace=False).tolist())
        for _ in range(DRAWS)
    ]


def scores(ds, fold: int, codes: CodeFeatures, served: str) -> dict[str, tuple]:
    """candidate -> (ROC AUC, PR AUC) on fold ``fold``'s validation windows, fitted on
    ``ds``'s fold ``fold`` train entities."""
    sp = downstream_splits(ds, fold=fold)
    normal = normal_windows(ds, 100, fold)
    stats = window_stats(normal)
    ctx = FitContext(sp["train"], sp["val"], normal, ProbeConfig())
    dets = DetectorScores(normal, sp["train"].x, codes)
    inputs = {
        served: (ProbeInputs(CANDIDATES[served], codes, stats, dets), "mlp"),
        "raw-feature probe (trees)": (ProbeInputs("stats", None, stats, None), "trees"),
    }
    out = {}
    for name, (featurize, kind) in inputs.items():
        fit = fit_feature_probe(featurize, kind)
        got = []
        for seed in (0, 1, 2) if kind == "mlp" else (0,):
            p = fit(ctx, seed)(sp["val"].x)
            got.append((roc_auc(sp["val"].y, p), pr_auc(sp["val"].y, p)))
        out[name] = tuple(np.mean(got, axis=0))
    return out


def run(name: str, ckpt: str) -> None:
    ds = screen.name_ds(name)
    served = SERVED[name]
    print(f"\n## {name}: validation ROC AUC / PR AUC, all train entities vs fewer")
    print(
        "| fold | candidate | train entities (all / fewer) | all | fewer (mean of arms) | all - fewer (PR AUC) |"
    )
    diffs: dict[str, list[float]] = {}
    for fold in range(len(ds.folds)):
        trained, _, _ = load_encoders(ckpt.format(fold=fold))
        codes = CodeFeatures(trained)
        full = scores(ds, fold, codes, served)
        drops = left_out(ds, fold)
        arms = [scores(without(ds, fold, d), fold, codes, served) for d in drops]
        n_all = len(ds.folds[fold]["train"])
        n_fewer = n_all - np.mean([len(d) for d in drops])
        for cand, (roc, pr) in full.items():
            f_roc = np.mean([a[cand][0] for a in arms])
            f_pr = np.mean([a[cand][1] for a in arms])
            diffs.setdefault(cand, []).append(pr - f_pr)
            print(
                f"| {fold} | {cand} | {n_all} / {n_fewer:.1f} | {roc:.3f} / {pr:.3f} | "
                f"{f_roc:.3f} / {f_pr:.3f} | {pr - f_pr:+.3f} |",
                flush=True,
            )
    for cand, d in diffs.items():
        print(
            f"{name}, {cand}: all - fewer PR AUC, mean {np.mean(d):+.3f}, "
            f"higher in {sum(x > 0 for x in d)} of {len(d)} folds"
        )


def serving(name: str, ckpt: str, serve_ckpt: str) -> None:
    """The step forward, after the build: fold 0's model against the one fitted on
    the serving split (fold 0's test entities added to its train ones, its own
    pre-training), both scored the same way on fold 0's validation entities."""
    ds = screen.name_ds(name)
    served = SERVED[name]
    view = serving_view(ds)
    print(
        f"\n## {name}: fold 0's validation ROC AUC / PR AUC, fold 0's model vs the serving split's"
    )
    for label, d, path in ((f"fold 0 ({len(ds.folds[0]['train'])} train entities)", ds, ckpt.format(fold=0)),
                           (f"serving split ({len(view.folds[0]['train'])})", view, serve_ckpt)):  # fmt: skip
        got = scores(d, 0, CodeFeatures(load_encoders(path)[0]), served)
        print(label, {c: f"{r:.3f} / {p:.3f}" for c, (r, p) in got.items()}, flush=True)


args = sys.argv[1:]
if args and args[0] == "--serving":  # NAME 'RUNS/NAME@{fold}/best.pt' SERVE_CKPT
    serving(*args[1:])
    sys.exit(0)
for name, ckpt in zip(args[::2], args[1::2], strict=True):
    run(name, ckpt)
