"""From series to model inputs: channel mask, windows, next-window labels, splits.

Every rule here comes from method.md / evaluation.md and is shared by training,
evaluation, export and serving:

- channel mask: channels whose variance over the official TRAIN split (all entities
  concatenated) is <= 1e-8 are dropped; the same mask applies to test data and serving;
- windows: non-overlapping, ``window`` steps, cut per entity (never across entities),
  a trailing remainder shorter than a window is dropped;
- targets: sample t is (W_t, y_{t+1}), y = 1 if the window holds any anomalous step;
  ``cur`` = y_t tells onsets (cur = 0) from continuations (cur = 1);
- pre-training pairs (W_t, W_{t+1}) from each entity's train windows, the last
  ``val_frac`` of them (chronological) for validation, no pair crossing the cut;
- downstream split: per entity, samples 6:2:2 in time order, and at each cut the last
  sample of the earlier split is dropped, because its target window is the first input
  window of the next split. Samples kept: train [0, a-1), val [a, b-1), test [b, n) with
  a = floor(0.6 n), b = floor(0.8 n). No window appears in two splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from training.data.types import Dataset

# Steps per window: the one definition for training/ (data, pre-training, evaluation,
# export, demo). The model's own default, model.config.ModelConfig.seq_len, matches it;
# an exported artifact records its model's seq_len as the served window.
WINDOW = 100
ZERO_VARIANCE = 1e-8
SPLITS = ("train", "val", "test")


def fit_channel_mask(ds: Dataset, threshold: float = ZERO_VARIANCE) -> np.ndarray:
    """Train-only zero-variance mask (True = keep); stored on ``ds.mask`` and returned."""
    # (sum T, V): every entity's train series, concatenated
    train = np.concatenate([e.train for e in ds.entities]).astype(np.float64)
    ds.mask = train.var(axis=0) > threshold
    return ds.mask


def cut_windows(x: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """(T, V) -> (T // window, window, V), non-overlapping, remainder dropped."""
    n = len(x) // window
    return x[: n * window].reshape(n, window, x.shape[1])  # (n, window, V)


def window_labels(labels: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """(T,) per-step labels -> (T // window,) 1 where the window holds an anomaly."""
    n = len(labels) // window
    return labels[: n * window].reshape(n, window).max(axis=1).astype(np.int8)


def split_bounds(
    n: int, fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
) -> dict[str, tuple[int, int]]:
    """Sample index ranges [start, stop) of each split, with the one-window gap at each cut."""
    a = int(n * fractions[0])
    b = int(n * (fractions[0] + fractions[1]))
    return {"train": (0, max(a - 1, 0)), "val": (a, max(b - 1, a)), "test": (b, n)}


@dataclass
class Samples:
    """Anomaly-prediction samples: W_t with the label of W_{t+1}."""

    x: np.ndarray  # (N, window, V_kept) float32, current window W_t
    y: np.ndarray  # (N,) int8, next-window label y_{t+1}
    cur: np.ndarray  # (N,) int8, current-window label y_t
    entity: np.ndarray  # (N,) int32, index into Dataset.entities
    t: np.ndarray  # (N,) int32, window index within its entity

    def __len__(self) -> int:
        return len(self.y)

    @property
    def onset(self) -> np.ndarray:
        return self.cur == 0

    @staticmethod
    def concat(parts: Sequence[Samples]) -> Samples:
        return Samples(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("x", "y", "cur", "entity", "t")
            )
        )


def entity_samples(ds: Dataset, i: int, window: int = WINDOW) -> Samples:
    """All prediction samples of entity ``i``'s test series, in time order."""
    e = ds.entities[i]
    assert e.test is not None and e.labels is not None, f"{e.name}: no test split"
    w = cut_windows(e.test[:, ds.mask], window)  # (n, window, V)
    lab = window_labels(e.labels, window)  # (n,)
    n = max(len(w) - 1, 0)
    return Samples(
        x=w[:n],
        y=lab[1:],
        cur=lab[:n],
        entity=np.full(n, i, dtype=np.int32),
        t=np.arange(n, dtype=np.int32),
    )


def downstream_splits(ds: Dataset, window: int = WINDOW) -> dict[str, Samples]:
    """Per-entity chronological 6:2:2 split of the official test windows, pooled."""
    parts: dict[str, list[Samples]] = {s: [] for s in SPLITS}
    for i, e in enumerate(ds.entities):
        if e.test is None:
            continue
        s = entity_samples(ds, i, window)
        for name, (lo, hi) in split_bounds(len(s)).items():
            parts[name].append(
                Samples(
                    s.x[lo:hi], s.y[lo:hi], s.cur[lo:hi], s.entity[lo:hi], s.t[lo:hi]
                )
            )
    return {name: Samples.concat(p) for name, p in parts.items()}


@dataclass
class Pairs:
    """Channel-independent pre-training pairs (W_t, W_{t+1}) of one channel each."""

    train: np.ndarray  # (N, 2, window) float32
    val: np.ndarray  # (M, 2, window) float32


def _pairs(w: np.ndarray) -> np.ndarray:
    """(n, window, V) consecutive windows -> ((n-1) * V, 2, window) one-channel pairs."""
    if len(w) < 2:
        return np.zeros((0, 2, w.shape[1]), dtype=np.float32)
    p = np.stack([w[:-1], w[1:]], axis=1)  # (n-1, 2, window, V)
    # -> ((n-1)*V, 2, window)
    return np.ascontiguousarray(p.transpose(0, 3, 1, 2)).reshape(-1, 2, w.shape[1])


def pretrain_pairs(
    datasets: Dataset | Sequence[Dataset], window: int = WINDOW, val_frac: float = 0.1
) -> Pairs:
    """Pairs from every entity's train series; several data sets pool (cross-domain)."""
    if isinstance(datasets, Dataset):
        datasets = [datasets]
    train, val = [], []
    for ds in datasets:
        for e in ds.entities:
            # (n, window, V)
            w = cut_windows(e.train[:, ds.mask], window).astype(np.float32)
            n_val = round(len(w) * val_frac)
            train.append(_pairs(w[: len(w) - n_val]))
            val.append(_pairs(w[len(w) - n_val :]))
    return Pairs(np.concatenate(train), np.concatenate(val))
