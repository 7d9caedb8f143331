"""Fixtures shared by the data and evaluation rooms: SKAB and Daphnet written in their
public layouts (the loaders and the folds they split into are tested on these)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SKAB_COLUMNS = [
    "Accelerometer1RMS",
    "Accelerometer2RMS",
    "Current",
    "Pressure",
    "Temperature",
    "Thermocouple",
    "Voltage",
    "Volume Flow RateRMS",
]


def skab_run(
    rng: np.random.Generator, n: int, onset: int | None, stop: int | None
) -> pd.DataFrame:
    """One SKAB file: datetime (1 s, one 2 s step), 8 channels, anomaly, changepoint."""
    t = pd.Timestamp("2020-03-09 10:14:33") + pd.to_timedelta(
        np.arange(n) + (np.arange(n) > n // 3), unit="s"
    )
    df = pd.DataFrame(rng.normal(size=(n, 8)), columns=SKAB_COLUMNS)
    df.insert(0, "datetime", t.strftime("%Y-%m-%d %H:%M:%S"))
    if onset is not None:
        lab = np.zeros(n, dtype=int)
        lab[onset:stop] = 1
        cp = np.zeros(n, dtype=int)
        cp[onset] = 1
        if stop is not None and stop < n:
            cp[stop] = 1
        df["anomaly"] = lab.astype(float)  # the real files write 0.0 / 1.0
        df["changepoint"] = cp.astype(float)
    return df


SKAB_RUNS = {"valve1": range(6), "valve2": range(2), "other": range(1, 4)}


def write_skab(root: Path, rng: np.random.Generator) -> Path:
    """SKAB/data/{valve1,valve2,other}/<n>.csv (11 runs) and the anomaly-free run."""
    base = root / "SKAB" / "data"
    (base / "anomaly-free").mkdir(parents=True)
    skab_run(rng, 2500, None, None).to_csv(
        base / "anomaly-free" / "anomaly-free.csv", sep=";", index=False
    )
    for group, numbers in SKAB_RUNS.items():
        (base / group).mkdir()
        for k in numbers:
            onset = 250 + 7 * k
            stop = (
                None if (group, k) == ("other", 3) else onset + 90
            )  # one runs to the end
            skab_run(rng, 420 + 5 * k, onset, stop).to_csv(
                base / group / f"{k}.csv", sep=";", index=False
            )
    return root


DAPHNET_RUNS = {  # recording: (rows, experiment rows [lo, hi), freezes [on, off))
    "S01R01": (1500, [(100, 1400)], [(500, 560), (900, 1000)]),
    "S01R02": (900, [(0, 850)], [(300, 340)]),
    "S02R01": (
        1600,
        [(200, 700), (800, 1550)],
        [(400, 450), (1000, 1100), (1300, 1320)],
    ),
    "S03R01": (1000, [(50, 950)], []),  # a subject who never froze
}


def write_daphnet(root: Path, rng: np.random.Generator) -> Path:
    """daphnet/dataset/S<ss>R<rr>.txt: time (ms), 9 acceleration columns, annotation."""
    base = root / "daphnet" / "dataset"
    base.mkdir(parents=True)
    for rec, (n, exp, freezes) in DAPHNET_RUNS.items():
        ann = np.zeros(n, dtype=int)
        for lo, hi in exp:
            ann[lo:hi] = 1
        for lo, hi in freezes:
            ann[lo:hi] = 2
        t = (np.arange(n) * 15.625).astype(int)
        acc = rng.integers(-1000, 1000, size=(n, 9))
        np.savetxt(base / f"{rec}.txt", np.column_stack([t, acc, ann]), fmt="%d")
    return root


@pytest.fixture
def skab_root(tmp_path: Path, rng: np.random.Generator) -> Path:
    return write_skab(tmp_path, rng)


@pytest.fixture
def daphnet_root(tmp_path: Path, rng: np.random.Generator) -> Path:
    return write_daphnet(tmp_path, rng)
