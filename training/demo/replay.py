"""`scjepa replay`: stream a CSV or a benchmark entity's test series through POST /ingest
at a chosen rate, printing each new risk (with the true next-window label when known).

    scjepa replay --file pump.csv --url http://localhost:8000 --rate 200
    scjepa replay --dataset msl --root ~/.cache/scjepa/datasets --entity C-1 --rate 0

A CSV follows :mod:`training.usercsv` (header, delimiter, a timestamp column in seconds
or ISO 8601, optional ``label`` 0/1; empty cells are missing values, which the service
forward-fills). Its channel columns are matched BY NAME to the served model's channels
(``GET /models``) and sent in the model's order; a column the model does not know, or a
model channel the file lacks, is refused (``--by-position`` sends the columns in file
order instead, for a file whose names differ from the training data's). Each request
waits (``?wait=S``) for the scores of the windows it completes. ``--body msgpack``
sends each request's readings as MessagePack columns (docs/reference/api.md), which costs
the service less CPU than JSON: for backfills of many readings a request.
``--report-incidents`` then reports the series' labelled incidents (each run of label 1)
to the service (POST /incidents) and prints what its alerts did about each (warned and
how early, late, missed): the service's early warning on your own labelled history,
judged as live incidents are.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np

from training.errors import DataError, UserError
from training.usercsv import (
    CHANNEL_HINT,
    INFINITY_HINT,
    LABEL_COL,
    ROW_HINT,
    TIMESTAMP_HINT,
    add_table_arguments,
    cell_value,
    cells_problem,
    data_records,
    find_column,
    fits,
    is_missing,
    label_value,
    no_label_column,
    parse_time,
    read_header,
    table_options,
    timestamp_column,
)


@dataclass
class Series:
    name: str
    channels: list[str]
    values: np.ndarray  # (T, V) float, NaN = missing
    ts: np.ndarray  # (T,) seconds, increasing
    labels: np.ndarray | None  # (T,) 0/1 per step


def read_csv(
    path: Path, timestamp_col: str | None = None, label_col: str | None = None
) -> Series:
    """A user's CSV, checked cell by cell with :mod:`training.usercsv`'s rules, as
    the training loader reads it: DataError names the row, its line and the column.
    ``label_col`` None: a column named ``label`` if any; a name given must exist."""
    header, delimiter = read_header(path)
    ts_name = timestamp_column(header, timestamp_col, path)
    label_name = find_column(header, label_col or LABEL_COL)
    if label_col and label_name is None:
        raise no_label_column(label_col, header, path)
    ts_col = header.index(ts_name) if ts_name else None
    label_col_i = header.index(label_name) if label_name else None
    chans = [i for i in range(len(header)) if i not in (ts_col, label_col_i)]
    if not chans:
        raise DataError("no channel columns besides the timestamp and label", file=path)
    rows: list[list[str]] = []
    lines: list[int] = []
    for cells, line in data_records(path, delimiter, len(header)):
        if not fits(cells, len(header)):
            raise DataError(
                cells_problem(len(cells), len(header)),
                file=path,
                row=len(rows) + 1,
                line=line,
                hint=ROW_HINT,
            )
        rows.append(cells)
        lines.append(line)
    if not rows:
        raise DataError("no data rows after the header", file=path)

    def where(r: int, c: int) -> dict[str, Any]:
        return {"file": path, "row": r + 1, "line": lines[r], "column": header[c]}

    def num(cell: str, r: int, c: int) -> float:
        try:
            v = cell_value(cell)
        except ValueError:
            raise DataError(
                f"non-numeric value {cell!r}", **where(r, c), hint=CHANNEL_HINT
            ) from None
        if math.isinf(v):
            raise DataError(
                f"infinite value {cell!r}", **where(r, c), hint=INFINITY_HINT
            )
        return v

    values = np.empty((len(rows), len(chans)), dtype=np.float64)
    ts = np.arange(len(rows), dtype=np.float64)
    labels = np.zeros(len(rows), dtype=np.int8) if label_col_i is not None else None
    for r, row in enumerate(rows):
        values[r] = [num(row[c], r, c) for c in chans]
        if ts_col is not None:
            if is_missing(row[ts_col]):
                raise DataError(
                    "empty timestamp", **where(r, ts_col), hint=TIMESTAMP_HINT
                )
            try:
                ts[r] = parse_time(row[ts_col])
            except ValueError:
                raise DataError(
                    f"{row[ts_col]!r} is not a time",
                    **where(r, ts_col),
                    hint=TIMESTAMP_HINT,
                ) from None
        if labels is not None and label_col_i is not None:
            try:
                labels[r] = label_value(row[label_col_i])
            except ValueError:
                raise DataError(
                    f"label {row[label_col_i]!r}: labels must be 0 or 1",
                    **where(r, label_col_i),
                    hint="1 marks an anomalous row, 0 a normal one",
                ) from None
    order = np.argsort(ts, kind="stable")  # sent in time order, as training reads it
    same = np.flatnonzero(np.diff(ts[order]) == 0)
    if len(same):  # the service takes one reading per stream and time
        a, b = sorted(int(order[k]) for k in (same[0], same[0] + 1))
        assert ts_col is not None  # row numbers never repeat
        raise DataError(
            f"rows {a + 1} and {b + 1} have the same timestamp {rows[a][ts_col]!r}",
            **where(b, ts_col),
            hint="the service keeps one reading per stream and time (the second "
            "would be a duplicate): drop or merge the repeated rows",
        )
    values, ts = values[order], ts[order]
    labels = labels[order] if labels is not None else None
    return Series(path.stem, [header[c] for c in chans], values, ts, labels)


def match_channels(series: Series, model: list[str], source: str) -> Series:
    """The series with its columns in the model's channel order, matched by name;
    refuses names that do not match, saying which."""
    if series.channels == model:
        return series
    unknown = [c for c in series.channels if c not in model]
    missing = [c for c in model if c not in series.channels]
    if unknown or missing:
        parts = []
        if missing:
            parts.append(f"lacks the model's channels {missing[:8]}")
        if unknown:
            parts.append(f"has columns the model does not know {unknown[:8]}")
        hint = (
            "rename the columns, or pass --by-position to send them in file order"
            if len(series.channels) == len(model)
            else f"the file needs the model's {len(model)} channel columns"
        )
        raise UserError(
            f"{source}: {' and '.join(parts)} (the model's channels, in order: "
            f"{model[:8]}{' ...' if len(model) > 8 else ''}); hint: {hint}"
        )
    order = [series.channels.index(c) for c in model]
    series.values, series.channels = series.values[:, order], list(model)
    return series


def read_dataset(
    name: str, root: Path | None, entity: str | None, **options: Any
) -> Series:
    """An entity's test series of a data set; ``options``: the loader's keywords
    (``--dataset csv``'s, :func:`training.usercsv.table_options`)."""
    # the loaders need pandas (the train extra): imported here, so that `--file` runs
    # where only the service is installed
    from training.data import load_dataset

    ds = load_dataset(name, root, **options)
    ents = [e for e in ds.entities if e.test is not None]
    if entity is not None:
        ents = [e for e in ents if e.name == entity]
        if not ents:
            names = ", ".join(e.name for e in ds.entities[:10])
            raise ValueError(f"{name}: no entity {entity!r} (e.g. {names})")
    if not ents:
        raise ValueError(f"{name}: no entity with a labelled test series to replay")
    e = ents[0]
    assert e.test is not None
    now = float(int(time.time()))
    ts = now + np.arange(len(e.test), dtype=np.float64)
    return Series(f"{name}-{e.name}", ds.channels, e.test, ts, e.labels)


def json_values(row: Iterable[float]) -> list[float | None]:
    """One reading's values as JSON: NaN (missing) -> null."""
    return [None if math.isnan(v) else float(v) for v in row]


def _request(
    stream: str, series: Series, lo: int, hi: int, body: str
) -> dict[str, Any]:
    """httpx keywords for POST /ingest of readings lo..hi-1 in the ``body`` format."""
    if body == "msgpack":
        packed = {
            "stream": stream,
            "ts": np.asarray(series.ts[lo:hi], dtype="<f8").tobytes(),
            "values": np.asarray(series.values[lo:hi], dtype="<f4").tobytes(),
        }
        return {
            "content": msgspec.msgpack.encode(packed),
            "headers": {"content-type": "application/msgpack"},
        }
    readings = [
        {"ts": float(series.ts[i]), "values": json_values(series.values[i])}
        for i in range(lo, hi)
    ]
    return {"json": {"stream": stream, "readings": readings}, "headers": {}}


def _scored(
    client: httpx.Client,
    stream: str,
    res: dict[str, Any],
    owed: int,
    last: int,
    headers: dict[str, str] | None,
) -> list[dict[str, Any]]:
    """The scored windows after window ``last`` that an ingest answer ``res`` reports,
    oldest first. The answer carries the latest one only: when more are owed (a
    request that completes several windows, at a hop below its batch, or windows an
    earlier answer's wait left unscored), they are read from the stream's history."""
    if owed <= 1:
        recs = [{"n": res["window_n"]} | res]
    else:
        r = client.get(
            f"/risk/{stream}/history",
            params={"limit": min(owed, 10_000)},
            headers=headers,
        )
        if r.status_code != 200:
            raise RuntimeError(
                f"GET /risk/{stream}/history -> {r.status_code}: {r.text[:500]}"
            )
        recs = r.json()["items"]
    return [
        {"n": x["n"], "ts": x["window_end"], "risk": x["risk"], "alert": x["alert"],
         "label": None}
        for x in sorted(recs, key=lambda x: int(x["n"]))
        if x["n"] > last
    ]  # fmt: skip


def replay(
    client: httpx.Client,
    series: Series,
    *,
    stream: str,
    window: int,
    batch: int = 10,
    rate: float = 0.0,
    headers: dict[str, str] | None = None,
    wait: float = 30.0,
    out: Callable[[str], None] = print,
    body: str = "json",
) -> list[dict[str, Any]]:
    """POST the series in requests of ``batch`` readings at ``rate`` readings/s (0 = as
    fast as the service answers), each waiting up to ``wait`` s for its windows'
    scores; returns one dict per new risk. ``window``: the model's window (its
    manifest's), for the next-window label printed beside a risk. ``body``: "json",
    or "msgpack" for the same readings as MessagePack columns."""
    seen: list[dict[str, Any]] = []
    owed = 0  # windows queued and not printed yet
    counts = {"accepted": 0, "duplicates": 0, "rejected": 0}
    reasons: set[str] = set()
    start = time.monotonic()
    for lo in range(0, len(series.values), batch):
        hi = min(lo + batch, len(series.values))
        if rate > 0:
            time.sleep(max(0.0, start + lo / rate - time.monotonic()))
        req = _request(stream, series, lo, hi, body)
        req["headers"] = (headers or {}) | req["headers"]
        r = client.post("/ingest", **req, params={"wait": wait})
        if r.status_code != 200:
            raise RuntimeError(f"POST /ingest -> {r.status_code}: {r.text[:500]}")
        res = r.json()["results"][0]
        for k in counts:
            counts[k] += int(res.get(k) or 0)
        if res.get("rejected_reason"):
            reasons.add(str(res["rejected_reason"]))
        owed += res["windows_queued"]
        if not res["windows_scored"]:
            continue
        last = seen[-1]["n"] if seen else 0
        for rec in _scored(client, stream, res, owed, last, headers):
            n = rec["n"]  # the window ends at the stream's reading n
            alert = "  ALERT" if rec["alert"] else ""
            line = f"{rec['ts']:.3f}  n={n:>7}  risk={rec['risk']:.4f}{alert}"
            if series.labels is not None and n < len(series.labels):
                rec["label"] = int(series.labels[n : n + window].max())  # next window
                line += f"  next-window label={rec['label']}"
            seen.append(rec)
            owed = max(0, owed - 1)
            out(line)
    sent = len(series.values)
    line = (
        f"sent {sent} readings: {counts['accepted']} accepted, "
        f"{counts['duplicates']} duplicates, {counts['rejected']} rejected"
        + (f" ({'; '.join(sorted(reasons))})" if reasons else "")
        + f"; {len(seen)} scored windows printed"
    )
    out(line)
    if sent and not counts["accepted"]:
        out(
            f"note: the service kept none of them: stream {stream!r} already holds "
            "readings at or after these times (a replay sent before); replay under "
            "another --stream name"
        )
    return seen


def incidents_of(series: Series) -> list[tuple[int, int]]:
    """The series' incidents: (first, last) reading of each run of label 1."""
    if series.labels is None:
        return []
    labels = np.asarray(series.labels[: len(series.values)], dtype=np.int8)
    edges = np.flatnonzero(np.diff(np.r_[0, labels, 0]))
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def report_incidents(
    client: httpx.Client,
    series: Series,
    *,
    stream: str,
    headers: dict[str, str] | None = None,
    out: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """POST each of the series' incidents (:func:`incidents_of`) to the service,
    replayed before; print and return what it judged of each."""
    got = []
    for a, b in incidents_of(series):
        body = {"stream": stream, "start": float(series.ts[a]),
                "end": float(series.ts[b])}  # fmt: skip
        r = client.post("/incidents", json=body, headers=headers)
        if r.status_code != 200:
            raise RuntimeError(f"POST /incidents -> {r.status_code}: {r.text[:500]}")
        inc = r.json()
        got.append(inc)
        how = inc["outcome"]
        if inc.get("lead_readings") is not None:
            how += f", {inc['lead_readings']} readings ahead"
        elif inc.get("delay_readings") is not None:
            how += f", {inc['delay_readings']} readings after the onset"
        out(f"incident at readings {a}-{b} ({body['start']:.3f}): {how}")
    judged = [i for i in got if i["outcome"] in ("warned", "late", "missed")]
    warned = [i["lead_readings"] for i in judged if i["outcome"] == "warned"]
    line = f"{len(warned)} of {len(judged)} incidents judged were warned of"
    if warned:
        line += f" (median lead {float(np.median(warned)):g} readings)"
    if len(judged) < len(got):
        line += f"; {len(got) - len(judged)} could not be judged (unscored, unknown)"
    out(line)
    return got


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--file", type=Path, help="CSV with a header (timestamp/label optional)"
    )
    src.add_argument(
        "--dataset", help="benchmark name (msl, smd, ...): an entity's test series"
    )
    p.add_argument("--root", type=Path, help="data folder for --dataset")
    p.add_argument("--entity", help="entity of --dataset (default: the first)")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="service base URL")
    p.add_argument("--stream", help="stream id (default: derived from the source)")
    p.add_argument(
        "--rate", type=float, default=100.0, help="readings per second (0 = max)"
    )
    p.add_argument("--batch", type=int, default=10, help="readings per request")
    p.add_argument("--limit", type=int, help="replay only the first N readings")
    p.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds each request waits for its windows' scores (?wait=)",
    )
    p.add_argument(
        "--by-position",
        action="store_true",
        help="send the columns in file order, ignoring their names",
    )
    p.add_argument("--api-key", help="sent as X-API-Key")
    p.add_argument(
        "--report-incidents",
        action="store_true",
        help="then report the series' labelled incidents (runs of label 1) to the "
        "service (POST /incidents) and print whether its alerts warned of each",
    )
    p.add_argument(
        "--body",
        choices=("json", "msgpack"),
        default="json",
        help="request body: JSON, or MessagePack columns (less service CPU a reading)",
    )
    # --file reads --timestamp-col and --label-col; --dataset csv all of them
    add_table_arguments(p)


def run(args: argparse.Namespace) -> int:
    if args.batch < 1 or args.wait < 0 or (args.limit is not None and args.limit < 1):
        raise UserError("--batch and --limit must be >= 1, --wait >= 0")
    if args.file and args.entity_col:
        raise UserError(
            "--entity-col: --file replays one series; give the file of one entity, "
            "or use --dataset csv --root FILE --entity-col COL --entity NAME"
        )
    try:
        series = (
            read_csv(args.file, args.timestamp_col, args.label_col)
            if args.file
            else read_dataset(
                args.dataset,
                args.root,
                args.entity,
                **table_options(args, args.dataset),
            )
        )
    except (OSError, ValueError) as e:
        raise UserError(str(e)) from None
    if args.limit:
        series.values, series.ts = series.values[: args.limit], series.ts[: args.limit]
    headers = {"X-API-Key": args.api_key} if args.api_key else None
    stream = args.stream or "".join(
        c if c.isalnum() or c in "._:-" else "-" for c in series.name
    )
    source = str(args.file or f"{args.dataset}/{series.name}")
    if args.report_incidents and series.labels is None:
        raise UserError(
            f"--report-incidents: {source} has no labels (a 'label' column, or "
            "--label-col) to take the incidents from"
        )
    with httpx.Client(base_url=args.url, timeout=30.0 + args.wait) as client:
        try:
            r = client.get("/models", headers=headers)
            r.raise_for_status()
            m = r.json()["models"][0]["manifest"]
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
            raise UserError(f"cannot read {args.url}/models ({e})") from None
        model, n_source = f"{m['name']} {m['version']}", series.values.shape[1]
        if args.by_position:
            if m["n_channels"] != n_source:
                raise UserError(
                    f"{source}: {n_source} channels, the model {m['name']} expects "
                    f"{m['n_channels']}"
                )
        else:
            series = match_channels(series, list(m["channels"]), source)
        print(
            f"replaying {len(series.values)} readings of {series.name} as stream "
            f"{stream!r} into {model} at {args.rate or 'max'} readings/s"
        )
        try:
            replay(
                client,
                series,
                stream=stream,
                window=m["window"],
                batch=args.batch,
                rate=args.rate,
                headers=headers,
                wait=args.wait,
                body=args.body,
            )
            if args.report_incidents:
                report_incidents(client, series, stream=stream, headers=headers)
        except (httpx.HTTPError, RuntimeError) as e:
            print(f"scjepa replay: error: {e}", file=sys.stderr)
            return 1
    return 0
