"""Daphnet Freezing of Gait in the release layout (UCI data set 245).

    ROOT/daphnet/dataset/S<ss>R<rr>.txt

Space-separated integers, one row per sample at 64 Hz, 11 columns: time (ms), then
3-axis acceleration (mg) of the ankle, the thigh and the trunk (forward, vertical,
lateral each), then the annotation: 0 = not part of the experiment, 1 = experiment
without freeze, 2 = freeze.

Entities: one per contiguous stretch of experiment rows (annotation > 0) of a
recording (``S01R02``; a recording with two stretches gives ``S06R02a`` and ``S06R02b``),
group = its subject; label 1 = freeze. The rows outside the experiment are dropped.
An entity's ``train`` part (what pre-training and label-free detectors may read when
its subject trains) is its stretch without the freeze rows, the pieces joined.
Split by entity (``Dataset.folds``), as the release asks, all runs of a subject
together: leave one subject out. Fold k tests subject k (in subject order), validates
on the next subject that has freezes (cyclically) and trains on the others.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from training.data.types import Dataset, Entity
from training.errors import DataError

CHANNELS = [
    f"{part}_{axis}"
    for part in ("ankle", "thigh", "trunk")
    for axis in ("forward", "vertical", "lateral")
]
HZ = 64


def _base(root: Path) -> Path:
    for cand in (root / "daphnet" / "dataset", root / "dataset", root):
        if any(cand.glob("S*R*.txt")):
            return cand
    raise DataError(
        f"{root}: no Daphnet recordings (expected daphnet/dataset/S01R01.txt)"
    )


def _read(path: Path) -> np.ndarray:
    try:
        a = np.loadtxt(path, dtype=np.int64, ndmin=2)
    except ValueError as e:
        raise DataError(f"{path}: cannot parse as integer columns ({e})") from None
    if a.shape[1] != 11:
        raise DataError(f"{path}: {a.shape[1]} columns, expected 11")
    bad = ~np.isin(a[:, 10], (0, 1, 2))
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"{path}: annotation must be 0, 1 or 2, found {a[i, 10]} at row {i + 1}"
        )
    return a


def load_daphnet(root: Path, name: str = "daphnet") -> Dataset:
    base = _base(root)
    files = sorted(base.glob("S*R*.txt"))
    entities: list[Entity] = []
    for path in files:
        m = re.fullmatch(r"S(\d+)R(\d+)", path.stem)
        if m is None:
            continue
        a = _read(path)
        exp = (a[:, 10] > 0).astype(np.int8)
        edges = np.diff(np.r_[0, exp, 0])
        starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        for j, (lo, hi) in enumerate(zip(starts, stops, strict=True)):
            x = a[lo:hi, 1:10].astype(np.float32)
            labels = (a[lo:hi, 10] == 2).astype(np.int8)
            suffix = "abcdefghij"[j] if len(starts) > 1 else ""
            entities.append(
                Entity(
                    f"{path.stem}{suffix}",
                    train=x[labels == 0],
                    test=x,
                    labels=labels,
                    group=f"S{m.group(1)}",
                )
            )
    if not entities:
        raise DataError(f"{base}: no experiment rows in any S*R*.txt")
    subjects = sorted({e.group for e in entities})
    of = {s: [i for i, e in enumerate(entities) if e.group == s] for s in subjects}
    freezing = [s for s in subjects if any(np.any(entities[i].labels) for i in of[s])]
    folds = []
    for k, s in enumerate(subjects):
        later = subjects[k + 1 :] + subjects[:k]
        val = next((v for v in later if v in freezing), None)
        if val is None:
            raise DataError(
                f"{base}: fold {s} has no other subject with freezes to validate on"
            )
        folds.append(
            {
                "train": [i for t in subjects if t not in (s, val) for i in of[t]],
                "val": list(of[val]),
                "test": list(of[s]),
            }
        )
    return Dataset(
        name,
        list(CHANNELS),
        entities,
        folds=folds,
        steps_per_day=HZ * 86_400.0,
        notes=[
            f"{HZ} Hz; rows outside the experiment dropped; train parts: the rows "
            "outside freezes, joined"
        ],
    )
