"""Per-dataset and per-entity statistics of the anomaly-prediction task.

Figures (all on next-window targets, windows of 100 cut per entity; a data set split
by entity reports its test split pooled over folds, then each fold's splits):
prevalence = P(y_{t+1} = 1); onset rate = P(y_{t+1} = 1 | y_t = 0); split sizes of the
downstream 6:2:2 split and of the pre-training pairs. ``concatenated`` repeats the
figures with windows cut over the entities' test series joined end to end, the way
evaluation.md quotes them (such windows may straddle entities, so they are reported,
never used).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from training.data.types import Dataset
from training.data.windows import (
    WINDOW,
    Samples,
    downstream_splits,
    entity_samples,
    fit_entities,
    split_bounds,
    window_labels,
)


def _rates(y: np.ndarray, cur: np.ndarray) -> dict[str, Any]:
    normal = cur == 0
    onsets = int((normal & (y == 1)).sum())
    return {
        "windows": len(y),
        "positives": int(y.sum()),
        "prevalence": float(y.mean()) if len(y) else 0.0,
        "onsets": onsets,
        "onset_rate": onsets / int(normal.sum()) if normal.any() else 0.0,
    }


def entity_stats(ds: Dataset, i: int, window: int = WINDOW) -> dict[str, Any]:
    e = ds.entities[i]
    n_train_windows = len(e.train) // window
    row: dict[str, Any] = {
        "entity": e.name,
        "train_steps": len(e.train),
        "test_steps": 0 if e.test is None else len(e.test),
        "train_windows": n_train_windows,
        "imputed_cells": e.imputed,
    }
    if e.test is not None:
        s = entity_samples(ds, i, window)
        row |= _rates(s.y, s.cur)
        row["anomalous_steps"] = float(e.labels.mean()) if e.labels is not None else 0.0
        if ds.folds:  # split by entity: the fold that tests it
            row["test_fold"] = next(k for k, f in enumerate(ds.folds) if i in f["test"])
        else:
            row["split"] = {k: hi - lo for k, (lo, hi) in split_bounds(len(s)).items()}
    return row


def dataset_stats(
    ds: Dataset, window: int = WINDOW, val_frac: float = 0.1
) -> dict[str, Any]:
    """Everything ``scjepa data stats`` prints, as one JSON-able dict."""
    rows = [entity_stats(ds, i, window) for i in range(len(ds.entities))]
    n_kept = ds.n_channels

    # Pairs per entity: (n-1) per part of the 9:1 chronological cut, times kept channels.
    def pairs(entities: list[int]) -> dict[str, int]:
        train = val = 0
        for i in entities:
            n = rows[i]["train_windows"]
            n_val = round(n * val_frac)
            train += max(n - n_val - 1, 0) * n_kept
            val += max(n_val - 1, 0) * n_kept
        return {"train": train, "val": val}

    pretrain: dict[str, Any]
    if ds.folds:  # each fold pre-trains on its own train entities (--dataset NAME@K)
        per_fold = [pairs(fit_entities(ds, k)) for k in range(len(ds.folds))]
        pretrain = {"per_fold": per_fold}
    else:
        pretrain = pairs(list(range(len(rows))))
    out: dict[str, Any] = {
        "dataset": ds.name,
        "entities": len(ds.entities),
        "channels": len(ds.channels),
        "channels_kept": n_kept,
        "channels_dropped": [
            c for c, k in zip(ds.channels, ds.mask, strict=True) if not k
        ],
        "train_steps": sum(r["train_steps"] for r in rows),
        "test_steps": sum(r["test_steps"] for r in rows),
        "imputed_cells": sum(r["imputed_cells"] for r in rows),
        "pretrain_pairs": pretrain,
        "notes": ds.notes,
        "folds": len(ds.folds),
        "steps_per_day": ds.steps_per_day,
    }
    labelled = [e.labels for e in ds.entities if e.labels is not None]
    if labelled:
        # Windows cut per entity (what the project uses), pooled over entities.
        per_entity = [window_labels(lab, window) for lab in labelled]
        out["windows_per_entity"] = _rates(
            np.concatenate([w[1:] for w in per_entity]),
            np.concatenate([w[:-1] for w in per_entity]),
        )
        joined = np.concatenate(labelled)
        w = window_labels(joined, window)
        out["concatenated"] = _rates(w[1:], w[:-1]) | {
            "anomalous_steps": float(joined.mean())
        }
        if ds.folds:  # every labelled entity is tested once: "test" pools the folds
            folds = [
                downstream_splits(ds, window, fold=k, need_classes=False)
                for k in range(len(ds.folds))
            ]
            test = Samples.concat([f["test"] for f in folds])
            out["splits"] = {"test": _rates(test.y, test.cur)}
            for k, f in enumerate(folds):
                out["splits"] |= {
                    f"fold {k} {n}": _rates(v.y, v.cur) for n, v in f.items()
                }
        else:
            splits = downstream_splits(ds, window, need_classes=False)
            out["splits"] = {k: _rates(v.y, v.cur) for k, v in splits.items()}
    out["per_entity"] = rows
    return out
