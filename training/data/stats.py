"""Per-dataset and per-entity statistics of the anomaly-prediction task.

Figures (all on next-window targets, windows of 100 cut per entity):
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
    downstream_splits,
    entity_samples,
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
        row["split"] = {k: hi - lo for k, (lo, hi) in split_bounds(len(s)).items()}
    return row


def dataset_stats(
    ds: Dataset, window: int = WINDOW, val_frac: float = 0.1
) -> dict[str, Any]:
    """Everything ``scjepa data stats`` prints, as one JSON-able dict."""
    rows = [entity_stats(ds, i, window) for i in range(len(ds.entities))]
    n_kept = ds.n_channels
    # Pairs per entity: (n-1) per part of the 9:1 chronological cut, times kept channels.
    pairs_train = pairs_val = 0
    for r in rows:
        n = r["train_windows"]
        n_val = round(n * val_frac)
        pairs_train += max(n - n_val - 1, 0) * n_kept
        pairs_val += max(n_val - 1, 0) * n_kept
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
        "pretrain_pairs": {"train": pairs_train, "val": pairs_val},
        "notes": ds.notes,
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
        splits = downstream_splits(ds, window)
        out["splits"] = {k: _rates(v.y, v.cur) for k, v in splits.items()}
    out["per_entity"] = rows
    return out
