"""Table-shaped data: PSM, SWaT, and a user's own CSV or Parquet files.

PSM (eBay):  ROOT/{train,test,test_label}.csv, first column ``timestamp_(min)``, 25 features;
             test_label.csv holds ``timestamp_(min),label``. The real train file has NaNs.
SWaT (iTrust), the public CSV export:
             ROOT/*Normal*.csv (train) and ROOT/*Attack*.csv (test); a ``Timestamp`` column,
             51 sensors/actuators and a ``Normal/Attack`` column. Known quirks handled:
             column names padded with spaces, junk rows above the header, the label
             spelled ``A ttack`` in some releases.
Generic:     a directory with ``train.csv|parquet`` and optionally ``test.csv|parquet``
             (or a single file, cut chronologically by ``train_frac``); an optional
             timestamp column, optional 0/1 label column, optional entity column (one
             series per value, e.g. one per pump). Everything else is a channel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from training.data.io import check_labels, fill_nans, numeric, read_table, require_file
from training.data.types import Dataset, Entity
from training.errors import DataError


def load_psm(root: Path, name: str = "psm") -> Dataset:
    paths = {s: root / f"{s}.csv" for s in ("train", "test", "test_label")}
    frames = {s: read_table(p) for s, p in paths.items()}
    ts = frames["train"].columns[0]
    train, test = frames["train"].drop(columns=ts), frames["test"].drop(columns=ts)
    if list(test.columns) != list(train.columns):
        raise DataError(f"{paths['test']}: columns differ from {paths['train'].name}")
    lab = frames["test_label"]
    if "label" not in lab.columns:
        raise DataError(f"{paths['test_label']}: no 'label' column")
    x_tr, n_tr = fill_nans(numeric(train, paths["train"]), paths["train"])
    x_te, n_te = fill_nans(numeric(test, paths["test"]), paths["test"])
    labels = check_labels(lab["label"].to_numpy(), len(x_te), paths["test_label"])
    return Dataset(
        name, list(train.columns), [Entity("psm", x_tr, x_te, labels, n_tr + n_te)]
    )


def _read_swat(path: Path) -> pd.DataFrame:
    require_file(path)
    with path.open(errors="replace") as f:  # skip junk lines above the real header
        skip = next(
            (i for i, line in enumerate(f) if "timestamp" in line.lower()), None
        )
    if skip is None:
        raise DataError(f"{path}: no header line with a 'Timestamp' column")
    df = read_table(path, skiprows=skip, low_memory=False)
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _swat_labels(df: pd.DataFrame, path: Path) -> np.ndarray:
    col = next(
        (c for c in df.columns if c.replace(" ", "").lower() == "normal/attack"), None
    )
    if col is None:
        raise DataError(f"{path}: no 'Normal/Attack' label column")
    text = df[col].astype(str).str.replace(" ", "").str.lower()
    known = text.isin(["normal", "attack"])
    if not known.all():
        i = int(np.argmin(known.to_numpy()))
        raise DataError(
            f"{path}: unknown label {df[col].iloc[i]!r} at data row {i + 1}"
        )
    return (text == "attack").to_numpy(dtype=np.int8)


def load_swat(root: Path, name: str = "swat") -> Dataset:
    def one(pattern: str) -> Path:
        found = sorted(root.glob(pattern))
        if not found:
            raise DataError(f"{root}: no file matching {pattern!r} (SWaT public CSV)")
        return found[0]

    tr_path, te_path = one("*Normal*.csv"), one("*Attack*.csv")
    tr, te = _read_swat(tr_path), _read_swat(te_path)
    labels = _swat_labels(te, te_path)
    drop = [c for c in tr.columns if c.lower() == "timestamp" or "attack" in c.lower()]
    channels = [c for c in tr.columns if c not in drop]
    if missing := [c for c in channels if c not in te.columns]:
        raise DataError(f"{te_path}: missing columns {missing[:5]}")
    x_tr, n_tr = fill_nans(numeric(tr[channels], tr_path), tr_path)
    x_te, n_te = fill_nans(numeric(te[channels], te_path), te_path)
    return Dataset(name, channels, [Entity("swat", x_tr, x_te, labels, n_tr + n_te)])


def _find(root: Path, stem: str) -> Path | None:
    return next(
        (p for p in (root / f"{stem}.csv", root / f"{stem}.parquet") if p.is_file()),
        None,
    )


def load_table_dataset(
    root: Path,
    name: str = "csv",
    *,
    timestamp_col: str | None = "timestamp",
    label_col: str | None = "label",
    entity_col: str | None = None,
    train_frac: float = 0.5,
) -> Dataset:
    """A user's own data; see the module docstring for the accepted layouts."""
    if root.is_dir():
        tr_path = _find(root, "train")
        if tr_path is None:
            raise DataError(f"{root}: expected train.csv or train.parquet")
        te_path = _find(root, "test")
        train_df = read_table(tr_path)
        test_df = read_table(te_path) if te_path else None
    else:
        tr_path = te_path = root
        df = read_table(root)
        if not 0.0 < train_frac < 1.0:
            raise DataError(f"train_frac must be in (0, 1), got {train_frac}")
        train_df, test_df = _cut(df, entity_col, train_frac, root)

    def meta(df: pd.DataFrame) -> list[str]:
        return [
            c for c in (timestamp_col, label_col, entity_col) if c and c in df.columns
        ]

    channels = [c for c in train_df.columns if c not in meta(train_df)]
    if not channels:
        raise DataError(f"{tr_path}: no channel columns besides {meta(train_df)}")
    if entity_col and entity_col not in train_df.columns:
        raise DataError(f"{tr_path}: no entity column {entity_col!r}")

    def groups(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
        if not entity_col:
            return {"series": df}
        return {str(k): g for k, g in df.groupby(entity_col, sort=True)}

    def series(df: pd.DataFrame, path: Path) -> tuple[np.ndarray, int]:
        if timestamp_col and timestamp_col in df.columns:
            df = df.sort_values(timestamp_col, kind="stable")
        if missing := [c for c in channels if c not in df.columns]:
            raise DataError(f"{path}: missing channel columns {missing[:5]}")
        return fill_nans(numeric(df[channels], path), path)

    test_groups = groups(test_df) if test_df is not None else {}
    entities = []
    for key, g in groups(train_df).items():
        x_tr, n_tr = series(g, tr_path)
        x_te, labels, n_te = None, None, 0
        if key in test_groups and te_path is not None:
            t = test_groups[key]
            x_te, n_te = series(t, te_path)
            raw = (
                t[label_col].to_numpy()
                if label_col and label_col in t.columns
                else np.zeros(len(t))
            )
            labels = check_labels(raw, len(x_te), te_path)
        entities.append(Entity(key, x_tr, x_te, labels, n_tr + n_te))
    return Dataset(name, channels, entities)


def _cut(
    df: pd.DataFrame, entity_col: str | None, frac: float, path: Path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Chronological cut of one file into a train part and a test part (per entity)."""
    if entity_col and entity_col not in df.columns:
        raise DataError(f"{path}: no entity column {entity_col!r}")
    parts = (
        [df] if not entity_col else [g for _, g in df.groupby(entity_col, sort=True)]
    )
    cut = [int(len(p) * frac) for p in parts]
    return (
        pd.concat([p.iloc[:c] for p, c in zip(parts, cut, strict=True)]),
        pd.concat([p.iloc[c:] for p, c in zip(parts, cut, strict=True)]),
    )
