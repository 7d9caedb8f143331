"""What `scjepa calibrate`'s label-free model gives on the labelled benchmarks: an
operator without incident labels (results-notes.md, 2026-11-28, fifteenth session).

    python docs/notebook/screens/label_free.py msl CKPT [smd CKPT ...]   # $SCJEPA_DATA

CKPT may hold {fold} (SKAB, Daphnet: each fold's own pre-training). Per fold, the
label-free probe is calibrated on the normal (train) data of the entities that fold
may fit on (training.data.windows.fit_entities), as `scjepa calibrate` does on a whole
data set, served through the exported graph's torch twin (training/export.py
build_served), and read on the fold's test split, which is what its figures are: the
threshold comes from no label at all, so the test split is the first data it meets.
With --recent the ranks are calibrated instead on the fold's downstream train and
validation windows (a window every stride steps; their labels are not read), the
detectors' reference staying the official train windows as `scjepa evaluate` fits it:
the stream's recent past, incidents and all, as an operator would calibrate on the
last weeks of data. --per-stream (implies --recent; data sets split in time) sets
each entity's thresholds on its own calibration windows' ranks instead of the pooled
ones. --val (implies --recent) calibrates on the downstream train windows alone and
reads the validation split instead of the test split: the split a choice among
detector sets (--detectors, default knn+pca) may be made on. Printed per data set, the test folds pooled: at budgets 1 and 10 per 1,000 windows,
the false alarms per 1,000 test windows (does the calibrated budget hold on data it
was not set on?), warned / late / events; and the window ROC / PR AUC (hop 100).
"""

import sys
from dataclasses import replace

import numpy as np
import torch

from model.rarity import EPS
from training.calibrate import budget_threshold, calibrate
from training.data import Samples, load_dataset
from training.data.windows import downstream_splits, fit_entities
from training.evaluate.events import EventCounts, event_counts
from training.evaluate.metrics import pr_auc, roc_auc
from training.evaluate.protocol import prepare_folds
from training.evaluate.warning import event_config
from training.export import _unmask, build_served
from training.pretrain.checkpoint import load_model

torch.set_num_threads(2)
BUDGETS = (1.0, 10.0)
RECENT = False  # --recent
PER_STREAM = False  # --per-stream (with --recent)
SPLIT, CALIBRATE_ON = "test", ("train", "val")  # --val: ("val", ("train",))
DETECTORS = "knn+pca"  # --detectors


@torch.no_grad()
def risks(served, x: np.ndarray, mask: list[bool], batch: int = 512) -> np.ndarray:
    out = []
    for i in range(0, len(x), batch):
        xb = torch.from_numpy(_unmask(x[i : i + batch], mask))
        out.append(served(xb)[0].numpy())
    return np.concatenate(out)


def run(name: str, ckpt: str) -> None:
    ds = load_dataset(name)
    ev = event_config(ds)
    folds = prepare_folds(ds, ev)
    counts = {b: EventCounts() for b in BUDGETS}
    y, onset, r_hop, cal = [], [], [], []
    for fd in folds:
        model = load_model(ckpt.format(fold=fd.fold))
        fit = set(fit_entities(ds, fd.fold if ds.folds else None))
        sub = replace(ds, entities=[e for i, e in enumerate(ds.entities) if i in fit])
        windows = None
        if RECENT:  # the detectors' reference as evaluate fits it; ranks on the
            # fold's downstream train + validation windows, their labels unread
            dense = downstream_splits(ds, 100, ev.stride, fold=fd.fold)
            windows = (fd.normal, [dense[k].x for k in CALIBRATE_ON])
        probe = calibrate(model, sub, DETECTORS, windows=windows)
        served = build_served(model, probe).eval()
        mask = probe.mask
        dense = risks(served, fd.dense[SPLIT].x, mask)
        points = {p["false_alarms_per_1000"]: p for p in probe.operating_points}
        own: dict[int, np.ndarray] = {}
        if PER_STREAM:  # each entity's thresholds on its own calibration windows
            calib = Samples.concat(
                [downstream_splits(ds, 100, ev.stride, fold=fd.fold)[k] for k in
                 ("train", "val")]
            )  # fmt: skip
            own = {
                i: risks(served, calib.x[calib.entity == i], mask)
                for i in np.unique(calib.entity)
            }
        for b in BUDGETS:
            for st in fd.stretches[SPLIT]:
                thr = (
                    budget_threshold(own[st.entity], b, 1.0 - EPS)
                    if PER_STREAM
                    else points[b]["budget_threshold"]
                )
                counts[b].add(event_counts([st.segment(dense)], thr, ev.lookback))
        hop = fd.splits[SPLIT]
        y.append(hop.y)
        onset.append(hop.cur == 0)
        r_hop.append(risks(served, hop.x, mask))
        cal.append(probe.metrics["label_free"]["calibration_windows"])
        print(f"{name} fold {fd.fold}: calibrated on {cal[-1]} windows", flush=True)
    y, onset, r = np.concatenate(y), np.concatenate(onset), np.concatenate(r_hop)
    cells = []
    for b in BUDGETS:
        c = counts[b]
        cells.append(
            f"{c.false_alarms_per_1000:.2f} | {c.warned} / {c.late} / {c.events}"
        )
    print(
        f"| {name} | {sum(cal)} | {counts[1.0].windows} | "
        + " | ".join(cells)
        + f" | {roc_auc(y, r):.3f} / {pr_auc(y, r):.3f} "
        f"(prevalence {y.mean():.3f}) | {roc_auc(y[onset], r[onset]):.3f} |",
        flush=True,
    )


if __name__ == "__main__":
    print("| data set | calibration windows | windows scored (dense: test, or validation with --val) | FA / 1,000 at "
          "budget 1 | warned / late / events | FA / 1,000 at budget 10 | warned / "
          "late / events | window ROC / PR AUC | onset ROC AUC |")  # fmt: skip
    args = sys.argv[1:]
    if "--recent" in args:
        RECENT = True
        args.remove("--recent")
    if "--per-stream" in args:
        PER_STREAM = RECENT = True
        args.remove("--per-stream")
    if "--val" in args:
        SPLIT, CALIBRATE_ON, RECENT = "val", ("train",), True
        args.remove("--val")
    if "--detectors" in args:
        i = args.index("--detectors")
        DETECTORS = args[i + 1]
        del args[i : i + 2]
    for name, ckpt in zip(args[::2], args[1::2], strict=True):
        run(name, ckpt)
