"""A user's own CSV: the rules both readers share, in plain Python.

The training loader (:func:`training.data.tabular.load_table_dataset`, pandas) and
``scjepa replay --file`` (which runs where only the service is installed, without
pandas) read the same files the same way:

- the delimiter is the one of ``, ; TAB |`` the header line holds most of (one column:
  none of them);
- the first line is a header naming every column, each name once;
- every data row has as many cells as the header (one more, empty, is allowed: a
  delimiter at the end of a data row); a line of missing cells only (an empty line,
  a spreadsheet's ``,,,``) is skipped. Rows count from 1 without the header and the
  skipped lines; a line number is the file's own;
- the timestamp column is the one named by the caller, else the first column called
  ``timestamp``, ``time``, ``ts``, ``datetime`` or ``date`` (any case); its cells are
  seconds (a number) or ISO 8601 date-times (no zone = UTC); an empty one is refused;
- ``label`` and an entity column are optional; every other column is a channel. A
  label column the caller names must exist (else the labels would be a channel).

Cells, spaces around them ignored (:func:`cell_value`):

- **missing**: an empty cell or one of :data:`MISSING`, any case (``NA``, ``N/A``,
  ``#N/A``, ``NaN``, ``null``, ``None``, ``<NA>``, ...);
- **a number**: decimal or scientific notation (``1``, ``-2.5``, ``.5``, ``1e3``,
  ``+2``); nothing else is (no ``1_000``, ``1,5``, ``0x10`` or ``TRUE``);
  infinities (``inf``, or too big for a float) are refused;
- **a label** is a number equal to 0 or 1 (``1``, ``1.0``, ``01``, ``1e0``), never
  missing;
- **an entity** is the cell's text: ``01`` and ``1`` are two entities, ``NA`` is a
  name like any other; an empty entity cell is refused.

A Parquet file's typed columns are taken as typed (numbers, booleans as 0/1, date-times
as seconds, a null as missing); its text columns follow the rules above. Its column
names are checked as a header's, but may be numbers; a named index (e.g. the
timestamp after ``set_index``) is a column.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from training.errors import DataError

DELIMITERS = (",", ";", "\t", "|")
TIMESTAMP_NAMES = ("timestamp", "time", "ts", "datetime", "date")
LABEL_COL = "label"  # the label column unless --label-col names one (any case)
HEADER_HINT = (
    "the first line must name the columns, e.g. 'timestamp,sensor_1,sensor_2,label'"
)
TIMESTAMP_HINT = "use seconds (e.g. 1700000000) or ISO 8601 (e.g. 2024-05-01T12:00:00Z)"
# a missing cell, after stripping spaces and lower-casing (pandas' defaults, any case)
MISSING = frozenset(
    (
        "",
        "na",
        "n/a",
        "#n/a",
        "#na",
        "nan",
        "-nan",
        "+nan",
        "null",
        "none",
        "<na>",
        "nat",
    )
)
NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"  # after stripping
INFINITY = frozenset(f"{s}{w}" for s in ("", "+", "-") for w in ("inf", "infinity"))
CHANNEL_HINT = (
    "a channel cell holds a number or nothing (missing); is the timestamp, label or "
    "entity column named as such?"
)
INFINITY_HINT = "leave the cell empty if the reading is missing"
ROW_HINT = (
    "every row needs one cell per header column; quote a cell holding the delimiter"
)
_NUMBER = re.compile(NUMBER)


def sniff_delimiter(header_line: str) -> str:
    counts = {d: header_line.count(d) for d in DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def is_number(cell: str) -> bool:
    return _NUMBER.fullmatch(cell.strip()) is not None


def is_missing(cell: str) -> bool:
    return cell.strip().lower() in MISSING


def cell_value(cell: str) -> float:
    """A channel cell's value: NaN when missing, +-inf for an infinity (which callers
    refuse); ValueError when it is not a number."""
    text = cell.strip()
    if text.lower() in MISSING:
        return math.nan
    if _NUMBER.fullmatch(text) or text.lower() in INFINITY:
        return float(text)
    raise ValueError(f"{cell!r} is not a number")


def label_value(cell: str) -> int:
    """A label cell's 0 or 1; ValueError otherwise (a missing label too)."""
    text = cell.strip()
    if _NUMBER.fullmatch(text) and float(text) in (0.0, 1.0):
        return int(float(text))
    raise ValueError(f"{cell!r} is not a label")


def records(path: Path, delimiter: str) -> Iterator[tuple[list[str], int]]:
    """Every record after the header line (blank lines too), with the line it starts on."""
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as f:
        f.readline()  # the header, read by read_header
        reader = csv.reader(f, delimiter=delimiter)
        line = 2
        for cells in reader:
            yield cells, line
            line = reader.line_num + 2


def is_blank(cells: list[str], width: int) -> bool:
    """A line without a value, which is skipped, not a row: an empty line, or up to
    ``width + 1`` cells all missing (a spreadsheet's ``,,,``)."""
    return len(cells) <= width + 1 and all(is_missing(c) for c in cells)


def data_records(
    path: Path, delimiter: str, width: int
) -> Iterator[tuple[list[str], int]]:
    """The data rows (blank lines skipped), each with the line it starts on."""
    for cells, line in records(path, delimiter):
        if not is_blank(cells, width):
            yield cells, line


def record_line(path: Path, delimiter: str, k: int) -> int:
    """The line record ``k`` (0 = the first after the header) starts on: ``k + 2``,
    unless a quoted cell holds a line break."""
    with path.open("rb") as f:
        if not any(b'"' in chunk for chunk in iter(lambda: f.read(1 << 24), b"")):
            return k + 2
    return next(line for i, (_, line) in enumerate(records(path, delimiter)) if i == k)


def fits(cells: list[str], width: int) -> bool:
    """One cell per header column, or one more, empty: a delimiter ending the row."""
    n = len(cells)
    return n == width or (n == width + 1 and not cells[-1].strip())


def cells_problem(n: int, width: int) -> str:
    return f"{n} cells, the header has {width}"


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
    check_names(header, path, line=1)


def check_names(names: list[str], path: Path, line: int | None = None) -> None:
    """Every column named, each name once (a CSV's header, a Parquet file's columns)."""
    seen: set[str] = set()
    for i, h in enumerate(names):
        if not h:
            raise DataError(
                "a column without a name",
                file=path,
                line=line,
                column=i + 1,
                hint=HEADER_HINT if line else "give every column a name",
            )
        if h in seen:
            raise DataError(
                "this column name appears twice",
                file=path,
                line=line,
                column=h,
                hint="give every column its own name (spaces around a name do not count)",
            )
        seen.add(h)


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


def no_label_column(
    wanted: str, header: list[str], path: Path, line: int | None = 1
) -> DataError:
    """The refusal of a ``--label-col`` the file lacks (as of a ``--timestamp-col``):
    read on, the column holding the labels would be read, and served, as a channel."""
    return DataError(
        f"no label column {wanted!r} among {header[:12]}",
        file=path,
        line=line,
        hint="name the column with --label-col, or leave the option out to use a "
        f"column named {LABEL_COL!r} if there is one",
    )


def parse_time(cell: str) -> float:
    """Seconds since the epoch of a cell holding seconds or an ISO 8601 date-time;
    ValueError otherwise (callers say "empty timestamp" for a missing cell first)."""
    text = cell.strip()
    if _NUMBER.fullmatch(text):
        t = float(text)
        if not math.isfinite(t):
            raise ValueError(f"{cell!r} is not a time")
        return t
    d = datetime.fromisoformat(text)  # ValueError when not ISO 8601
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.timestamp()


def add_table_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``--dataset csv`` (a user's CSV/Parquet), for every command that
    loads data; :func:`table_options` turns them into the loader's keywords. Here, not
    in training.data, so that ``scjepa replay`` declares them without pandas."""
    g = p.add_argument_group("--dataset csv options (your own CSV or Parquet)")
    g.add_argument(
        "--timestamp-col",
        default=None,
        help="timestamp column, seconds or ISO 8601 (default: the first column named "
        + ", ".join(TIMESTAMP_NAMES)
        + ", any case)",
    )
    g.add_argument(
        "--label-col",
        default=None,
        help=f"0/1 per row; a column named here must exist (default: {LABEL_COL!r}, "
        "any case, if there is one; without labels, no test split)",
    )
    g.add_argument(
        "--entity-col",
        default=None,
        help="column that tells series apart (one per pump, machine, ...)",
    )
    g.add_argument(
        "--train-frac",
        type=float,
        default=None,
        help="for a single file with labels: leading fraction (in time) used as "
        "train (default 0.5); refused for a folder, whose train and test files are "
        "the split, and for a file without labels, whose every row is train",
    )


def table_options(args: argparse.Namespace, dataset: str) -> dict[str, Any]:
    """The loader keywords of :func:`add_table_arguments`' options for ``dataset``."""
    if dataset.split("@")[0].lower() != "csv":
        return {}
    return {
        "timestamp_col": args.timestamp_col,
        "label_col": args.label_col,
        "entity_col": args.entity_col,
        "train_frac": args.train_frac,
    }
