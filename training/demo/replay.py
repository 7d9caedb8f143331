"""`scjepa replay`: stream a CSV or a benchmark entity's test series through POST /ingest
at a chosen rate, printing each new risk (with the true next-window label when known).

    scjepa replay --file pump.csv --url http://localhost:8000 --rate 200
    scjepa replay --dataset msl --root ~/.cache/scjepa/datasets --entity C-1 --rate 0

A CSV has a header; a ``timestamp``/``ts`` column (seconds) and a ``label`` column (0/1)
are optional, every other column is a channel in the model's order; empty cells are
missing values (the service forward-fills them).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np


@dataclass
class Series:
    name: str
    channels: list[str]
    values: np.ndarray  # (T, V) float, NaN = missing
    ts: np.ndarray  # (T,) seconds, increasing
    labels: np.ndarray | None  # (T,) 0/1 per step


def read_csv(path: Path) -> Series:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise ValueError(f"{path}: needs a header and at least one data row")
    header = [h.strip() for h in rows[0]]
    lower = [h.lower() for h in header]
    ts_col = next((i for i, h in enumerate(lower) if h in ("timestamp", "ts")), None)
    label_col = lower.index("label") if "label" in lower else None
    chans = [i for i in range(len(header)) if i not in (ts_col, label_col)]

    def num(cell: str, r: int, c: int) -> float:
        try:
            return float(cell) if cell.strip() else math.nan
        except ValueError:
            raise ValueError(
                f"{path}: non-numeric value {cell!r} in column {header[c]!r}, data row {r + 1}"
            ) from None

    data = [
        [num(row[c], r, c) for c in range(len(header))]
        for r, row in enumerate(rows[1:])
    ]
    arr = np.array(data, dtype=np.float64)
    ts = arr[:, ts_col] if ts_col is not None else np.arange(len(arr), dtype=np.float64)
    labels = arr[:, label_col].astype(np.int8) if label_col is not None else None
    return Series(path.stem, [header[c] for c in chans], arr[:, chans], ts, labels)


def read_dataset(name: str, root: Path | None, entity: str | None) -> Series:
    # the loaders need pandas (the train extra): imported here, so that `--file` runs
    # where only the service is installed
    from training.data import load_dataset

    ds = load_dataset(name, root)
    ents = [e for e in ds.entities if e.test is not None]
    if entity is not None:
        ents = [e for e in ents if e.name == entity]
        if not ents:
            names = ", ".join(e.name for e in ds.entities[:10])
            raise ValueError(f"{name}: no entity {entity!r} (e.g. {names})")
    e = ents[0]
    assert e.test is not None
    now = float(int(time.time()))
    ts = now + np.arange(len(e.test), dtype=np.float64)
    return Series(f"{name}-{e.name}", ds.channels, e.test, ts, e.labels)


def json_values(row: Iterable[float]) -> list[float | None]:
    """One reading's values as JSON: NaN (missing) -> null."""
    return [None if math.isnan(v) else float(v) for v in row]


def replay(
    client: httpx.Client,
    series: Series,
    *,
    stream: str,
    window: int,
    batch: int = 10,
    rate: float = 0.0,
    headers: dict[str, str] | None = None,
    out: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """POST the series in requests of ``batch`` readings at ``rate`` readings/s (0 = as
    fast as the service answers); returns one dict per new risk. ``window``: the
    model's window (its manifest's), for the next-window label printed beside a risk."""
    seen: list[dict[str, Any]] = []
    start = time.monotonic()
    for lo in range(0, len(series.values), batch):
        hi = min(lo + batch, len(series.values))
        if rate > 0:
            time.sleep(max(0.0, start + lo / rate - time.monotonic()))
        body = {
            "stream": stream,
            "readings": [
                {"ts": float(series.ts[i]), "values": json_values(series.values[i])}
                for i in range(lo, hi)
            ],
        }
        r = client.post("/ingest", json=body, headers=headers)
        if r.status_code != 200:
            raise RuntimeError(f"POST /ingest -> {r.status_code}: {r.text[:500]}")
        res = r.json()["results"][0]
        if not res["windows_scored"]:
            continue
        n = res["window_n"]  # the latest scored window ends at the stream's reading n
        rec: dict[str, Any] = {"n": n, "ts": res["window_end"], "risk": res["risk"]}
        rec |= {"alert": res["alert"], "label": None}
        alert = "  ALERT" if res["alert"] else ""
        line = f"{rec['ts']:.3f}  n={n:>7}  risk={res['risk']:.4f}{alert}"
        if series.labels is not None and n < len(series.labels):
            rec["label"] = int(series.labels[n : n + window].max())  # next window
            line += f"  next-window label={rec['label']}"
        seen.append(rec)
        out(line)
    return seen


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
    p.add_argument("--api-key", help="sent as X-API-Key")


def run(args: argparse.Namespace) -> int:
    try:
        series = (
            read_csv(args.file)
            if args.file
            else read_dataset(args.dataset, args.root, args.entity)
        )
    except (OSError, ValueError) as e:
        print(f"scjepa replay: error: {e}", file=sys.stderr)
        return 2
    if args.limit:
        series.values, series.ts = series.values[: args.limit], series.ts[: args.limit]
    headers = {"X-API-Key": args.api_key} if args.api_key else None
    stream = args.stream or "".join(
        c if c.isalnum() or c in "._:-" else "-" for c in series.name
    )
    with httpx.Client(base_url=args.url, timeout=30.0) as client:
        try:
            models = client.get("/models", headers=headers).json()["models"]
        except (httpx.HTTPError, KeyError, ValueError) as e:
            print(
                f"scjepa replay: error: cannot read {args.url}/models ({e})",
                file=sys.stderr,
            )
            return 2
        m = models[0]["manifest"]
        model, n_source = f"{m['name']} {m['version']}", series.values.shape[1]
        if m["n_channels"] != n_source:
            print(
                f"scjepa replay: error: the source has {n_source} channels, "
                f"the model {m['name']} expects {m['n_channels']}",
                file=sys.stderr,
            )
            return 2
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
            )
        except (httpx.HTTPError, RuntimeError) as e:
            print(f"scjepa replay: error: {e}", file=sys.stderr)
            return 1
    return 0
