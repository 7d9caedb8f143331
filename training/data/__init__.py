"""Benchmark loaders and the windowing/splitting rules shared by every stage.

from training.data import load_dataset, pretrain_pairs, downstream_splits
ds = load_dataset("msl", root="~/.cache/scjepa/datasets")
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.data.daphnet import load_daphnet
from training.data.skab import load_skab
from training.data.smd import load_smd
from training.data.synthetic import make_synthetic
from training.data.tabular import load_psm, load_swat, load_table_dataset
from training.data.telemanom import load_telemanom
from training.data.types import Dataset, Entity
from training.data.windows import (
    SERVE,
    WINDOW,
    Pairs,
    Samples,
    cut_windows,
    downstream_splits,
    entity_samples,
    fit_channel_mask,
    fit_entities,
    fold_view,
    n_folds,
    pretrain_pairs,
    serving_view,
    split_bounds,
    split_ranges,
    split_segments,
    window_labels,
)
from training.errors import DataError

# name -> (loader, sub-folder of the data root it usually lives in)
LOADERS: dict[str, tuple[Callable[..., Dataset], str | None]] = {
    "msl": (load_telemanom, "telemanom"),
    "smap": (load_telemanom, "telemanom"),
    "smd": (load_smd, "ServerMachineDataset"),
    "psm": (load_psm, "PSM"),
    "swat": (load_swat, "SWaT"),
    "skab": (load_skab, "SKAB"),
    "daphnet": (load_daphnet, "daphnet"),
    "csv": (load_table_dataset, None),
}
DATASETS = (*LOADERS, "synthetic")


def default_root() -> Path:
    """$SCJEPA_DATA, else ~/.cache/scjepa/datasets (where shared/datasets/unpack.sh puts data)."""
    return Path(os.environ.get("SCJEPA_DATA", "~/.cache/scjepa/datasets")).expanduser()


def load_dataset(name: str, root: str | Path | None = None, **kwargs: Any) -> Dataset:
    """Load a data set by name and fit its train-only channel mask.

    ``root`` is the data folder (defaults to :func:`default_root`); a loader also accepts
    the data set's own sub-folder. ``synthetic`` needs no root; kwargs go to the loader.
    ``NAME@K`` (a data set split by entity, e.g. ``skab@2``) is fold K's pre-training
    view (:func:`fold_view`): only the train parts of fold K's train entities;
    ``NAME@serve`` the same view of the split the served model is fitted on
    (:func:`serving_view`): every entity but fold 0's validation ones.
    """
    name, at, fold = name.lower().partition("@")
    if at:
        ds = load_dataset(name, root, **kwargs)
        if fold == SERVE:
            return fold_view(serving_view(ds), 0)
        if not fold.isdigit():
            raise DataError(f"{name}@{fold}: the fold must be a number or {SERVE!r}")
        return fold_view(ds, int(fold))
    if name == "synthetic":
        ds = make_synthetic(**kwargs)
    elif name in LOADERS:
        loader, sub = LOADERS[name]
        base = Path(root).expanduser() if root is not None else default_root()
        if not base.exists():
            raise DataError(
                f"{base}: data root not found (unpack with shared/datasets/unpack.sh DEST, then pass --root DEST)"
            )
        if sub and (base / sub).is_dir() and name in ("psm", "swat"):
            base = base / sub
        ds = loader(base, name, **kwargs)
    else:
        raise DataError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    ds.source = ds.source or str(root if root is not None else default_root())
    for e in ds.entities:
        # split by entity, a run may have no train part (e.g. a fault from its start)
        no_train = len(e.train) == 0 and not ds.folds
        if no_train or (e.test is not None and len(e.test) == 0):
            raise DataError(f"{ds.name}/{e.name}: empty entity", file=ds.source)
    # (one train row is constant whatever it holds: too short, as the stages say)
    if not fit_channel_mask(ds).any() and sum(len(e.train) for e in ds.entities) > 1:
        raise DataError(
            f"all {len(ds.channels)} channels are constant (variance <= 1e-8) on the "
            "train split: nothing to learn from",
            file=ds.source,
            hint="check that the channel columns hold the readings (an empty column "
            "counts as constant) and that the train part covers the machine running",
        )
    return ds


__all__ = [
    "DATASETS",
    "SERVE",
    "WINDOW",
    "Dataset",
    "Entity",
    "Pairs",
    "Samples",
    "cut_windows",
    "default_root",
    "downstream_splits",
    "entity_samples",
    "fit_channel_mask",
    "fit_entities",
    "fold_view",
    "load_dataset",
    "n_folds",
    "pretrain_pairs",
    "serving_view",
    "split_bounds",
    "split_ranges",
    "split_segments",
    "window_labels",
]
