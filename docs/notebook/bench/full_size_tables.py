"""Write PSM- and SWaT-shaped files at the public releases' full size, with their quirks,
to check that the whole pipeline (pretrain, evaluate, export) runs on them within
a CPU's time and memory. The numbers are synthetic: no figure of merit from them
means anything about the real data (results-notes.md, 2026-11-29, twenty-first
session).

    python docs/notebook/bench/full_size_tables.py DEST   # DEST/PSM, DEST/SWaT

Sizes and quirks of the public releases:
- PSM: train 132,481 x 25, test 87,841 x 25 (27.8 % anomalous), a
  ``timestamp_(min)`` column; the train file has NaN cells.
- SWaT (the iTrust CSV export): Normal 495,000 rows, Attack 449,919 rows, 51
  sensors and actuators (11.98 % attack rows in 36 runs), a junk line above the
  header, names padded with spaces, ``A ttack`` for some labels, actuators that
  take two or three values, channels constant over the whole train file.
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.signal import lfilter


def signals(rng: np.random.Generator, n: int, v: int) -> np.ndarray:
    """(n, v): each channel a daily-ish cycle, an AR(1) wander and noise."""
    t = np.arange(n)[:, None]
    period = rng.uniform(200, 3000, v)
    x = np.sin(2 * np.pi * t / period + rng.uniform(0, 6.3, v))
    walk = lfilter([1.0], [1.0, -0.999], rng.normal(0, 0.05, (n, v)), axis=0)
    return x + walk + rng.normal(0, 0.1, (n, v))


def incidents(
    rng: np.random.Generator, x: np.ndarray, n_runs: int, share: float
) -> np.ndarray:
    """Shift a few channels in ``n_runs`` runs covering ``share`` of the rows, each
    run announced by a 200-step ramp on one of them; returns the 0/1 labels."""
    n, v = x.shape
    labels = np.zeros(n, dtype=np.int8)
    mean_len = int(share * n / n_runs)
    starts = np.sort(
        rng.choice(np.arange(1000, n - 2 * mean_len), n_runs, replace=False)
    )
    for s in starts:
        length = int(rng.uniform(0.3, 1.7) * mean_len)
        chans = rng.choice(v, size=max(1, v // 8), replace=False)
        x[s - 200 : s, chans[0]] += np.linspace(0, 1.5, 200)
        x[s : s + length, chans] += rng.choice([-3, 3], len(chans))
        labels[s : s + length] = 1
    return labels


def write_psm(dest: Path, rng: np.random.Generator) -> None:
    base = dest / "PSM"
    base.mkdir(parents=True, exist_ok=True)
    cols = [f"feature_{i}" for i in range(25)]
    n_tr, n_te = 132_481, 87_841
    x = signals(rng, n_tr + n_te, 25)
    labels = incidents(rng, x[n_tr:], 72, 0.278)
    x[n_tr:, 7] = x[n_tr:, 7].round(1)  # a coarse-grained feature
    tr = pd.DataFrame(x[:n_tr], columns=cols)
    tr.iloc[rng.choice(n_tr, 500, replace=False), rng.choice(25, 500)] = np.nan
    tr.insert(0, "timestamp_(min)", np.arange(n_tr, dtype=float))
    te = pd.DataFrame(x[n_tr:], columns=cols)
    stamps = np.arange(n_tr, n_tr + n_te, dtype=float)
    te.insert(0, "timestamp_(min)", stamps)
    tr.to_csv(base / "train.csv", index=False, float_format="%.6f")
    te.to_csv(base / "test.csv", index=False, float_format="%.6f")
    pd.DataFrame({"timestamp_(min)": stamps, "label": labels}).to_csv(
        base / "test_label.csv", index=False
    )
    print(f"{base}: {n_tr} + {n_te} rows, {labels.mean():.3f} anomalous")


def write_swat(dest: Path, rng: np.random.Generator) -> None:
    base = dest / "SWaT"
    base.mkdir(parents=True, exist_ok=True)
    n_tr, n_te, v = 495_000, 449_919, 51
    x = signals(rng, n_tr + n_te, v)
    labels = incidents(rng, x[n_tr:], 36, 0.1198)
    actuators = rng.choice(v, 25, replace=False)  # states 1, 2 (and 0)
    x[:, actuators] = np.clip(np.round(1.5 + x[:, actuators] / 2), 0, 2)
    constant = actuators[:4]  # never moves in the normal run
    x[:n_tr, constant] = 1.0
    names = [f"S{i:03d}" for i in range(v)]
    t0 = pd.Timestamp("2015-12-22 16:00:00")
    for path, rows, lab in (
        (base / "SWaT_Dataset_Normal_v1.csv", slice(0, n_tr), None),
        (base / "SWaT_Dataset_Attack_v0.csv", slice(n_tr, n_tr + n_te), labels),
    ):
        block = x[rows]
        stamps = pd.date_range(t0, periods=len(block), freq="s").strftime(
            " %d/%m/%Y %I:%M:%S %p"
        )
        df = pd.DataFrame(block, columns=[f" {s}" for s in names])
        df.insert(0, " Timestamp", stamps)
        text = np.where(lab == 1, "Attack", "Normal") if lab is not None else "Normal"
        df["Normal/Attack"] = text
        if lab is not None:  # the misspelling of some releases
            hit = np.flatnonzero(lab)[:500]
            df.loc[hit, "Normal/Attack"] = "A ttack"
        with path.open("w") as f:
            f.write(",,,,\n")
            df.to_csv(f, index=False, float_format="%.6f")
        t0 += pd.Timedelta(seconds=len(block))
    print(f"{base}: {n_tr} + {n_te} rows, {labels.mean():.4f} attack")


if __name__ == "__main__":
    dest = Path(sys.argv[1])
    rng = np.random.default_rng(0)
    write_psm(dest, rng)
    write_swat(dest, rng)
