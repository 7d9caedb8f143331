"""Writers of small files in each public layout, so every loader is tested without data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest


def write_telemanom(root: Path, rng: np.random.Generator) -> Path:
    base = root / "telemanom"
    for s in ("train", "test"):
        (base / s).mkdir(parents=True)
    rows = []
    for chan, craft, n_test, spans in [
        ("A-1", "MSL", 450, [[120, 180]]),
        ("B-1", "MSL", 380, [[10, 20], [300, 340]]),
        ("P-2", "SMAP", 500, [[350, 420]]),
        ("P-2", "SMAP", 500, [[300, 360]]),  # the real csv lists P-2 twice
    ]:
        x_tr = np.column_stack(
            [rng.normal(size=420), rng.integers(0, 2, 420), np.zeros(420)]
        )
        x_te = np.column_stack(
            [rng.normal(size=n_test), rng.integers(0, 2, n_test), np.zeros(n_test)]
        )
        np.save(base / "train" / f"{chan}.npy", x_tr)
        np.save(base / "test" / f"{chan}.npy", x_te)
        rows.append(
            {
                "chan_id": chan,
                "spacecraft": craft,
                "anomaly_sequences": str(spans),
                "class": "[point]",
                "num_values": n_test,
            }
        )
    pd.DataFrame(rows).to_csv(base / "labeled_anomalies.csv", index=False)
    return root


def write_smd(
    root: Path,
    rng: np.random.Generator,
    machines=("machine-1-1", "machine-1-10", "machine-1-2"),
) -> Path:
    base = root / "ServerMachineDataset"
    for s in ("train", "test", "test_label"):
        (base / s).mkdir(parents=True)
    for m in machines:
        np.savetxt(
            base / "train" / f"{m}.txt", rng.random((350, 4)), delimiter=",", fmt="%.6f"
        )
        np.savetxt(
            base / "test" / f"{m}.txt", rng.random((330, 4)), delimiter=",", fmt="%.6f"
        )
        lab = np.zeros(330, dtype=int)
        lab[200:260] = 1
        np.savetxt(base / "test_label" / f"{m}.txt", lab, fmt="%d")
    return root


def write_psm(root: Path, rng: np.random.Generator) -> Path:
    base = root / "PSM"
    base.mkdir(parents=True)
    cols = [f"feature_{i}" for i in range(25)]
    tr = pd.DataFrame(rng.random((600, 25)), columns=cols)
    tr.iloc[5, 3] = np.nan  # the real train file has NaNs
    tr.iloc[0, 7] = np.nan  # a leading NaN
    tr.insert(0, "timestamp_(min)", np.arange(600.0))
    te = pd.DataFrame(rng.random((500, 25)), columns=cols)
    te.insert(0, "timestamp_(min)", np.arange(600.0, 1100.0))
    lab = np.zeros(500, dtype=int)
    lab[250:330] = 1
    tr.to_csv(base / "train.csv", index=False)
    te.to_csv(base / "test.csv", index=False)
    pd.DataFrame({"timestamp_(min)": te["timestamp_(min)"], "label": lab}).to_csv(
        base / "test_label.csv", index=False
    )
    return root


def write_swat(root: Path, rng: np.random.Generator) -> Path:
    base = root / "SWaT"
    base.mkdir(parents=True)
    sensors = ["FIT101", "LIT101", "MV101", "P101"] + [f"S{i}" for i in range(47)]  # 51

    def frame(n: int, labels: list[str]) -> str:
        head = ",".join([" Timestamp"] + [f" {s}" for s in sensors] + ["Normal/Attack"])
        lines = [",,,,", head]  # junk line above the header, padded names
        for i in range(n):
            vals = ",".join(f"{v:.4f}" for v in rng.random(len(sensors)))
            lines.append(
                f" 28/12/2015 10:{i // 60:02d}:{i % 60:02d} AM,{vals},{labels[i]}"
            )
        return "\n".join(lines) + "\n"

    (base / "SWaT_Dataset_Normal_v1.csv").write_text(frame(300, ["Normal"] * 300))
    test_labels = (
        ["Normal"] * 120 + ["Attack"] * 40 + ["A ttack"] * 10 + ["Normal"] * 130
    )
    (base / "SWaT_Dataset_Attack_v0.csv").write_text(frame(300, test_labels))
    return root


@pytest.fixture
def telemanom_root(tmp_path: Path, rng: np.random.Generator) -> Path:
    return write_telemanom(tmp_path, rng)


@pytest.fixture
def smd_root(tmp_path: Path, rng: np.random.Generator) -> Path:
    return write_smd(tmp_path, rng)


@pytest.fixture
def psm_root(tmp_path: Path, rng: np.random.Generator) -> Path:
    return write_psm(tmp_path, rng)


@pytest.fixture
def swat_root(tmp_path: Path, rng: np.random.Generator) -> Path:
    return write_swat(tmp_path, rng)
