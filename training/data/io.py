"""Reading files with errors a user can act on, and the one NaN policy.

NaN policy (training and serving share it): a missing value is forward-filled from the
last observed value of its channel; leading NaNs take the first observed value; a channel
with no observed value at all becomes 0 (and, being constant, is then dropped by the
zero-variance mask). The number of filled cells is recorded per entity. Infinities are
not missing values but broken data: they are refused.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from training.errors import DataError


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")
    return path


def read_table(path: Path, **kwargs: Any) -> pd.DataFrame:
    """Read a CSV (or .parquet) file into a DataFrame, mapping parser failures to DataError."""
    require_file(path)
    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot parse as a table ({_one_line(e)})") from None
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read ({_one_line(e)})") from None
    if len(df) == 0:
        raise DataError(f"{path}: no data rows")
    return df


def _one_line(e: Exception) -> str:
    """A library's message on one line (pandas' parser errors end in a newline)."""
    return " ".join(str(e).split())


def numeric(df: pd.DataFrame, path: Path) -> np.ndarray:
    """All columns of ``df`` as float32 (T, V); names the first non-numeric cell if any."""
    out = df.apply(pd.to_numeric, errors="coerce")
    bad = out.isna() & df.notna()  # empty cells are NaN already; these are text
    if bad.to_numpy().any():
        row, col = np.argwhere(bad.to_numpy())[0]
        name = df.columns[col]
        where = (
            f"column {col + 1}"
            if isinstance(name, int | np.integer)
            else f"column {name!r}"
        )
        raise DataError(
            f"{path}: non-numeric value {df.iat[row, col]!r} in {where}, data row {row + 1}"
        )
    return out.to_numpy(dtype=np.float32)


def refuse_short_rows(
    df: pd.DataFrame, path: Path, *, sep: str = ",", skip: int = 0, header: int = 0
) -> None:
    """A row with fewer cells than the file's columns (pandas fills the missing cells
    with NaN) is a truncated or damaged file, not missing readings: refused, naming the
    data row. ``skip`` lines above the table (junk), then ``header`` non-blank lines. An
    empty cell (``,,``) stays a missing value."""
    if len(df) == 0 or not df.iloc[:, -1].isna().any():
        return  # a short row leaves its last cell NaN
    with path.open(errors="replace") as f:
        lines = (line for line in islice(f, skip, None) if line.strip())
        for r, line in enumerate(islice(lines, header, None)):
            n = line.count(sep) + 1
            if n < df.shape[1]:
                raise DataError(
                    f"{n} cells, the file has {df.shape[1]} columns",
                    file=path,
                    row=r + 1,
                    hint="a truncated or damaged file? copy it again; an empty "
                    f"cell ('{sep}{sep}') marks a missing reading",
                )


def load_npy(path: Path) -> np.ndarray:
    require_file(path)
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise DataError(f"{path}: not a readable .npy array ({e})") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise DataError(f"{path}: expected a (T, V) array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number):
        raise DataError(f"{path}: expected numbers, got dtype {arr.dtype}")
    return arr.astype(np.float32)


def fill_nans(
    x: np.ndarray, path: Path, channels: list[str] | None = None
) -> tuple[np.ndarray, int]:
    """Apply the NaN policy to a (T, V) array; returns (filled copy, cells filled).
    ``channels`` names the columns in an error (else their 1-based position)."""
    if len(x) == 0:
        raise DataError("empty series (0 steps)", file=path)
    if np.isinf(x).any():
        row, col = np.argwhere(np.isinf(x))[0]
        raise DataError(
            "infinite value",
            file=path,
            row=int(row) + 1,
            column=channels[col] if channels else int(col) + 1,
            hint="leave the cell empty (or NaN) if the reading is missing",
        )
    nan = np.isnan(x)
    n = int(nan.sum())
    if n == 0:
        return x, 0
    filled = pd.DataFrame(x).ffill().bfill().fillna(0.0).to_numpy(dtype=np.float32)
    return filled, n


def check_labels(labels: np.ndarray, n_steps: int, path: Path) -> np.ndarray:
    """Validate a per-step 0/1 label vector against its series length."""
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != n_steps:
        raise DataError(
            f"{path}: {len(labels)} labels for a test series of {n_steps} steps"
        )
    ok = np.isin(labels, (0, 1))
    if not ok.all():
        i = int(np.argmin(ok))
        raise DataError(
            f"{path}: labels must be 0 or 1, found {labels[i]!r} at row {i + 1}"
        )
    return labels.astype(np.int8)
