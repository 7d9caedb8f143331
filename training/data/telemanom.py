"""MSL and SMAP in the telemanom layout (NASA/JPL).

    ROOT/telemanom/train/<chan>.npy    (T, 55) float64, column 0 telemetry, rest command flags
    ROOT/telemanom/test/<chan>.npy
    ROOT/telemanom/labeled_anomalies.csv   chan_id, spacecraft, anomaly_sequences, class, num_values

``anomaly_sequences`` are inclusive [start, end] ranges into the channel's test array.
One entity per channel file, sorted by chan_id (the usual concatenation order).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from training.data.io import fill_nans, load_npy, read_table
from training.data.types import Dataset, Entity
from training.errors import DataError

SPACECRAFT = {"msl": "MSL", "smap": "SMAP"}


def _ranges(text: str, where: str) -> list[tuple[int, int]]:
    try:
        ranges = ast.literal_eval(text)
        return [(int(s), int(e)) for s, e in ranges]
    except (ValueError, SyntaxError, TypeError) as e:
        raise DataError(f"{where}: bad anomaly_sequences {text!r} ({e})") from None


def load_telemanom(root: Path, name: str = "msl") -> Dataset:
    """Load MSL or SMAP (``name``) from ``root`` (which holds ``telemanom/``, or is it)."""
    base = root / "telemanom" if (root / "telemanom").is_dir() else root
    csv = base / "labeled_anomalies.csv"
    table = read_table(csv)
    missing = {"chan_id", "spacecraft", "anomaly_sequences"} - set(table.columns)
    if missing:
        raise DataError(f"{csv}: missing columns {sorted(missing)}")
    rows = table[table["spacecraft"] == SPACECRAFT[name]]
    if rows.empty:
        raise DataError(f"{csv}: no rows with spacecraft == {SPACECRAFT[name]!r}")

    # Known quirk: a channel can be listed more than once (P-2 in SMAP, with two
    # different ranges). Keep one entity and label the union of the listed ranges.
    notes, ranges = [], {}
    for chan, group in rows.groupby("chan_id", sort=True):
        if len(group) > 1:
            notes.append(
                f"{chan} listed {len(group)} times in {csv.name}: ranges merged"
            )
        ranges[chan] = [
            r
            for text in group["anomaly_sequences"]
            for r in _ranges(text, f"{csv} {chan}")
        ]

    entities, n_cols = [], None
    for chan, spans in ranges.items():
        tr_path, te_path = base / "train" / f"{chan}.npy", base / "test" / f"{chan}.npy"
        train, n_tr = fill_nans(load_npy(tr_path), tr_path)
        test, n_te = fill_nans(load_npy(te_path), te_path)
        if n_cols is None:
            n_cols = train.shape[1]
        for path, arr in ((tr_path, train), (te_path, test)):
            if arr.shape[1] != n_cols:
                raise DataError(f"{path}: {arr.shape[1]} columns, expected {n_cols}")
        labels = np.zeros(len(test), dtype=np.int8)
        for start, end in spans:
            if not 0 <= start <= end < len(test):
                raise DataError(
                    f"{csv}: range [{start}, {end}] of {chan} outside its test series "
                    f"of {len(test)} steps"
                )
            labels[start : end + 1] = 1  # inclusive ranges
        entities.append(Entity(chan, train, test, labels, imputed=n_tr + n_te))

    assert n_cols is not None
    channels = ["telemetry"] + [f"cmd_{i}" for i in range(1, n_cols)]
    return Dataset(name, channels, entities, notes=notes)
