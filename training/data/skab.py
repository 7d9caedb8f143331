"""SKAB (Skoltech Anomaly Benchmark) in its repository's layout (waico/SKAB, data/).

    ROOT/SKAB/data/{valve1,valve2,other}/<n>.csv      34 labelled runs
    ROOT/SKAB/data/anomaly-free/anomaly-free.csv      one run without faults

``;``-separated with a header: ``datetime``, 8 sensor channels, ``anomaly`` (1 while the
induced fault is active) and ``changepoint`` (1 where a regime change starts or ends);
the anomaly-free run has only ``datetime`` and the channels. Rows are about 1 s apart
(some 2 s, a few gaps of up to 247 s): the model treats rows as steps, as SKAB does,
and each step's time in seconds is kept (``aux["time_s"]``) for SKAB's own metrics.

Entities: one per labelled run (``valve1/0`` ... ``other/14``, group = its folder), with
the whole run as its labelled series and its steps before the fault's onset as its
``train`` part; plus ``anomaly-free``, train only. Split by entity (``Dataset.folds``):
5 folds; runs are dealt to folds round-robin in the order valve1, valve2, other (file
number within each), so each fold holds every kind of fault in proportion; fold k tests
the runs of fold k, validates on those of fold k+1 (mod 5) and trains on the other
three folds' runs and the anomaly-free run.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from training.data.io import check_labels, fill_nans, numeric, read_table
from training.data.types import Dataset, Entity
from training.errors import DataError

GROUPS = ("valve1", "valve2", "other")
FREE = "anomaly-free"
N_FOLDS = 5


def _base(root: Path) -> Path:
    for cand in (root / "SKAB" / "data", root / "data", root):
        if (cand / "valve1").is_dir() or (cand / FREE).is_dir():
            return cand
    raise DataError(
        f"{root}: no SKAB data (expected SKAB/data/valve1/, valve2/, other/, {FREE}/)"
    )


def _read(path: Path) -> pd.DataFrame:
    df = read_table(path, sep=";")
    if "datetime" not in df.columns:
        raise DataError(f"{path}: no 'datetime' column (is it ';'-separated?)")
    return df


def _seconds(df: pd.DataFrame, path: Path) -> np.ndarray:
    t = pd.to_datetime(df["datetime"], errors="coerce")
    if t.isna().any():
        i = int(np.argmax(t.isna().to_numpy()))
        raise DataError(f"{path}: unreadable datetime {df['datetime'].iloc[i]!r}")
    return ((t - t.iloc[0]).dt.total_seconds()).to_numpy(dtype=np.float64)


def load_skab(root: Path, name: str = "skab") -> Dataset:
    base = _base(root)
    free_path = base / FREE / f"{FREE}.csv"
    free = _read(free_path)
    channels = [c for c in free.columns if c != "datetime"]
    if not channels:
        raise DataError(f"{free_path}: no sensor columns")
    x_free, n_free = fill_nans(numeric(free[channels], free_path), free_path, channels)
    entities = [Entity(FREE, x_free, imputed=n_free, group=FREE)]
    order: list[int] = []  # labelled entities in dealing order
    for group in GROUPS:
        files = sorted(
            (base / group).glob("*.csv"),
            key=lambda p: [int(n) for n in re.findall(r"\d+", p.stem)] or [0],
        )
        for path in files:
            df = _read(path)
            missing = {*channels, "anomaly", "changepoint"} - set(df.columns)
            if missing:
                raise DataError(f"{path}: missing columns {sorted(missing)}")
            x, n_nan = fill_nans(numeric(df[channels], path), path, channels)
            labels = check_labels(df["anomaly"].to_numpy(), len(x), path)
            cp = check_labels(df["changepoint"].to_numpy(), len(x), path)
            if not labels.any():
                raise DataError(f"{path}: no anomalous row (each run has one fault)")
            onset = int(np.argmax(labels))
            order.append(len(entities))
            entities.append(
                Entity(
                    f"{group}/{path.stem}",
                    train=x[:onset],
                    test=x,
                    labels=labels,
                    imputed=n_nan,
                    group=group,
                    aux={"changepoint": cp, "time_s": _seconds(df, path)},
                )
            )
    if not order:
        raise DataError(f"{base}: no labelled runs in {', '.join(GROUPS)}")
    deal = {i: k % N_FOLDS for k, i in enumerate(order)}  # entity -> its test fold
    folds = []
    for k in range(N_FOLDS):
        val = (k + 1) % N_FOLDS
        folds.append(
            {
                "train": [i for i in order if deal[i] not in (k, val)],
                "val": [i for i in order if deal[i] == val],
                "test": [i for i in order if deal[i] == k],
            }
        )
    return Dataset(
        name,
        channels,
        entities,
        folds=folds,
        steps_per_day=86_400.0,  # nominal 1 Hz
        notes=[
            "rows are steps (about 1 s apart, some 2 s, a few gaps); "
            "train parts: the anomaly-free run and each run's steps before its fault"
        ],
    )
