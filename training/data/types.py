"""The data model every loader returns: named entities with train/test series and labels."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Entity:
    """One independent series (an SMD machine, an MSL channel file, one user asset).

    Windows never straddle two entities. ``train`` is the official (normal) train split;
    ``test``/``labels`` the official test split with one 0/1 label per step.

    Data sets split by entity (SKAB runs, Daphnet subjects: :attr:`Dataset.folds`) have
    no official train split: there ``train`` is the label-free part of the entity that
    pre-training and label-free detectors may use when the entity is in a fold's train
    group (SKAB: the steps before the fault; Daphnet: the steps outside freezes), and
    ``test``/``labels`` are the whole labelled series.
    """

    name: str
    train: np.ndarray  # (T_train, V) float32
    test: np.ndarray | None = None  # (T_test, V) float32
    labels: np.ndarray | None = None  # (T_test,) int8, 1 = anomalous step
    imputed: int = 0  # NaN cells forward-filled by the loader (see nan policy)
    group: str = ""  # what a split keeps together or stratifies on (subject, fault)
    # per-step series beside the labels, e.g. SKAB's "changepoint" column and each
    # step's time in seconds (its leaderboard metrics read them); (T_test,) each
    aux: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.train.ndim == 2, f"{self.name}: train must be (T, V)"
        if self.test is not None:
            assert self.test.ndim == 2 and self.test.shape[1] == self.train.shape[1], (
                f"{self.name}: test must be (T, V) with V={self.train.shape[1]}"
            )
            assert self.labels is not None and len(self.labels) == len(self.test)


@dataclass
class Dataset:
    """A benchmark (or a user's data set): entities sharing one channel list.

    ``mask`` marks the channels kept for modelling (train-only zero-variance mask);
    loaders leave it all-True and :func:`training.data.windows.fit_channel_mask` sets it.
    """

    name: str
    channels: list[str]
    entities: list[Entity]
    mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    notes: list[str] = field(default_factory=list)  # quirks handled while loading
    # Split by entity instead of per entity in time: one dict per fold, split name ->
    # entity indices ("train", "val", "test"); every labelled entity is in exactly one
    # fold's test split. Empty: the per-entity chronological 6:2:2 split (one fold).
    folds: list[dict[str, list[int]]] = field(default_factory=list)
    fold: int | None = None  # set on a fold's pre-training view (windows.fold_view)
    steps_per_day: float | None = None  # sampling rate, where the source states it
    source: str = ""  # the file or folder it was read from, for messages

    def __post_init__(self) -> None:
        if self.mask.size == 0:
            self.mask = np.ones(len(self.channels), dtype=bool)
        for e in self.entities:
            assert e.train.shape[1] == len(self.channels), (
                f"{self.name}/{e.name}: {e.train.shape[1]} columns, "
                f"{len(self.channels)} channel names"
            )

    @property
    def n_channels(self) -> int:
        return int(self.mask.sum())

    def fingerprint(self) -> str:
        """sha256 over names, channels, mask and every array: what a model was fit on."""
        h = hashlib.sha256(f"{self.name}|{','.join(self.channels)}".encode())
        h.update(self.mask.tobytes())
        for e in self.entities:
            h.update(e.name.encode())
            for a in (e.train, e.test, e.labels):
                if a is not None:
                    h.update(str(a.shape).encode())
                    h.update(a.tobytes())
        return h.hexdigest()
