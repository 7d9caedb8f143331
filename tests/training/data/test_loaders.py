"""Each loader on small files in its public format, and the bad inputs it must refuse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.data import load_dataset
from training.errors import DataError


def test_msl_filters_spacecraft_and_inclusive_ranges(telemanom_root: Path) -> None:
    ds = load_dataset("msl", telemanom_root)
    assert [e.name for e in ds.entities] == ["A-1", "B-1"]
    a1 = ds.entities[0]
    assert a1.test.shape == (450, 3) and a1.train.dtype == np.float32
    assert (
        a1.labels[119] == 0
        and a1.labels[120] == 1
        and a1.labels[180] == 1
        and a1.labels[181] == 0
    )
    assert ds.entities[1].labels.sum() == 11 + 41
    # column 2 is constant on train: masked out, recorded
    assert ds.mask.tolist() == [True, True, False]


def test_smap_duplicate_channel_is_merged(telemanom_root: Path) -> None:
    ds = load_dataset("smap", telemanom_root)
    assert [e.name for e in ds.entities] == ["P-2"]
    lab = ds.entities[0].labels
    assert lab[300:421].all() and lab[:300].sum() == 0 and lab[421:].sum() == 0
    assert any("P-2" in n for n in ds.notes)


def test_smd_natural_order_and_labels(smd_root: Path) -> None:
    ds = load_dataset("smd", smd_root)
    assert [e.name for e in ds.entities] == [
        "machine-1-1",
        "machine-1-2",
        "machine-1-10",
    ]
    assert ds.entities[0].labels.sum() == 60 and len(ds.channels) == 4


def test_psm_nans_forward_filled_and_counted(psm_root: Path) -> None:
    ds = load_dataset("psm", psm_root)
    e = ds.entities[0]
    assert len(ds.channels) == 25 and not np.isnan(e.train).any()
    assert e.imputed == 2
    raw = pd.read_csv(psm_root / "PSM" / "train.csv")
    assert e.train[5, 3] == np.float32(raw.iloc[4, 4])  # filled from the previous step
    assert e.train[0, 7] == np.float32(
        raw.iloc[1, 8]
    )  # leading NaN: first observed value
    assert e.labels.sum() == 80


def test_swat_quirks(swat_root: Path) -> None:
    ds = load_dataset("swat", swat_root)
    e = ds.entities[0]
    assert len(ds.channels) == 51 and ds.channels[0] == "FIT101"
    assert e.labels.sum() == 50  # "Attack" and the "A ttack" typo


def test_swat_several_releases_read_the_latest_in_any_case(swat_root: Path) -> None:
    """Before: of SWaT_Dataset_Normal_v0 and _v1 the loader took v0 silently, and a
    lower-case name was not found."""
    base = swat_root / "SWaT"
    v1 = base / "SWaT_Dataset_Normal_v1.csv"
    lines = v1.read_text().splitlines(keepends=True)
    (base / "SWaT_Dataset_Normal_v0.csv").write_text("".join(lines[:-100]))
    ds = load_dataset("swat", swat_root)
    assert len(ds.entities[0].train) == 300
    assert any("read SWaT_Dataset_Normal_v1.csv" in n for n in ds.notes)
    (base / "SWaT_Dataset_Normal_v0.csv").unlink()
    v1.rename(base / "swat_dataset_normal_v1.csv")
    assert len(load_dataset("swat", swat_root).entities[0].train) == 300


def test_swat_trailing_empty_rows_are_dropped(swat_root: Path) -> None:
    """Before: an export ending in ',,,' rows was refused on the test file ('unknown
    label nan') and forward-filled on the train file."""
    for name in ("SWaT_Dataset_Normal_v1.csv", "SWaT_Dataset_Attack_v0.csv"):
        path = swat_root / "SWaT" / name
        path.write_text(path.read_text() + ("," * 52 + "\n") * 3)
    e = load_dataset("swat", swat_root).entities[0]
    assert (len(e.train), len(e.test), e.imputed) == (300, 300, 0)


@pytest.mark.parametrize("name", ["train.csv", "test.csv"])
def test_psm_truncated_row_is_refused(psm_root: Path, name: str) -> None:
    """Before: a file cut mid-row (an interrupted copy) was forward-filled."""
    path = psm_root / "PSM" / name
    text = path.read_text()
    path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 40])
    with pytest.raises(
        DataError, match=rf"{name}, row \d+: \d+ cells, the file has 26"
    ):
        load_dataset("psm", psm_root)


def test_generic_csv_single_file_with_entities(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    n = 400
    df = pd.DataFrame(
        {
            "timestamp": np.tile(np.arange(n), 2),
            "pump": np.repeat(["p1", "p2"], n),
            "temp": rng.normal(size=2 * n),
            "rpm": rng.normal(size=2 * n),
            "label": np.zeros(2 * n, dtype=int),
        }
    )
    df.loc[350:360, "label"] = 1
    df = df.sample(frac=1.0, random_state=0)  # out of order: loader sorts by timestamp
    path = tmp_path / "plant.csv"
    df.to_csv(path, index=False)
    ds = load_dataset("csv", path, entity_col="pump", train_frac=0.5)
    assert ds.channels == ["temp", "rpm"] and [e.name for e in ds.entities] == [
        "p1",
        "p2",
    ]
    # per entity chronological cut on the file's row order is per-group; lengths add up
    assert sum(len(e.train) + len(e.test) for e in ds.entities) == 2 * n


def test_generic_parquet_dir(tmp_path: Path, rng: np.random.Generator) -> None:
    tr = pd.DataFrame(
        {
            "timestamp": np.arange(300),
            "a": rng.normal(size=300),
            "b": rng.normal(size=300),
        }
    )
    te = tr.assign(label=0)
    te.loc[100:120, "label"] = 1
    tr.to_parquet(tmp_path / "train.parquet")
    te.to_parquet(tmp_path / "test.parquet")
    ds = load_dataset("csv", tmp_path)
    assert ds.entities[0].labels.sum() == 21 and ds.channels == ["a", "b"]
    # before: --train-frac was ignored for a folder, silently
    with pytest.raises(DataError, match="--train-frac cuts a single file"):
        load_dataset("csv", tmp_path, train_frac=0.7)


# -- bad inputs: a clear DataError naming the file and the problem ---------------------


def test_missing_file(telemanom_root: Path) -> None:
    (telemanom_root / "telemanom" / "test" / "B-1.npy").unlink()
    with pytest.raises(DataError, match=r"B-1\.npy: file not found"):
        load_dataset("msl", telemanom_root)


def test_missing_root(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="data root not found"):
        load_dataset("smd", tmp_path / "nope")


def test_wrong_shape(telemanom_root: Path) -> None:
    np.save(telemanom_root / "telemanom" / "test" / "B-1.npy", np.zeros((380, 5)))
    with pytest.raises(DataError, match=r"B-1\.npy: 5 columns, expected 3"):
        load_dataset("msl", telemanom_root)


def test_label_file_wrong_length(smd_root: Path) -> None:
    path = smd_root / "ServerMachineDataset" / "test_label" / "machine-1-2.txt"
    np.savetxt(path, np.zeros(100, dtype=int), fmt="%d")
    with pytest.raises(
        DataError, match=r"machine-1-2\.txt: 100 labels for a test series of 330 steps"
    ):
        load_dataset("smd", smd_root)


def test_label_values(smd_root: Path) -> None:
    path = smd_root / "ServerMachineDataset" / "test_label" / "machine-1-2.txt"
    lab = np.zeros(330)
    lab[7] = 2
    np.savetxt(path, lab, fmt="%d")
    with pytest.raises(DataError, match=r"labels must be 0 or 1, found .*2.* at row 8"):
        load_dataset("smd", smd_root)


def test_empty_entity(smd_root: Path) -> None:
    (smd_root / "ServerMachineDataset" / "test" / "machine-1-10.txt").write_text("")
    with pytest.raises(DataError, match=r"machine-1-10\.txt: file is empty"):
        load_dataset("smd", smd_root)


def test_range_outside_series(telemanom_root: Path) -> None:
    csv = telemanom_root / "telemanom" / "labeled_anomalies.csv"
    df = pd.read_csv(csv)
    df.loc[0, "anomaly_sequences"] = "[[400, 900]]"
    df.to_csv(csv, index=False)
    with pytest.raises(
        DataError, match=r"range \[400, 900\] of A-1 outside its test series of 450"
    ):
        load_dataset("msl", telemanom_root)


def test_non_numeric_cell(smd_root: Path) -> None:
    path = smd_root / "ServerMachineDataset" / "train" / "machine-1-1.txt"
    lines = path.read_text().splitlines()
    lines[41] = "0.1,abc,0.3,0.4"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        DataError,
        match=r"machine-1-1\.txt: non-numeric value 'abc' in column 2, data row 42",
    ):
        load_dataset("smd", smd_root)


def test_infinite_value(psm_root: Path) -> None:
    path = psm_root / "PSM" / "test.csv"
    df = pd.read_csv(path)
    df.iloc[9, 2] = np.inf
    df.to_csv(path, index=False)
    with pytest.raises(
        DataError, match=r"test\.csv, row 10, column 'feature_1': infinite value"
    ):
        load_dataset("psm", psm_root)


def test_swat_unknown_label(swat_root: Path) -> None:
    path = swat_root / "SWaT" / "SWaT_Dataset_Attack_v0.csv"
    path.write_text(path.read_text().replace(",Normal\n", ",Maybe\n", 1))
    with pytest.raises(DataError, match=r"unknown label 'Maybe' at data row 1"):
        load_dataset("swat", swat_root)


def test_unknown_dataset() -> None:
    with pytest.raises(DataError, match="unknown dataset 'nope'"):
        load_dataset("nope")


def test_smd_truncated_row_is_refused(smd_root: Path) -> None:
    # a file cut short mid-row (an interrupted copy): its missing cells are no readings
    path = smd_root / "ServerMachineDataset" / "test" / "machine-1-2.txt"
    lines = path.read_text().splitlines()
    lines[-1] = lines[-1].rsplit(",", 2)[0]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        DataError,
        match=r"machine-1-2\.txt, row 330: 2 cells, the file has 4 columns; hint: a truncated",
    ):
        load_dataset("smd", smd_root)
    # an empty cell stays a missing value, forward-filled and counted
    lines[-1] = "0.1,,0.3,0.4"
    path.write_text("\n".join(lines) + "\n")
    assert load_dataset("smd", smd_root).entities[1].imputed == 1


def test_smd_full_28_machines_and_orphan_test_file(smd_root: Path) -> None:
    # the full SMD: machine-1-1..1-8, 2-1..2-9, 3-1..3-11, every one read, in order
    names = [
        f"machine-{g}-{i}"
        for g, n in ((1, 8), (2, 9), (3, 11))
        for i in range(1, n + 1)
    ]
    base = smd_root / "ServerMachineDataset"
    for s in ("train", "test", "test_label"):
        text = (base / s / "machine-1-1.txt").read_text()
        for m in names:
            (base / s / f"{m}.txt").write_text(text)
        (base / s / "machine-1-10.txt").unlink()  # not a machine of the release
    (base / "interpretation_label").mkdir()
    (base / "interpretation_label" / "machine-1-1.txt").write_text("200-260:1,2\n")
    ds = load_dataset("smd", smd_root)
    assert [e.name for e in ds.entities] == names
    # a machine whose train file is missing is not left out silently
    (base / "train" / "machine-2-3.txt").unlink()
    with pytest.raises(DataError, match=r"train/machine-2-3\.txt: file not found"):
        load_dataset("smd", smd_root)
