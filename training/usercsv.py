"""A user's own CSV: the rules both readers share, in plain Python.

The training loader (:func:`training.data.tabular.load_table_dataset`, pandas) and
``scjepa replay --file`` (which runs where only the service is installed, without
pandas) read the same files the same way:

- the delimiter is the one of ``, ; TAB |`` the header line holds most of (one column:
  none of them);
- the first line is a header naming every column, each name once;
- the timestamp column is the one named by the caller, else the first column called
  ``timestamp``, ``time``, ``ts``, ``datetime`` or ``date`` (any case); its cells are
  seconds (a number) or ISO 8601 date-times (no zone = UTC);
- ``label`` (0/1 per row) and an entity column are optional; every other column is a
  channel, a number per cell, an empty cell = missing; infinities are refused.
"""

from __future__ import annotations

import csv
import math
from datetime import UTC, datetime
from pathlib import Path

from training.errors import DataError

DELIMITERS = (",", ";", "\t", "|")
TIMESTAMP_NAMES = ("timestamp", "time", "ts", "datetime", "date")
HEADER_HINT = (
    "the first line must name the columns, e.g. 'timestamp,sensor_1,sensor_2,label'"
)
TIMESTAMP_HINT = "use seconds (e.g. 1700000000) or ISO 8601 (e.g. 2024-05-01T12:00:00Z)"


def sniff_delimiter(header_line: str) -> str:
    counts = {d: header_line.count(d) for d in DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def read_header(path: Path) -> tuple[list[str], str]:
    """The file's column names and delimiter; refuses a file without a header."""
    if not path.is_file():
        raise DataError("file not found", file=path)
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as f:
        first = f.readline()
    if not first.strip():
        raise DataError("the first line is empty", file=path, line=1, hint=HEADER_HINT)
    delimiter = sniff_delimiter(first)
    header = [h.strip() for h in next(csv.reader([first], delimiter=delimiter))]
    check_header(header, path)
    return header, delimiter


def check_header(header: list[str], path: Path) -> None:
    if all(is_number(h) for h in header if h):
        raise DataError(
            "the first line holds numbers, not column names",
            file=path,
            line=1,
            hint=HEADER_HINT,
        )
    for i, h in enumerate(header):
        if not h:
            raise DataError(
                "a column without a name",
                file=path,
                line=1,
                column=i + 1,
                hint=HEADER_HINT,
            )
        if h in header[:i]:
            raise DataError(
                "this column name appears twice",
                file=path,
                line=1,
                column=h,
                hint="give every column its own name",
            )


def find_column(header: list[str], name: str) -> str | None:
    """``name`` as the header spells it (exact, else any case), or None."""
    if name in header:
        return name
    return next((h for h in header if h.lower() == name.lower()), None)


def timestamp_column(header: list[str], wanted: str | None, path: Path) -> str | None:
    """The timestamp column: ``wanted`` (which must exist), else the first of
    :data:`TIMESTAMP_NAMES` present, else None (readings are numbered 0, 1, ...)."""
    if wanted:
        found = find_column(header, wanted)
        if found is None:
            raise DataError(
                f"no timestamp column {wanted!r} among {header[:12]}",
                file=path,
                line=1,
                hint="name the column with --timestamp-col, or leave the option out to "
                f"detect one of {', '.join(TIMESTAMP_NAMES)}",
            )
        return found
    lower = [h.lower() for h in header]
    return next((header[lower.index(n)] for n in TIMESTAMP_NAMES if n in lower), None)


def parse_time(cell: str) -> float:
    """Seconds since the epoch of a cell holding seconds or an ISO 8601 date-time;
    ValueError otherwise."""
    text = cell.strip()
    try:
        t = float(text)
    except ValueError:
        d = datetime.fromisoformat(text)  # ValueError when not ISO 8601
        if d.tzinfo is None:
            d = d.replace(tzinfo=UTC)
        return d.timestamp()
    if not math.isfinite(t):
        raise ValueError(f"{cell!r} is not a time")
    return t
