"""SMD (Server Machine Dataset) in the OmniAnomaly layout.

    ROOT/ServerMachineDataset/{train,test,test_label}/machine-G-I.txt

Comma-separated, no header, 38 columns min-max scaled by the dataset's authors; one 0/1
label per line; one row per minute. One entity per machine in ``train/`` (SMD-19 or the
full 28), in natural order (machine-1-2 before machine-1-10). A machine with a test file
but no train file, and a row with fewer cells than the file's first (a truncated copy),
are refused rather than left out or forward-filled.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from training.data.io import (
    check_labels,
    fill_nans,
    numeric,
    read_table,
    refuse_short_rows,
)
from training.data.types import Dataset, Entity
from training.errors import DataError


def _natural(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", name))


def load_smd(root: Path, name: str = "smd") -> Dataset:
    base = (
        root / "ServerMachineDataset"
        if (root / "ServerMachineDataset").is_dir()
        else root
    )
    train_dir = base / "train"
    files = sorted(train_dir.glob("machine-*.txt"), key=lambda p: _natural(p.stem))
    if not files:
        raise DataError(
            f"{train_dir}: no machine-*.txt files (expected the SMD layout)"
        )

    # a machine with test files but no train file would be left out silently
    have = {f.name for f in files}
    if orphans := sorted(
        (p.name for p in (base / "test").glob("machine-*.txt") if p.name not in have),
        key=lambda n: _natural(Path(n).stem),
    ):
        raise DataError(
            f"{train_dir / orphans[0]}: file not found (its test file is in "
            f"{base / 'test'}"
            + (f"; {len(orphans) - 1} more machines too" if len(orphans) > 1 else "")
            + ")"
        )

    def series(path: Path) -> tuple[np.ndarray, int]:
        df = read_table(path, header=None)
        refuse_short_rows(df, path)
        return fill_nans(numeric(df, path), path)

    entities, n_cols = [], None
    for f in files:
        paths = {s: base / s / f.name for s in ("train", "test", "test_label")}
        train, n_tr = series(paths["train"])
        test, n_te = series(paths["test"])
        n_cols = n_cols or train.shape[1]
        for s in ("train", "test"):
            arr = train if s == "train" else test
            if arr.shape[1] != n_cols:
                raise DataError(
                    f"{paths[s]}: {arr.shape[1]} columns, expected {n_cols}"
                )
        raw = numeric(read_table(paths["test_label"], header=None), paths["test_label"])
        if raw.shape[1] != 1:
            raise DataError(
                f"{paths['test_label']}: expected one label per line, got {raw.shape[1]} columns"
            )
        labels = check_labels(raw[:, 0], len(test), paths["test_label"])
        entities.append(Entity(f.stem, train, test, labels, imputed=n_tr + n_te))

    assert n_cols is not None
    return Dataset(
        name,
        [f"dim_{i}" for i in range(1, n_cols + 1)],
        entities,
        steps_per_day=1440.0,  # one reading per minute
    )
