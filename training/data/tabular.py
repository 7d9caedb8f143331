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

import re
import warnings
from dataclasses import dataclass, replace
from fnmatch import fnmatch
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from training.data.io import (
    check_labels,
    fill_nans,
    numeric,
    read_table,
    refuse_short_rows,
    require_file,
)
from training.data.types import Dataset, Entity
from training.data.windows import WINDOW, min_pretrain_steps, min_split_steps
from training.errors import DataError
from training.usercsv import (
    CHANNEL_HINT,
    INFINITY,
    INFINITY_HINT,
    LABEL_COL,
    MISSING,
    NUMBER,
    ROW_HINT,
    TIMESTAMP_HINT,
    cell_value,
    cells_problem,
    check_names,
    data_records,
    find_column,
    fits,
    no_label_column,
    parse_time,
    read_header,
    record_line,
    records,
    timestamp_column,
)


def load_psm(root: Path, name: str = "psm") -> Dataset:
    paths = {s: root / f"{s}.csv" for s in ("train", "test", "test_label")}
    frames = {s: read_table(p) for s, p in paths.items()}
    for s, p in paths.items():
        refuse_short_rows(frames[s], p, header=1)
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
    """The table below the header line; rows of empty cells only (the ``,,,`` rows
    some exports end with) are dropped, the index keeps each row's data row - 1."""
    require_file(path)
    with path.open(errors="replace") as f:  # skip junk lines above the real header
        skip = next(
            (i for i, line in enumerate(f) if "timestamp" in line.lower()), None
        )
    if skip is None:
        raise DataError(f"{path}: no header line with a 'Timestamp' column")
    df = read_table(path, skiprows=skip, low_memory=False)
    refuse_short_rows(df, path, skip=skip, header=1)
    df.columns = [str(c).strip() for c in df.columns]
    return df.dropna(how="all")


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
            f"{path}: unknown label {df[col].iloc[i]!r} at data row {df.index[i] + 1}"
        )
    return (text == "attack").to_numpy(dtype=np.int8)


def load_swat(root: Path, name: str = "swat") -> Dataset:
    notes = []

    def one(word: str) -> Path:
        """The file named like ``*Normal*.csv``, in any case; of several (the
        releases' v0 and v1), the latest by name."""
        found = sorted(
            (p for p in root.glob("*") if p.is_file()),
            key=lambda p: _natural(p.name),
        )
        found = [p for p in found if fnmatch(p.name.lower(), f"*{word}*.csv")]
        if not found:
            raise DataError(
                f"{root}: no file matching '*{word.capitalize()}*.csv' (SWaT public CSV)"
            )
        if len(found) > 1:
            notes.append(
                f"{len(found)} files match '*{word.capitalize()}*.csv' in {root}: "
                f"read {found[-1].name} (the latest by name), not "
                + ", ".join(p.name for p in found[:-1])
            )
        return found[-1]

    tr_path, te_path = one("normal"), one("attack")
    tr, te = _read_swat(tr_path), _read_swat(te_path)
    labels = _swat_labels(te, te_path)
    drop = [c for c in tr.columns if c.lower() == "timestamp" or "attack" in c.lower()]
    channels = [c for c in tr.columns if c not in drop]
    if missing := [c for c in channels if c not in te.columns]:
        raise DataError(f"{te_path}: missing columns {missing[:5]}")
    x_tr, n_tr = fill_nans(numeric(tr[channels], tr_path), tr_path, channels)
    x_te, n_te = fill_nans(numeric(te[channels], te_path), te_path, channels)
    return Dataset(
        name, channels, [Entity("swat", x_tr, x_te, labels, n_tr + n_te)], notes=notes
    )


def _natural(name: str) -> list[Any]:
    """``v2`` before ``v10``."""
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", name)]


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
    entity: str | None  # the column, as the file's text
    records: np.ndarray | None = None  # a CSV's record of each row (index: row - 1)
    sep: str | None = None  # a CSV's delimiter


def read_user_table(
    path: Path,
    *,
    timestamp_col: str | None = None,
    label_col: str = LABEL_COL,
    label_required: bool = False,
    entity_col: str | None = None,
    channels: list[str] | None = None,
) -> UserTable:
    """Read and check a user's CSV (see :mod:`training.usercsv`) or Parquet file:
    every cell of every channel a number or missing, timestamps seconds or ISO 8601,
    labels 0/1, entities named. ``channels``: the columns a second file (test) must
    have; ``label_required``: refuse a file without ``label_col``."""
    require_file(path)
    if path.suffix == ".parquet":
        df, records, sep = _read_parquet(path), None, None
    else:
        df, records, sep = _read_csv(path, label_col, entity_col)
    header = list(df.columns)
    ts = timestamp_column(header, timestamp_col, path)
    label = find_column(header, label_col) if label_col else None
    if label is None and label_required:
        raise no_label_column(
            label_col, header, path, 1 if records is not None else None
        )
    entity = None
    if entity_col:
        entity = find_column(header, entity_col)
        if entity is None:
            raise DataError(
                f"no entity column {entity_col!r} among {header[:12]}",
                file=path,
                line=1 if records is not None else None,
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
    table = UserTable(path, df, channels, ts, label, entity, records, sep)
    x = np.empty((len(df), len(channels)), dtype=np.float32)
    bad = []
    for j, c in enumerate(channels):
        x[:, j], b = _numbers(table, c)
        bad.append((c, b))
    _first_bad(table, bad)
    df[channels] = x
    if ts:
        df[ts] = _seconds(table, ts)
    if label:
        df[label] = _labels(table, label)
    if entity:
        df[entity] = _entities(table, entity)
    return table


# every spelling of a MISSING token (NA, Na, nA, na, ...), for pandas' exact matching
_MISSING_SPELT = sorted(
    {"".join(p) for t in MISSING for p in product(*({c.lower(), c.upper()} for c in t))}
)


def _read_parquet(path: Path) -> pd.DataFrame:
    df = read_table(path)
    # a named index (e.g. the timestamp, after set_index) is a column; rows are counted
    # by position, whatever the index
    named = any(n is not None for n in df.index.names)
    df = df.reset_index(drop=not named)
    names = [str(c).strip() for c in df.columns]
    check_names(names, path)
    df.columns = names
    return df


def _read_csv(
    path: Path, label_col: str | None, entity_col: str | None
) -> tuple[pd.DataFrame, np.ndarray, str]:
    """The data rows as pandas guesses their types, blank rows out, each row's record
    (its position after the header, blank lines included), and the delimiter. Refuses a row with
    more or fewer cells than the header.

    pandas reads a channel's :data:`~training.usercsv.MISSING` cells (exactly spelt,
    any case) as NaN, so a column of numbers with gaps is parsed in C; a cell it
    leaves as text is judged by :mod:`training.usercsv`'s rules later. The first and
    last columns are read as written, so that a short row (which pandas fills with
    empty cells) can be told from empty cells; the label and entity too (``NA`` is
    an entity's name)."""
    header, sep = read_header(path)
    width = len(header)
    label = find_column(header, label_col) if label_col else None
    ent = find_column(header, entity_col) if entity_col else None
    verbatim = {0, width - 1, width, *(header.index(c) for c in (label, ent) if c)}
    try:
        with warnings.catch_warnings():
            # pandas reads in chunks, in parallel: a column may hold numbers in one
            # and text in another (one Python object a cell, judged as text below)
            warnings.simplefilter("ignore", pd.errors.DtypeWarning)
            df = read_table(
                path,
                sep=sep,
                header=None,
                skiprows=1,
                names=range(width + 1),  # one more: a delimiter ending a row
                index_col=False,
                keep_default_na=False,
                na_values={
                    c: _MISSING_SPELT for c in range(width) if c not in verbatim
                },
                skip_blank_lines=False,
                dtype={header.index(ent): str} if ent else None,
            )
    except DataError:  # a row with two or more cells too many?
        for r, (row, line) in enumerate(data_records(path, sep, width)):
            if not fits(row, width):
                raise DataError(
                    cells_problem(len(row), width),
                    file=path,
                    row=r + 1,
                    line=line,
                    hint=ROW_HINT,
                ) from None
        raise

    def missing(c: int, rows: np.ndarray | None = None) -> np.ndarray:
        col = df[c] if rows is None else df[c].iloc[rows]
        if pd.api.types.is_numeric_dtype(col):
            return col.isna().to_numpy(dtype=bool)
        low = _text(col).str.lower()
        return (col.isna() | low.isin(MISSING)).to_numpy(dtype=bool)

    # a row of missing cells only is skipped, as a blank line
    blank = missing(0).copy()  # writable
    maybe = np.flatnonzero(blank)
    blank[maybe] = np.logical_and.reduce([missing(c, maybe) for c in range(width + 1)])
    # pandas fills a short row with empty cells: count the cells of a row whose last
    # cell is missing, or which has an extra cell (allowed if empty)
    short = np.flatnonzero(missing(width - 1) & ~blank)
    extra = np.flatnonzero((_text(df[width]) != "").to_numpy(dtype=bool) & ~blank)
    cells = np.full(len(df), width)
    cells[short] = _cell_counts(path, sep, short)
    cells[extra] = _cell_counts(path, sep, extra)
    if (bad := (cells != width) & (cells != width + 1)).any() or len(extra):
        i = int(np.argmax(bad)) if bad.any() else int(extra[0])
        raise DataError(
            cells_problem(int(cells[i]), width),
            file=path,
            row=int((~blank[:i]).sum()) + 1,
            line=record_line(path, sep, i),
            hint=ROW_HINT,
        )
    records = np.flatnonzero(~blank)
    if len(records) == 0:
        raise DataError("no data rows after the header", file=path)
    df = df.loc[~blank, : width - 1].reset_index(drop=True)
    df.columns = header
    for c in header:  # a CSV's True/False is text, not 1/0
        if pd.api.types.is_bool_dtype(df[c]):
            df[c] = df[c].map({True: "True", False: "False"})
    return df, records, sep


def _cell_counts(path: Path, sep: str, want: np.ndarray) -> np.ndarray:
    """Cells of the records ``want`` (positions after the header, ascending), counted
    by delimiters on their lines, unless the file holds quotes or bare CRs: then
    Python's csv reads it (exactly, slower)."""
    if len(want) == 0:
        return np.zeros(0, dtype=np.int64)
    out: list[int] = []
    delim, rest, first = sep.encode(), b"", 0
    with path.open("rb") as f:
        f.readline()  # the header
        while chunk := f.read(1 << 24):
            block = rest + chunk
            if b'"' in block or block.count(b"\r") != block.count(b"\r\n"):
                break
            lines = block.split(b"\n")
            rest = lines.pop()
            lo, hi = np.searchsorted(want, [first, first + len(lines)])
            out += [lines[k - first].count(delim) + 1 for k in want[lo:hi]]
            first += len(lines)
        else:
            if rest and len(out) < len(want):  # the last line, without a newline
                out.append(rest.count(delim) + 1)
            return np.array(out, dtype=np.int64)
    n = [len(cells) for cells, _ in records(path, sep)]
    return np.array(n, dtype=np.int64)[want]


def _where(t: UserTable, i: int | np.integer, column: str) -> dict[str, Any]:
    """Where row ``i`` (a position in ``t.df``) is, for a DataError."""
    row = int(t.df.index[i])
    line = None
    if t.records is not None and t.sep is not None:
        line = record_line(t.path, t.sep, int(t.records[row]))
    return {"file": t.path, "row": row + 1, "line": line, "column": column}


def _text(col: pd.Series) -> pd.Series:
    """A column's cells as stripped text (a missing cell of a typed column: NaN)."""
    return col.astype("str").str.strip()


def _parse(col: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`training.usercsv.cell_value` for a column: (values, missing, bad), NaN
    where missing or bad. A typed (e.g. Parquet) numeric or boolean column is numbers."""
    if pd.api.types.is_numeric_dtype(col):
        x = col.to_numpy(dtype=np.float64, na_value=np.nan)
        return x, np.isnan(x), np.zeros(len(x), dtype=bool)
    s = _text(col)
    missing = (col.isna() | s.str.lower().isin(MISSING)).to_numpy()
    ok = (s.str.fullmatch(NUMBER) | s.str.lower().isin(INFINITY)).to_numpy(
        dtype=bool, na_value=False
    )
    x = s.where(ok).astype(np.float64).to_numpy(dtype=np.float64, na_value=np.nan)
    return x, missing, ~(ok | missing)


def _first_bad(t: UserTable, bad: list[tuple[str, np.ndarray]]) -> None:
    """Refuses the first (row, then column) non-numeric or infinite channel cell."""
    found = [(int(np.argmax(b)), k) for k, (_, b) in enumerate(bad) if b.any()]
    if not found:
        return
    i, k = min(found)
    column = bad[k][0]
    raw = t.df[column].iat[i]
    if isinstance(raw, float | int | np.number) and not isinstance(raw, bool):
        problem = f"infinite value {raw}"  # a typed column's
    else:
        try:
            cell_value(str(raw))
            problem = f"infinite value {raw!r}"
        except ValueError:
            problem = f"non-numeric value {str(raw)!r}"
    raise DataError(
        problem,
        **_where(t, i, column),
        hint=CHANNEL_HINT if problem.startswith("non") else INFINITY_HINT,
    )


def _numbers(t: UserTable, column: str) -> tuple[np.ndarray, np.ndarray]:
    """A channel's values (NaN = missing) and where they are not numbers or infinite."""
    x, _, bad = _parse(t.df[column])
    return x, bad | np.isinf(x)


def _seconds(t: UserTable, column: str) -> np.ndarray:
    col = t.df[column]
    if pd.api.types.is_datetime64_any_dtype(col):  # a Parquet time, zoned or not
        if isinstance(col.dtype, pd.DatetimeTZDtype):
            col = col.dt.tz_convert("UTC").dt.tz_localize(None)
        x = (
            (col - pd.Timestamp(0))
            .dt.total_seconds()
            .to_numpy(np.float64, na_value=np.nan)
        )
        missing = np.isnan(x)
    else:
        x, missing, _ = _parse(col)
    if missing.any():
        raise DataError(
            "empty timestamp",
            **_where(t, int(np.argmax(missing)), column),
            hint=TIMESTAMP_HINT,
        )
    x = x.copy()  # writable (an Arrow column's may not be)
    for i in np.flatnonzero(~np.isfinite(x)):  # not a number: ISO 8601?
        cell = col.iat[i]
        try:
            seconds = parse_time(str(cell))
        except ValueError:
            raise DataError(
                f"{cell!r} is not a time", **_where(t, i, column), hint=TIMESTAMP_HINT
            ) from None
        x[i] = seconds
    return x


def _labels(t: UserTable, column: str) -> np.ndarray:
    x, _, _ = _parse(t.df[column])
    bad = ~np.isin(x, (0.0, 1.0))
    if bad.any():
        i = int(np.argmax(bad))
        raise DataError(
            f"label {str(t.df[column].iat[i])!r}: labels must be 0 or 1",
            **_where(t, i, column),
            hint="1 marks an anomalous row, 0 a normal one",
        )
    return x.astype(np.int8)


def _entities(t: UserTable, column: str) -> pd.Series:
    """The entity column as text (a CSV's as written: ``01`` is not ``1``)."""
    col = t.df[column]
    s = _text(col)
    empty = (col.isna() | (s == "")).to_numpy()
    if empty.any():
        raise DataError(
            "empty entity",
            **_where(t, int(np.argmax(empty)), column),
            hint="every row names the series it belongs to (e.g. its pump); leave out "
            "the rows of none",
        )
    return s


def load_table_dataset(
    root: Path,
    name: str = "csv",
    *,
    timestamp_col: str | None = None,
    label_col: str | None = None,
    entity_col: str | None = None,
    train_frac: float | None = None,
) -> Dataset:
    """A user's own data; see the module docstring for the accepted layouts.

    Labels are optional: without a label column there is no test split (pre-training
    needs none; evaluation says what is missing). ``label_col`` None: a column named
    ``label`` if any; a name given must be a column of the file (or of one of the
    folder's files), else the labels it names would be read as a channel."""

    def read(
        path: Path, channels: list[str] | None = None, required: bool = False
    ) -> UserTable:
        return read_user_table(
            path,
            timestamp_col=timestamp_col,
            label_col=label_col or LABEL_COL,
            label_required=required,
            entity_col=entity_col,
            channels=channels,
        )

    notes: list[str] = []
    if root.is_dir():
        if train_frac is not None:
            raise DataError(
                "--train-frac cuts a single file given as --root; a folder's split "
                "is its train and test files",
                file=root,
            )
        tr_path = _find(root, "train")
        if tr_path is None:
            raise DataError(
                "expected train.csv or train.parquet in it",
                file=root,
                hint="or pass one file as --root; it is cut in time into train and test",
            )
        te_path = _find(root, "test")
        # a --label-col given must name a column of the test file (of the train
        # file where there is none)
        train = read(tr_path, required=bool(label_col) and te_path is None)
        test = read(te_path, train.channels, bool(label_col)) if te_path else None
        if test is not None and test.label is None:
            notes.append(
                f"{test.path.name} has no {label_col or LABEL_COL!r} column: no test split"
            )
            test = None
    else:
        cut = 0.5 if train_frac is None else train_frac
        if not 0.0 < cut < 1.0:
            raise DataError(f"--train-frac must be in (0, 1), got {cut}")
        tr_path = root
        train = read(root, required=bool(label_col))
        test = None
        if train.label is not None:
            train, test = _cut(train, cut)
        elif train_frac is not None:  # it was ignored, silently, as for a folder
            raise DataError(
                f"--train-frac cuts a file with labels into train and test; this "
                f"one has no {LABEL_COL!r} column, so every row is train",
                file=root,
                hint="leave --train-frac out, or name the labels' column with "
                "--label-col",
            )
        else:
            notes.append(f"no {LABEL_COL!r} column: every row is train, no test split")
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

    train_groups = groups(train)
    test_groups = groups(test) if test is not None else {}
    unknown = [k for k in test_groups if k not in train_groups]
    if test is not None and test.entity and test.path != train.path and unknown:
        raise DataError(
            f"entity {unknown[0]!r} has test rows but no train rows in "
            f"{train.path.name}"
            + (f" (nor have {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
            **_where(test, int(test_groups[unknown[0]].index[0]), test.entity),
            hint="give it train rows, or leave its rows out of the test file",
        )
    entities = []
    for key in sorted(train_groups.keys() | test_groups.keys()):
        # a single file's entity may have no train part: refused as too short below
        x_tr, n_tr = series(train, train_groups.get(key, train.df.iloc[:0]))
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
