"""``scjepa label``: the incidents reported to the service (``GET /incidents``) as the
label column of a CSV of the same streams' readings, for ``scjepa evaluate --dataset
csv`` (a model trained on the operator's own incidents).

    curl -s 'localhost:8000/incidents?limit=10000' -H 'X-API-Key: KEY' > incidents.json
    scjepa label readings.csv --incidents incidents.json --entity-col stream \\
        --out labelled.csv

A row is labelled 1 when its timestamp is within one of its stream's incidents (start
to end, both included), else 0. The stream of a row is its ``--entity-col`` cell, or
``--stream`` for a file of one stream (the default when every incident names one).
The rows are written as read (same delimiter, cells verbatim, blank lines left out)
with the label column last; the file is read by the rules of training/usercsv.py.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any

from training import usercsv
from training.errors import DataError, UserError

# stream -> its incidents' (start, end, id), by start
Spans = dict[str, list[tuple[float, float, str]]]


def _number(v: Any, where: str, path: Path) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise DataError(f"{where} is not a number: {v!r}", file=path)
    return float(v)


def read_incidents(path: Path) -> Spans:
    """The incidents of ``path`` (GET /incidents' body, or its list) by stream."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("file not found", file=path) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"not JSON: {e}", file=path) from None
    items = raw.get("incidents") if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise DataError(
            'expected GET /incidents\' body, {"incidents": [...]}, or a list',
            file=path,
        )
    spans: Spans = {}
    for i, item in enumerate(items):
        where = f"incidents[{i}]"
        if not isinstance(item, dict):
            raise DataError(f"{where} is not an object", file=path)
        stream = item.get("stream")
        if not isinstance(stream, str) or not stream:
            raise DataError(f"{where} has no stream", file=path)
        start, end = (
            _number(item.get(k), f"{where}.{k}", path) for k in ("start", "end")
        )
        if end < start:
            raise DataError(
                f"{where} ends ({end}) before it starts ({start})", file=path
            )
        named = str(item.get("id", where))
        spans.setdefault(stream, []).append((start, end, named))
    for s in spans.values():
        s.sort()
    return spans


def _merged(spans: list[tuple[float, float, str]]) -> tuple[list[float], list[float]]:
    """A stream's incidents as disjoint intervals (starts, ends), by start: a row is
    within one of them in one bisection, however many incidents overlap."""
    starts: list[float] = []
    ends: list[float] = []
    for a, b, _ in spans:  # by start
        if ends and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return starts, ends


def label_file(
    src: Path,
    incidents: Path,
    out: Path,
    *,
    entity_col: str | None = None,
    stream: str | None = None,
    timestamp_col: str | None = None,
    label_col: str = usercsv.LABEL_COL,
) -> dict[str, Any]:
    """Write ``src``'s rows with ``label_col`` to ``out``; returns the counts."""
    spans = read_incidents(incidents)
    header, delimiter = usercsv.read_header(src)
    ts_col = usercsv.timestamp_column(header, timestamp_col, src)
    if ts_col is None:
        raise DataError(
            "no timestamp column: incidents are matched to rows by time",
            file=src,
            line=1,
            hint=f"name it with --timestamp-col, or call it one of "
            f"{', '.join(usercsv.TIMESTAMP_NAMES)}",
        )
    if usercsv.find_column(header, label_col) is not None:
        raise DataError(
            f"the file has a {label_col!r} column already",
            file=src,
            line=1,
            hint="name another with --label-col, or remove it",
        )
    ent: str | None = None
    if entity_col is not None:
        if stream is not None:
            raise UserError("give --entity-col or --stream, not both")
        ent = usercsv.find_column(header, entity_col)
        if ent is None:
            raise DataError(
                f"no entity column {entity_col!r} among {header[:12]}",
                file=src,
                line=1,
            )
    elif stream is None:
        if len(spans) > 1:
            raise UserError(
                f"{incidents}: incidents of {len(spans)} streams "
                f"({', '.join(sorted(spans)[:5])}...): name the file's with --stream, "
                "or its stream column with --entity-col"
            )
        stream = next(iter(spans), None)
    t_at, e_at = header.index(ts_col), None if ent is None else header.index(ent)
    width = len(header)
    rows = positive = 0
    merged = {s: _merged(v) for s, v in spans.items()}
    labelled: dict[str, list[float]] = {}  # stream -> the times of its rows labelled 1
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter, lineterminator="\n")
        writer.writerow([*header, label_col])
        for k, (cells, line) in enumerate(
            usercsv.data_records(src, delimiter, width), 1
        ):
            if not usercsv.fits(cells, width):
                raise DataError(
                    usercsv.cells_problem(len(cells), width), file=src, row=k, line=line
                )
            cells = cells[:width]
            try:
                t = usercsv.parse_time(cells[t_at])
            except ValueError:
                raise DataError(
                    f"{cells[t_at]!r} is not a time",
                    file=src,
                    row=k,
                    line=line,
                    column=ts_col,
                    hint=usercsv.TIMESTAMP_HINT,
                ) from None
            name = (cells[e_at] if e_at is not None else stream) or ""
            starts, ends = merged.get(name, ([], []))
            i = bisect_right(starts, t) - 1  # the last interval starting at or before t
            label = int(i >= 0 and ends[i] >= t)
            if label:
                labelled.setdefault(name, []).append(t)
            writer.writerow([*cells, label])
            rows += 1
            positive += label
    # an incident has a row iff one of its stream's rows labelled 1 lies within it
    for times in labelled.values():
        times.sort()
    missed = []
    for s, spans_of in spans.items():
        times = labelled.get(s, [])
        for a, b, named in spans_of:
            i = bisect_left(times, a)
            if i == len(times) or times[i] > b:
                missed.append(named)
    missed.sort()
    total = sum(len(v) for v in spans.values())
    return {"rows": rows, "labelled": positive, "incidents": total, "no_rows": missed}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="a CSV of the streams' readings")
    p.add_argument(
        "--incidents",
        type=Path,
        required=True,
        help="the incidents: GET /incidents' body saved to a file",
    )
    p.add_argument("--out", type=Path, required=True, help="the labelled CSV")
    p.add_argument(
        "--entity-col",
        help="the column naming each row's stream (for a file of several streams)",
    )
    p.add_argument(
        "--stream",
        help="the stream the file's rows are of (default: the incidents' one stream)",
    )
    p.add_argument("--timestamp-col", help="default: the first column called "
                   f"{', '.join(usercsv.TIMESTAMP_NAMES)} (any case)")  # fmt: skip
    p.add_argument("--label-col", default=usercsv.LABEL_COL, help="the column written")


def run(args: argparse.Namespace) -> int:
    got = label_file(
        args.file,
        args.incidents,
        args.out,
        entity_col=args.entity_col,
        stream=args.stream,
        timestamp_col=args.timestamp_col,
        label_col=args.label_col,
    )
    print(
        f"wrote {args.out}: {got['rows']} rows, {got['labelled']} labelled 1, from "
        f"{got['incidents'] - len(got['no_rows'])} of {got['incidents']} incidents"
    )
    if got["no_rows"]:
        shown = ", ".join(got["no_rows"][:10])
        print(f"no row of the file falls in {len(got['no_rows'])} incidents: {shown}")
    more = f" --entity-col {args.entity_col}" if args.entity_col else ""
    if args.label_col != usercsv.LABEL_COL:
        more += f" --label-col {args.label_col}"
    print(f"next: scjepa evaluate --dataset csv --root {args.out}{more} ...")
    return 0
