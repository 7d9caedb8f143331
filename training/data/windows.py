"""From series to model inputs: channel mask, windows, next-window labels, splits.

Every rule here comes from method.md / evaluation.md and is shared by training,
evaluation, export and serving:

- channel mask: channels whose variance over the official TRAIN split (all entities
  concatenated) is <= 1e-8 are dropped; the same mask applies to test data and serving;
- windows: ``window`` steps, cut per entity (never across entities); a sample is known
  by its window's ``end`` (one past its last step) on the grid
  ``end = window + k * stride``, k = 0, 1, ...; ``stride = window`` (the default) gives
  the protocol's non-overlapping windows, a smaller stride the dense windows the
  service scores (evaluation.md item 10);
- targets: the sample ending at ``end`` is (W, y) with W = steps [end - window, end) and
  y = 1 if any step of [end, end + window) is anomalous; ``cur`` (the same for W itself)
  tells onsets (cur = 0) from continuations (cur = 1);
- pre-training pairs (W_t, W_{t+1}) from each entity's train windows, the last
  ``val_frac`` of them (chronological) for validation, no pair crossing the cut;
- downstream split, per entity in time (MSL, SMD, ...): each entity's test series is cut
  into three step ranges, train [0, a W), val [a W, b W), test [b W, T), with
  n = T // W - 1, a = floor(0.6 n), b = floor(0.8 n); a sample belongs to a split when
  its window AND its target lie inside that split's range, so no window or target is
  in two splits and the samples straddling a cut are dropped. At stride = window these
  are exactly the samples train [0, a-1), val [a, b-1), test [b, n) of item 2 (the one
  sample dropped before each cut is the one whose target is the next split's first
  window); at a denser stride the same ranges drop every sample that crosses a cut;
- downstream split by entity (SKAB runs, Daphnet subjects: ``Dataset.folds``): a fold
  puts whole entities into train / val / test; every labelled entity is tested in
  exactly one fold, and pre-training for fold k (``fold_view``, ``--dataset NAME@k``)
  reads only the train parts of the entities in fold k's train group; the model
  served for such a data set may be fitted on every entity but fold 0's validation
  ones instead (``serving_view``, ``--dataset NAME@serve``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from training.data.types import Dataset
from training.errors import DataError

# Steps per window: the one definition for training/ (data, pre-training, evaluation,
# export, demo). The model's own default, model.config.ModelConfig.seq_len, matches it;
# an exported artifact records its model's seq_len as the served window.
WINDOW = 100
ZERO_VARIANCE = 1e-8
SPLITS = ("train", "val", "test")


def check_window(window: int) -> None:
    if window < 1:
        raise DataError(
            f"window {window}: must be at least 1 step",
            hint=f"the model's windows are {WINDOW} steps",
        )


def min_pretrain_steps(window: int = WINDOW, val_frac: float = 0.1) -> int:
    """The shortest train series that gives pre-training a pair to train on and one
    to validate on: n windows with at least 2 in each part of the 9:1 cut."""
    check_window(window)
    check_val_frac(val_frac)
    # round(n * f) >= 2 needs n * f >= 1.5 and n - round(n * f) >= 2 needs about
    # n * (1 - f) >= 1.5: start just below both bounds, a few steps from the answer
    start = max(4, int(min(1.5 / val_frac, 1e15)) - 2, int(1.5 / (1 - val_frac)) - 2)
    for n in range(start, start + 100):
        if round(n * val_frac) >= 2 and n - round(n * val_frac) >= 2:
            return n * window
    raise DataError(f"val_frac {val_frac}: too small to validate on 2 windows")


def check_val_frac(val_frac: float) -> None:
    """Pre-training validates on the last ``val_frac`` of each series' windows: a share
    strictly between 0 and 1 (0 leaves nothing to validate on, 1 nothing to train on)."""
    if not 0 < val_frac < 1:  # NaN fails too
        raise DataError(
            f"val_frac {val_frac}: must lie strictly between 0 and 1",
            hint="the last 10 % of each series' windows (0.1) is the default",
        )


def min_split_steps(window: int = WINDOW) -> int:
    """The shortest labelled test series whose 6:2:2 split has a sample in each part."""
    check_window(window)
    n = 1
    while any(lo >= hi for lo, hi in split_bounds(n).values()):
        n += 1
    return (n + 1) * window


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


def dense_windows(x: np.ndarray, window: int, stride: int) -> np.ndarray:
    """(T, V) -> (n, window, V): a window every ``stride`` steps from the first step
    (a view, not a copy)."""
    if len(x) < window:
        return np.zeros((0, window, x.shape[1]), dtype=x.dtype)
    return sliding_window_view(x, window, axis=0)[::stride].transpose(0, 2, 1)


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


def split_ranges(
    n_steps: int,
    window: int = WINDOW,
    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
) -> dict[str, tuple[int, int]]:
    """Step ranges [lo, hi) of the per-entity chronological split of a series of
    ``n_steps``: the cuts fall where :func:`split_bounds` puts them at hop ``window``."""
    n = max(n_steps // window - 1, 0)
    b = split_bounds(n, fractions)
    a_cut, b_cut = b["val"][0] * window, b["test"][0] * window
    return {"train": (0, a_cut), "val": (a_cut, b_cut), "test": (b_cut, n_steps)}


@dataclass
class Samples:
    """Anomaly-prediction samples: W_t with the label of W_{t+1}."""

    x: np.ndarray  # (N, window, V_kept) float32, current window W_t
    y: np.ndarray  # (N,) int8, next-window label y_{t+1}
    cur: np.ndarray  # (N,) int8, current-window label y_t
    entity: np.ndarray  # (N,) int32, index into Dataset.entities
    t: np.ndarray  # (N,) int32, the window's index k on its entity's grid
    # (N,) int64, one past the window's last step, in its entity's test series
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    @property
    def onset(self) -> np.ndarray:
        return self.cur == 0

    def take(self, idx: np.ndarray) -> Samples:
        """The samples at ``idx`` (indices or a boolean mask)."""
        return Samples(*(getattr(self, f.name)[idx] for f in dataclasses.fields(self)))

    @staticmethod
    def concat(parts: Sequence[Samples]) -> Samples:
        return Samples(
            *(
                np.concatenate([getattr(p, f.name) for p in parts])
                for f in dataclasses.fields(Samples)
            )
        )


def entity_samples(
    ds: Dataset,
    i: int,
    window: int = WINDOW,
    stride: int | None = None,
    lo: int = 0,
    hi: int | None = None,
) -> Samples:
    """Prediction samples of entity ``i``'s test series, in time order: every window on
    the grid ``end = window + k * stride`` whose window and target lie in [lo, hi)."""
    e = ds.entities[i]
    assert e.test is not None and e.labels is not None, f"{e.name}: no test split"
    stride = stride or window
    n_steps = len(e.test)
    hi = n_steps if hi is None else min(hi, n_steps)
    ends = np.arange(window, n_steps - window + 1, stride, dtype=np.int64)
    ends = ends[(ends - window >= lo) & (ends + window <= hi)]
    x = e.test[:, ds.mask]
    k = (ends - window) // stride  # window index on the grid
    if len(ends) and stride == window:
        # a view of cut_windows' windows, exactly as the protocol always cut them (the
        # same memory layout, so float32 reductions and every figure reproduce)
        xs = cut_windows(x, window)[k[0] : k[-1] + 1]
    elif len(ends):
        view = sliding_window_view(x, window, axis=0)  # (T - window + 1, V, window)
        xs = np.ascontiguousarray(view[ends - window].transpose(0, 2, 1))  # (n, W, V)
    else:
        xs = np.zeros((0, window, x.shape[1]), dtype=x.dtype)
    c = np.r_[0, np.cumsum(e.labels, dtype=np.int64)]  # anomalous steps before t
    return Samples(
        x=xs,
        y=(c[ends + window] - c[ends] > 0).astype(np.int8),
        cur=(c[ends] - c[ends - window] > 0).astype(np.int8),
        entity=np.full(len(ends), i, dtype=np.int32),
        t=k.astype(np.int32),
        end=ends,
    )


def n_folds(ds: Dataset) -> int:
    """Folds of the downstream split: 1 for the per-entity chronological split."""
    return max(len(ds.folds), 1)


def split_segments(
    ds: Dataset, window: int = WINDOW, fold: int = 0
) -> dict[str, list[tuple[int, int, int]]]:
    """(entity, lo, hi) step ranges of each split of ``fold``: the stretches of test
    series a split scores (event metrics count events inside them)."""
    out: dict[str, list[tuple[int, int, int]]] = {s: [] for s in SPLITS}
    if ds.folds:
        if not 0 <= fold < len(ds.folds):
            raise DataError(f"{ds.name}: fold {fold} of {len(ds.folds)}")
        for name in SPLITS:
            for i in sorted(ds.folds[fold][name]):
                e = ds.entities[i]
                assert e.test is not None, f"{e.name}: a split entity without labels"
                out[name].append((i, 0, len(e.test)))
        return out
    if fold != 0:
        raise DataError(f"{ds.name}: split per entity in time, it has one fold only")
    check_window(window)
    labelled = [e for e in ds.entities if e.test is not None]
    if not labelled:
        raise DataError(
            f"no labelled test data to evaluate on ({ds.name})",
            file=ds.source or None,
            hint="give the test rows a 0/1 'label' column (--label-col names another): "
            "in test.csv beside train.csv, or in the single file's rows",
        )
    need = min_split_steps(window)
    if all(len(e.test) < need for e in labelled if e.test is not None):
        longest = max(len(e.test) for e in labelled if e.test is not None)
        raise DataError(
            f"the longest labelled test series has {longest} rows, too "
            f"short for the 6:2:2 split of {window}-step windows",
            file=ds.source or None,
            hint=f"at least {need} labelled test rows per series (a single file is cut "
            "by --train-frac: the test part is the rest)",
        )
    for i, e in enumerate(ds.entities):
        if e.test is None:
            continue
        for name, (lo, hi) in split_ranges(len(e.test), window).items():
            out[name].append((i, lo, hi))
    return out


def downstream_splits(
    ds: Dataset,
    window: int = WINDOW,
    stride: int | None = None,
    fold: int = 0,
    need_classes: bool = True,
) -> dict[str, Samples]:
    """The downstream train / val / test samples of ``fold``, pooled over entities:
    per entity 6:2:2 in time, or whole entities for data sets split by entity.
    ``need_classes``: refuse a train split without both classes (the probes fit on
    it), naming the source; statistics pass False."""
    segs = split_segments(ds, window, fold)
    empty = Samples(
        np.zeros((0, window, ds.n_channels), np.float32),
        *(np.zeros(0, dt) for dt in (np.int8, np.int8, np.int32, np.int32, np.int64)),
    )
    out = {
        name: Samples.concat(
            [entity_samples(ds, i, window, stride, lo, hi) for i, lo, hi in parts]
            or [empty]
        )
        for name, parts in segs.items()
    }
    y = out["train"].y
    if need_classes and (y.all() or not y.any()):
        which = "normal" if y.all() else "anomalous"
        raise DataError(
            f"the downstream train split has no {which} next window ({int(y.sum())} "
            f"of {len(y)} positive; {ds.name}"
            + (f", fold {fold}" if ds.folds else "")
            + "): the probes need both classes",
            file=ds.source or None,
            hint="the split is 6:2:2 in time per series: anomalies (label 1) must "
            "occur in the first 60 % of the labelled rows too"
            if not ds.folds
            else "each fold's train entities must hold both classes",
        )
    return out


def fit_entities(ds: Dataset, fold: int | None = None) -> list[int]:
    """Entities whose ``train`` part fold ``fold`` may fit on (pre-training, label-free
    detectors, scalers): all of them for the chronological split; for a split by
    entity, those in the fold's train group and those never validated or tested (SKAB's
    anomaly-free run). ``fold=None`` on a split by entity: only the latter."""
    if not ds.folds:
        return list(range(len(ds.entities)))
    held = {i for f in ds.folds for s in ("val", "test") for i in f[s]}
    if fold is not None:
        held = set(ds.folds[fold]["val"]) | set(ds.folds[fold]["test"])
    return [i for i in range(len(ds.entities)) if i not in held]


def fold_view(ds: Dataset, fold: int) -> Dataset:
    """What fold ``fold``'s pre-training may read: the same data set with every entity
    outside :func:`fit_entities` holding an empty train part."""
    if not ds.folds:
        raise DataError(f"{ds.name}: split in time per entity, it has no folds")
    if not 0 <= fold < len(ds.folds):
        raise DataError(
            f"{ds.name}@{fold}: no such fold (folds 0..{len(ds.folds) - 1})"
        )
    keep = set(fit_entities(ds, fold))
    entities = [
        e if i in keep else dataclasses.replace(e, train=e.train[:0])
        for i, e in enumerate(ds.entities)
    ]
    return dataclasses.replace(ds, entities=entities, mask=ds.mask.copy(), fold=fold)


SERVE = "serve"  # ``--dataset NAME@serve``: the serving split's pre-training view


def serving_view(ds: Dataset) -> Dataset:
    """The split that the model served for a data set split by entity is fitted on:
    fold 0 with its test entities moved into train, as the only fold, with no test
    split. Pre-training (``--dataset NAME@serve``), the probe and the label-free
    reference read every entity but fold 0's validation ones, which stop, calibrate
    and threshold it as they do fold 0's model; its test figures are the folds'."""
    if not ds.folds:
        raise DataError(f"{ds.name}: split in time per entity, it has no folds")
    f = ds.folds[0]
    split = {"train": sorted(f["train"] + f["test"]), "val": list(f["val"]), "test": []}
    return dataclasses.replace(ds, folds=[split], mask=ds.mask.copy())


@dataclass
class Pairs:
    """Channel-independent pre-training pairs (W_t, W_{t+1}) of one channel each."""

    train: np.ndarray  # (N, 2, window) float32
    val: np.ndarray  # (M, 2, window) float32
    # data set name -> the entities whose train series they come from (a checkpoint
    # records it: evaluate refuses one pre-trained on a fold's held-out entities)
    corpus: dict[str, list[str]] = field(default_factory=dict)


def _pairs(w: np.ndarray) -> np.ndarray:
    """(n, window, V) consecutive windows -> ((n-1) * V, 2, window) one-channel pairs."""
    if len(w) < 2:
        return np.zeros((0, 2, w.shape[1]), dtype=np.float32)
    p = np.stack([w[:-1], w[1:]], axis=1)  # (n-1, 2, window, V)
    # -> ((n-1)*V, 2, window)
    return np.ascontiguousarray(p.transpose(0, 3, 1, 2)).reshape(-1, 2, w.shape[1])


def pretrain_pairs(
    datasets: Dataset | Sequence[Dataset],
    window: int = WINDOW,
    val_frac: float = 0.1,
    min_train: int = 1,
) -> Pairs:
    """Pairs from every entity's train series; several data sets pool (cross-domain).
    Refuses, naming the source and the rows needed, fewer than ``min_train`` train
    pairs (pre-training passes its batch size) or no validation pair; 0 checks nothing."""
    if isinstance(datasets, Dataset):
        datasets = [datasets]
    check_window(window)
    check_val_frac(val_frac)
    train, val = [], []
    corpus: dict[str, list[str]] = {}
    for ds in datasets:
        if ds.folds and ds.fold is None:
            raise DataError(
                f"{ds.name}: split by entity into {len(ds.folds)} folds; pre-train for "
                f"one fold on its train entities only: --dataset {ds.name}@K, "
                f"K = 0..{len(ds.folds) - 1}, or for the served model on every entity "
                f"but fold 0's validation ones: --dataset {ds.name}@{SERVE}"
            )
        for e in ds.entities:
            # (n, window, V)
            w = cut_windows(e.train[:, ds.mask], window).astype(np.float32)
            n_val = round(len(w) * val_frac)
            train.append(_pairs(w[: len(w) - n_val]))
            val.append(_pairs(w[len(w) - n_val :]))
            seen = corpus.setdefault(ds.name, [])
            if len(e.train) and e.name not in seen:
                seen.append(e.name)
    pairs = Pairs(np.concatenate(train), np.concatenate(val), corpus)
    if min_train and (len(pairs.train) < min_train or len(pairs.val) == 0):
        longest = max(len(e.train) for ds in datasets for e in ds.entities)
        names = ", ".join(ds.name for ds in datasets)
        raise DataError(
            f"{len(pairs.train)} train and {len(pairs.val)} validation pre-training "
            f"pairs from {names} (at least {min_train} and 1 needed); the longest "
            f"train series has {longest} rows",
            file=", ".join(ds.source for ds in datasets if ds.source) or None,
            hint=f"a series needs at least {min_pretrain_steps(window, val_frac)} train "
            f"rows for windows of {window} (pairs of consecutive windows, the last "
            f"{val_frac:.0%} for validation)"
            + (f", and {min_train} pairs fill one batch" if min_train > 1 else ""),
        )
    return pairs
