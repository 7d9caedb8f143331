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
             timestamp column (seconds or ISO 8601; detected by name), optional 0/1
             label column, optional entity column (one series per value, e.g. one per
             pump). Everything else is a channel. The CSV rules (delimiter, header,
             names) are :mod:`training.usercsv`'s; every refusal names the file, the
             row and the column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from training.data.io import check_labels, fill_nans, numeric, read_table, require_file
from training.data.types import Dataset, Entity
from training.data.windows import WINDOW, min_pretrain_steps, min_split_steps
from training.errors import DataError
from training.usercsv import (
    TIMESTAMP_HINT,
    find_column,
    parse_time,
    read_header,
    timestamp_column,
)


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
    x_tr, n_tr = fill_nans(
        numeric(train, paths["train"]), paths["train"], list(train.columns)
    )
    x_te, n_te = fill_nans(
        numeric(test, paths["test"]), paths["test"], list(test.columns)
    )
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
    x_tr, n_tr = fill_nans(numeric(tr[channels], tr_path), tr_path, channels)
    x_te, n_te = fill_nans(numeric(te[channels], te_path), te_path, channels)
    return Dataset(name, channels, [Entity("swat", x_tr, x_te, labels, n_tr + n_te)])


def _find(root: Path, stem: str) -> Path | None:
    return next(
        (p for p in (root / f"{stem}.csv", root / f"{stem}.parquet") if p.is_file()),
        None,
    )


@dataclass
class UserTable:
    """One checked user file: its rows (index = data row - 1), which column is what."""

    path: Path
    df: pd.DataFrame
    channels: list[str]
    timestamp: str | None  # the column, converted to float seconds
    label: str | None
    entity: str | None
    header_lines: int = 1  # a CSV's line of data row r is r + header_lines


def read_user_table(
    path: Path,
    *,
    timestamp_col: str | None = None,
    label_col: str | None = "label",
    entity_col: str | None = None,
    channels: list[str] | None = None,
) -> UserTable:
    """Read and check a user's CSV (see :mod:`training.usercsv`) or Parquet file:
    every cell of every channel a number or empty, timestamps seconds or ISO 8601,
    labels 0/1. ``channels``: the columns a second file (test) must have."""
    require_file(path)
    if path.suffix == ".parquet":
        df = read_table(path)
        df.columns = [str(c).strip() for c in df.columns]
        header_lines = 0
    else:
        header, sep = read_header(path)
        df = read_table(path, sep=sep, index_col=False)
        df.columns = header[: len(df.columns)]
        header_lines = 1
    header = list(df.columns)
    ts = timestamp_column(header, timestamp_col, path)
    label = find_column(header, label_col) if label_col else None
    entity = None
    if entity_col:
        entity = find_column(header, entity_col)
        if entity is None:
            raise DataError(
                f"no entity column {entity_col!r} among {header[:12]}",
                file=path,
                line=1 if header_lines else None,
                hint="--entity-col names the column that tells the series apart",
            )
    meta = [c for c in (ts, label, entity) if c]
    if channels is None:
        channels = [c for c in header if c not in meta]
        if not channels:
            raise DataError(
                f"no channel columns besides {meta}",
                file=path,
                hint="every column that is not the timestamp, label or entity is a channel",
            )
    elif missing := [c for c in channels if c not in header]:
        raise DataError(f"missing channel columns {missing[:5]}", file=path)
    table = UserTable(path, df, channels, ts, label, entity, header_lines)
    df[channels] = _numbers(table, channels)
    if ts:
        df[ts] = _seconds(table, ts)
    if label:
        df[label] = _labels(table, label)
    return table


def _where(t: UserTable, i: int | np.integer, column: str) -> dict[str, Any]:
    row = int(t.df.index[i]) + 1
    line = row + t.header_lines if t.header_lines else None
    return {"file": t.path, "row": row, "line": line, "column": column}


def _numbers(t: UserTable, columns: list[str]) -> pd.DataFrame:
    raw = t.df[columns]
    out = raw.apply(pd.to_numeric, errors="coerce")
    bad = (out.isna() & raw.notna()).to_numpy()  # empty cells are NaN already
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise DataError(
            f"non-numeric value {raw.iat[i, j]!r}",
            **_where(t, i, columns[j]),
            hint="a channel cell holds a number or nothing (missing); is the "
            "timestamp, label or entity column named as such?",
        )
    inf = np.isinf(out.to_numpy(dtype=np.float64))
    if inf.any():
        i, j = np.argwhere(inf)[0]
        raise DataError(
            f"infinite value {raw.iat[i, j]}",
            **_where(t, i, columns[j]),
            hint="leave the cell empty if the reading is missing",
        )
    return out.astype(np.float32)


def _seconds(t: UserTable, column: str) -> pd.Series:
    raw = t.df[column]
    out = pd.to_numeric(raw, errors="coerce").astype(np.float64)
    for i in np.flatnonzero(~np.isfinite(out.to_numpy())):
        cell = raw.iat[i]
        if pd.isna(cell):
            raise DataError("empty timestamp", **_where(t, i, column))
        try:
            out.iat[i] = parse_time(str(cell))
        except ValueError:
            raise DataError(
                f"{cell!r} is not a time", **_where(t, i, column), hint=TIMESTAMP_HINT
            ) from None
    return out


def _labels(t: UserTable, column: str) -> pd.Series:
    raw = t.df[column]
    out = pd.to_numeric(raw, errors="coerce")
    bad = ~out.isin([0, 1]).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"label {str(raw.iat[i])!r}: labels must be 0 or 1",
            **_where(t, i, column),
            hint="1 marks an anomalous row, 0 a normal one",
        )
    return out.astype(np.int8)


def load_table_dataset(
    root: Path,
    name: str = "csv",
    *,
    timestamp_col: str | None = None,
    label_col: str | None = "label",
    entity_col: str | None = None,
    train_frac: float = 0.5,
) -> Dataset:
    """A user's own data; see the module docstring for the accepted layouts.

    Labels are optional: without a label column there is no test split (pre-training
    needs none; evaluation says what is missing)."""

    def read(path: Path, channels: list[str] | None = None) -> UserTable:
        return read_user_table(
            path,
            timestamp_col=timestamp_col,
            label_col=label_col,
            entity_col=entity_col,
            channels=channels,
        )

    notes: list[str] = []
    if root.is_dir():
        tr_path = _find(root, "train")
        if tr_path is None:
            raise DataError(
                "expected train.csv or train.parquet in it",
                file=root,
                hint="or pass one file as --root; it is cut in time into train and test",
            )
        te_path = _find(root, "test")
        train = read(tr_path)
        test = read(te_path, train.channels) if te_path else None
        if test is not None and test.label is None:
            notes.append(f"{test.path.name} has no {label_col!r} column: no test split")
            test = None
    else:
        if not 0.0 < train_frac < 1.0:
            raise DataError(f"--train-frac must be in (0, 1), got {train_frac}")
        tr_path = root
        train = read(root)
        test = None
        if train.label is not None:
            train, test = _cut(train, train_frac)
        else:
            notes.append(f"no {label_col!r} column: every row is train, no test split")
    channels = train.channels

    def groups(t: UserTable) -> dict[str, pd.DataFrame]:
        if not t.entity:
            return {"series": t.df}
        return {str(k): g for k, g in t.df.groupby(t.entity, sort=True)}

    def series(t: UserTable, df: pd.DataFrame) -> tuple[np.ndarray, int]:
        if t.timestamp:
            df = df.sort_values(t.timestamp, kind="stable")
        x = df[channels].to_numpy(dtype=np.float32)
        return fill_nans(x, t.path, channels) if len(x) else (x, 0)

    test_groups = groups(test) if test is not None else {}
    entities = []
    for key, g in groups(train).items():
        x_tr, n_tr = series(train, g)
        x_te, labels, n_te = None, None, 0
        if test is not None and key in test_groups:
            t = test_groups[key]
            if test.timestamp:
                t = t.sort_values(test.timestamp, kind="stable")
            x_te, n_te = series(test, t)
            assert test.label is not None
            labels = t[test.label].to_numpy(dtype=np.int8)
        if len(x_tr) == 0 or (x_te is not None and len(x_te) == 0):
            rows = len(x_tr) + (0 if x_te is None else len(x_te))
            of = f" of entity {key!r}" if train.entity else ""
            raise DataError(
                f"{rows} data rows{of}: too few for a train and a test part",
                file=train.path,
                hint=f"a window is {WINDOW} rows; pre-training needs at least "
                f"{min_pretrain_steps()} train rows, evaluation {min_split_steps()} "
                "labelled test rows per series",
            )
        entities.append(Entity(key, x_tr, x_te, labels, n_tr + n_te))
    return Dataset(name, channels, entities, notes=notes, source=str(root))


def _cut(t: UserTable, frac: float) -> tuple[UserTable, UserTable]:
    """Chronological cut of one file into a train part and a test part (per entity)."""
    parts = (
        [t.df] if not t.entity else [g for _, g in t.df.groupby(t.entity, sort=True)]
    )
    if t.timestamp:
        parts = [p.sort_values(t.timestamp, kind="stable") for p in parts]
    cut = [int(len(p) * frac) for p in parts]
    pairs = list(zip(parts, cut, strict=True))
    train = pd.concat([p.iloc[:c] for p, c in pairs])
    test = pd.concat([p.iloc[c:] for p, c in pairs])
    return replace(t, df=train), replace(t, df=test)
