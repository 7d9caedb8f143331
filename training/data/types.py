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
    """

    name: str
    train: np.ndarray  # (T_train, V) float32
    test: np.ndarray | None = None  # (T_test, V) float32
    labels: np.ndarray | None = None  # (T_test,) int8, 1 = anomalous step
    imputed: int = 0  # NaN cells forward-filled by the loader (see nan policy)

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

    def __post_init__(self) -> None:
        if self.mask.size == 0:
            self.mask = np.ones(len(self.channels), dtype=bool)
        for e in self.entities:
            assert e.train.shape[1] == len(self.channels), (
                f"{self.name}/{e.name}: {e.train.shape[1]} columns, "
                f"{len(self.channels)} channel names"
            )

    @property
    def kept_channels(self) -> list[str]:
        return [c for c, keep in zip(self.channels, self.mask, strict=True) if keep]

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
