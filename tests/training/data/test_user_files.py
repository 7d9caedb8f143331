"""A user's own files through the real `scjepa` commands: every bad file gets one line
naming the file, the row and the column where they apply, and a hint; exit code 2,
never a traceback. One row of the table per case seen failing (issue 23)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.cli import main
from training.data import Dataset, load_dataset
from training.demo.replay import Series, read_csv, read_dataset
from training.errors import DataError

HEADER = ["timestamp", "a", "b", "c", "label"]


def table(
    n: int,
    header: list[str] = HEADER,
    sep: str = ",",
    cell: Callable[[int, str], object] | None = None,
) -> str:
    """``n`` rows of 3 channels, anomalies every 500 rows; ``cell(row, column)``
    overrides a cell (row counts data rows from 1) when it returns non-None."""
    rng = np.random.default_rng(0)
    lines = [sep.join(header)]
    for i in range(n):
        x = iter(np.round(rng.normal(size=3), 3))
        row = []
        for col in header:
            v = cell(i + 1, col) if cell else None
            if v is None:
                v = (
                    1000 + i
                    if col in ("timestamp", "time")
                    else int(i % 500 in range(300, 330))
                    if col == "label"
                    else next(x)
                )
            row.append(str(v))
        lines.append(sep.join(row))
    return "\n".join(lines) + "\n"


def _at(row: int, col: str, value: object) -> Callable[[int, str], object]:
    return lambda r, c: value if (r, c) == (row, col) else None


def edit(text: str, row: int, change: Callable[[list[str]], list[str]]) -> str:
    """``text`` with data row ``row``'s cells (split at commas) changed."""
    lines = text.split("\n")
    lines[row] = ",".join(change(lines[row].split(",")))
    return "\n".join(lines)


def pumps(n: int, names: list[str], header: list[str] = HEADER) -> str:
    """``n`` rows per pump name, a ``pump`` column first."""
    rows = table(n, header).splitlines()
    return (
        "\n".join(["pump," + rows[0]] + [f"{p},{r}" for p in names for r in rows[1:]])
        + "\n"
    )


FAST = ["--config", "configs/fast.yaml"]
EVAL = ["--seeds", "1", "--n-boot", "10", "--ts2vec-iters", "0"]

# id: (files to write, argv (FILE = the first file, DIR = the folder, OUT = an output
# folder), what the error line must say)
CASES: dict[str, tuple[dict[str, str], list[str], list[str]]] = {
    "1 row": (
        {"one.csv": table(1)},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["one.csv", "1 data rows: too few", "1500 train rows"],
    ),
    "150 rows, pretrain": (
        {"r150.csv": table(150)},
        ["pretrain", "--dataset", "csv", "--root", "FILE", *FAST, "--out", "OUT"],
        ["r150.csv", "0 train and 0 validation pre-training pairs", "1500 train rows"],
    ),
    "150 rows, evaluate": (
        {"r150.csv": table(150)},
        ["evaluate", "--dataset", "csv", "--root", "FILE", "--out", "OUT", *EVAL],
        ["r150.csv", "has 75 rows", "at least 900 labelled test rows"],
    ),
    "test file without labels": (
        {"train.csv": table(3000), "test.csv": table(3000, HEADER[:-1])},
        ["evaluate", "--dataset", "csv", "--root", "DIR", "--out", "OUT", *EVAL],
        ["no labelled test data", "0/1 'label' column"],
    ),
    "labels only in the test part": (
        {"late.csv": table(4000, cell=lambda r, c: int(r > 3500) if c == "label" else None)},
        ["evaluate", "--dataset", "csv", "--root", "FILE", "--out", "OUT", *EVAL],
        ["late.csv", "train split has no anomalous next window"],
    ),
    "; delimiter": (
        {"semi.csv": table(600, sep=";", cell=_at(5, "b", "x"))},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["semi.csv, row 5 (line 6), column 'b': non-numeric value 'x'"],
    ),
    "no header": (
        {"nohead.csv": table(600).split("\n", 1)[1]},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["nohead.csv, line 1: the first line holds numbers, not column names"],
    ),
    "Inf, by column name": (
        {"inf.csv": table(4000, cell=_at(41, "b", "inf"))},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["inf.csv, row 41 (line 42), column 'b': infinite value inf"],
    ),
    "Inf, replay (before sending)": (
        {"inf.csv": table(600, cell=_at(41, "b", "-inf"))},
        ["replay", "--file", "FILE", "--url", "http://127.0.0.1:9"],
        ["inf.csv, row 41 (line 42), column 'b': infinite value '-inf'"],
    ),
    "--window 0": (
        {"ok.csv": table(600)},
        ["data", "stats", "--dataset", "csv", "--root", "FILE", "--window", "0"],
        ["argument --window: 0: must be at least 1"],
    ),
    "bad ISO time": (
        {"t.csv": table(600, ["time", "a", "b"], cell=_at(3, "time", "2024-13-45T00:00"))},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["t.csv, row 3 (line 4), column 'time': '2024-13-45T00:00' is not a time"],
    ),
    "bad ISO time, replay": (
        {"t.csv": table(600, ["time", "a", "b"], cell=_at(3, "time", "2024-13-45T00:00"))},
        ["replay", "--file", "FILE", "--url", "http://127.0.0.1:9"],
        ["t.csv, row 3 (line 4), column 'time': '2024-13-45T00:00' is not a time"],
    ),
    "label not 0/1": (
        {"lab.csv": table(600, cell=_at(7, "label", 2))},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["lab.csv, row 7 (line 8), column 'label': label '2': labels must be 0 or 1"],
    ),
    "entity column not declared": (
        {"ent.csv": table(600, ["pump", *HEADER], cell=lambda r, c: "p1" if c == "pump" else None)},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["ent.csv, row 1 (line 2), column 'pump': non-numeric value 'p1'", "entity"],
    ),
    "entity column missing": (
        {"ok.csv": table(600)},
        ["data", "stats", "--dataset", "csv", "--root", "FILE", "--entity-col", "pump"],
        ["ok.csv, line 1: no entity column 'pump'"],
    ),
    "a column name twice": (
        {"dup.csv": table(600, ["timestamp", "a", "a", "label"])},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["dup.csv, line 1, column 'a': this column name appears twice"],
    ),
    # B1: a row without its entity was dropped in silence
    "empty entity": (
        {"ent.csv": edit(pumps(3000, ["p1", "p2"]), 3005, lambda c: ["", *c[1:]])},
        ["data", "stats", "--dataset", "csv", "--root", "FILE", "--entity-col", "pump"],
        ["ent.csv, row 3005 (line 3006), column 'pump': empty entity", "leave out"],
    ),
    # B2: an entity only in test.csv was dropped in silence
    "entity only in test.csv": (
        {"train.csv": pumps(2000, ["01", "02"], HEADER[:-1]),
         "test.csv": pumps(1500, ["01", "02", "A3"])},
        ["data", "stats", "--dataset", "csv", "--root", "DIR", "--entity-col", "pump"],
        ["test.csv, row 3001 (line 3002), column 'pump': entity 'A3' has test rows "
         "but no train rows in train.csv", "give it train rows"],
    ),
    # B3: short and long rows were read with values in the wrong columns
    "a row one cell short": (
        {"short.csv": edit(table(3000, HEADER[:-1]), 11, lambda c: c[:2] + c[3:])},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["short.csv, row 11 (line 12): 3 cells, the header has 4", "one cell per"],
    ),
    "a row one cell short, with a label column": (
        {"short.csv": edit(table(3000), 11, lambda c: c[:2] + c[3:])},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["short.csv, row 11 (line 12): 4 cells, the header has 5"],
    ),
    "a row one cell short, replay": (
        {"short.csv": edit(table(3000), 11, lambda c: c[:2] + c[3:])},
        ["replay", "--file", "FILE", "--url", "http://127.0.0.1:9"],
        ["short.csv, row 11 (line 12): 4 cells, the header has 5"],
    ),
    "a header shorter than the rows": (
        {"hs.csv": "timestamp,a,c\n" + table(3000, HEADER[:-1]).split("\n", 1)[1]},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["hs.csv, row 1 (line 2): 4 cells, the header has 3"],
    ),
    # B4: pandas' two-line message without a row or a hint
    "a row one cell too many": (
        {"long.csv": edit(table(3000), 11, lambda c: [*c[:2], "9.9", *c[2:]])},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["long.csv, row 11 (line 12): 6 cells, the header has 5"],
    ),
    "a row two cells too many, after a blank line": (
        {"long.csv": edit(table(3000), 11, lambda c: [*c, "1", "2"]).replace(
            "\n", "\n\n", 1)},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["long.csv, row 11 (line 13): 7 cells, the header has 5"],
    ),
    # B8: accepted, then a traceback in evaluate
    "every channel constant": (
        {"flat.csv": table(3000, cell=lambda r, c: {"a": 1, "b": 2, "c": ""}.get(c))},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["flat.csv: all 3 channels are constant (variance <= 1e-8) on the train split"],
    ),
    # B11: the line did not count blank lines
    "blank lines, then a bad cell": (
        {"gap.csv": table(600, cell=_at(200, "b", "x")).replace("\n", "\n\n \n", 1)},
        ["data", "stats", "--dataset", "csv", "--root", "FILE"],
        ["gap.csv, row 200 (line 203), column 'b': non-numeric value 'x'"],
    ),
    "blank lines, then a bad cell, replay": (
        {"gap.csv": table(600, cell=_at(200, "b", "x")).replace("\n", "\n\n,,,\n", 1)},
        ["replay", "--file", "FILE", "--url", "http://127.0.0.1:9"],
        ["gap.csv, row 200 (line 203), column 'b': non-numeric value 'x'"],
    ),
}  # fmt: skip


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's refusals
        code = int(e.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", CASES)
def test_bad_file_is_one_line_with_file_row_column_and_hint(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files, argv, expected = CASES[case]
    data = tmp_path / "data"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    first = data / next(iter(files))
    subs = {"FILE": str(first), "DIR": str(data), "OUT": str(tmp_path / "out")}
    code, err = run([subs.get(a, a) for a in argv], capsys)
    assert code == 2, err
    assert "Traceback" not in err and err.count("error:") == 1, err
    for text in expected:
        assert text in err, err
    if "argument --window" not in err:  # argparse's own line (after its usage)
        assert "; hint: " in err and err.count("\n") == 1, err


def test_time_column_and_iso_timestamps_are_not_channels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timestamp column named `time`, holding ISO 8601 strings, shuffled: detected,
    parsed, used for order, not a channel."""
    text = table(3000, ["time", "a", "b", "label"])
    lines = text.splitlines()
    rows = [
        f"2024-05-01T{(i // 3600):02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z,{row.split(',', 1)[1]}"
        for i, row in enumerate(lines[1:])
    ]
    path = tmp_path / "iso.csv"
    path.write_text("\n".join([lines[0], *rows[::-1]]) + "\n")  # newest first
    out = tmp_path / "stats.json"
    argv = [
        "data",
        "stats",
        "--dataset",
        "csv",
        "--root",
        str(path),
        "--json",
        str(out),
    ]
    assert run(argv, capsys)[0] == 0
    st = json.loads(out.read_text())
    assert st["channels"] == 2  # a, b: not `time`, not `label`
    assert st["per_entity"][0]["train_steps"] == 1500
    # sorted by time: the train part is the first half in time, anomalies included
    assert st["windows_per_entity"]["positives"] > 0


def test_multi_entity_csv_trains_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--entity-col on pretrain: two pumps in one file, each its own series."""
    a, b = table(3200).splitlines(), table(3200).splitlines()
    lines = ["pump," + a[0]] + [f"p1,{r}" for r in a[1:]] + [f"p2,{r}" for r in b[1:]]
    path = tmp_path / "plant.csv"
    path.write_text("\n".join(lines) + "\n")
    argv = ["pretrain", "--dataset", "csv", "--root", str(path), "--entity-col", "pump"]
    argv += [*FAST, "--out", str(tmp_path / "run"), "--set", "optim.epochs=1"]
    argv += ["--set", "model.d_model=16", "--set", "model.n_layers=1"]
    argv += ["--set", "model.n_heads=2", "--set", "optim.batch_size=32"]
    code, err = run(argv, capsys)
    assert code == 0, err
    assert (tmp_path / "run" / "last.pt").is_file()
    out = tmp_path / "eval"
    argv = ["evaluate", "--dataset", "csv", "--root", str(path), "--entity-col", "pump"]
    code, err = run([*argv, "--out", str(out), *EVAL, "--baselines", "all"], capsys)
    assert code == 0, err
    res = json.loads((out / "results.json").read_text())
    # per pump 1,600 test rows: 15 windows, 8 of them the train split's (6:2:2)
    assert res["splits"]["train"]["windows"] == 2 * 8, res["splits"]


# -- what the audit of user files found (B1-B11): each read as a user means it --------


def test_entity_values_are_the_files_text(tmp_path: Path) -> None:
    """B1, B2: ``NA`` is a pump's name, not a missing cell; ``01`` in train.csv is
    ``01`` in test.csv (pandas guessed ints in one file and text in the other)."""
    path = tmp_path / "na.csv"
    path.write_text(pumps(3000, ["p1", "NA"]))
    ds = load_dataset("csv", path, entity_col="pump")
    assert [e.name for e in ds.entities] == ["NA", "p1"]
    assert all(len(e.train) == len(e.test) == 1500 for e in ds.entities)
    (tmp_path / "train.csv").write_text(pumps(2000, ["01", "02"], HEADER[:-1]))
    (tmp_path / "test.csv").write_text(pumps(1500, ["02", "01"]))
    ds = load_dataset("csv", tmp_path, entity_col="pump")
    assert [(e.name, len(e.train), len(e.test)) for e in ds.entities] == [
        ("01", 2000, 1500),
        ("02", 2000, 1500),
    ]


def test_trailing_delimiter_on_data_rows_and_blank_rows(tmp_path: Path) -> None:
    """One extra empty cell (a delimiter ending a data row) is accepted, and a row
    of nothing but missing cells (a spreadsheet's ``,,,,``) skipped, by both readers;
    values stay in their columns."""
    lines = table(3000).splitlines()
    rows = [lines[0]] + [r + "," for r in lines[1:]]
    rows[500:500] = [",,,,", "", "NA,,,,"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    ds = load_dataset("csv", path)
    want = np.array([[float(v) for v in r.split(",")[1:4]] for r in lines[1:]])
    e = ds.entities[0]
    np.testing.assert_array_equal(np.concatenate([e.train, e.test]), want.astype("f4"))
    s = read_csv(path)
    np.testing.assert_array_equal(s.values, want)


# (cell, what both readers make of it: a number, NaN = missing, None = refused)
CELLS = [("", np.nan), (" ", np.nan), ("NA", np.nan), ("#N/A", np.nan),
         ("NaN", np.nan), ("-nan", np.nan), ("n/a", np.nan), ("NULL", np.nan),
         ("None", np.nan), ("<NA>", np.nan), ("nan ", np.nan), (" 1.5", 1.5),
         ("1.5 ", 1.5), ("1e3", 1000.0), ("+2", 2.0), (".5", 0.5), ("7.", 7.0),
         ("1_000", None), ("0x10", None), ("TRUE", None), ("-", None), ("inf", None),
         ("1e999", None)]  # fmt: skip
LABELS = [("1", 1), ("1.00", 1), ("01", 1), ("1e0", 1), (" 1 ", 1), ("-0", 0),
          ("0.0", 0), ("", None), ("NA", None), ("true", None), ("0.5", None),
          ("2", None)]  # fmt: skip


def _both(path: Path) -> tuple[object, object]:
    """(train loader, replay) of the file: the Dataset/Series, or the DataError."""
    out: list[object] = []
    for read in (lambda: load_dataset("csv", path), lambda: read_csv(path)):
        try:
            out.append(read())
        except DataError as e:
            out.append(e)
    return out[0], out[1]


@pytest.mark.parametrize("cell,want", CELLS)
def test_a_channel_cell_reads_alike_in_training_and_replay(
    cell: str, want: float | None, tmp_path: Path
) -> None:
    """B10: one rule (training/usercsv.py) for both readers."""
    path = tmp_path / "c.csv"
    path.write_text(table(3000, cell=_at(2, "b", cell)))
    ds, s = _both(path)
    if want is None:
        assert isinstance(ds, DataError) and isinstance(s, DataError), (ds, s)
        assert "row 2 (line 3), column 'b'" in str(ds) and "row 2 (line 3)" in str(s)
        return
    assert isinstance(ds, Dataset) and isinstance(s, Series), (ds, s)
    assert ds.entities[0].imputed == int(np.isnan(want))
    if np.isnan(want):
        assert np.isnan(s.values[1, 1])
    else:
        assert ds.entities[0].train[1, 1] == np.float32(want) and s.values[1, 1] == want


@pytest.mark.parametrize("cell,want", LABELS)
def test_a_label_reads_alike_in_training_and_replay(
    cell: str, want: int | None, tmp_path: Path
) -> None:
    """B10: a label is a number equal to 0 or 1, in both readers."""
    path = tmp_path / "l.csv"
    path.write_text(table(3000, cell=_at(2, "label", cell)))
    ds, s = _both(path)
    if want is None:
        assert isinstance(ds, DataError) and isinstance(s, DataError), (ds, s)
        assert "row 2 (line 3), column 'label'" in str(ds)
        assert "row 2 (line 3), column 'label'" in str(s)
        assert "labels must be 0 or 1" in str(ds) and "labels must be 0 or 1" in str(s)
        return
    assert isinstance(ds, Dataset) and isinstance(s, Series), (ds, s)
    assert s.labels is not None and s.labels[1] == want


def _frame(n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "timestamp": pd.to_datetime(1_700_000_000 + np.arange(n), unit="s"),
            "a": np.arange(n, dtype=float),
            "b": rng.normal(size=n),
            "label": (np.arange(n) % 500 >= 300).astype(int),
        }
    )


def test_parquet_times_index_and_rows(tmp_path: Path) -> None:
    """B5, B6: a datetime column (zoned or not) is seconds, an empty one refused as
    in a CSV; a timestamp stored as the index is the timestamp; a row in an error is
    its position, whatever the index."""
    df = _frame()
    df.sample(frac=1, random_state=0).set_index("timestamp").to_parquet(
        tmp_path / "index.parquet"
    )
    e = load_dataset("csv", tmp_path / "index.parquet").entities[0]
    np.testing.assert_array_equal(e.train[:, 0], np.arange(1500))  # in time order
    zoned = df.assign(timestamp=df.timestamp.dt.tz_localize("Europe/Paris"))
    zoned.iloc[::-1].to_parquet(tmp_path / "zoned.parquet")
    e = load_dataset("csv", tmp_path / "zoned.parquet").entities[0]
    np.testing.assert_array_equal(e.train[:, 0], np.arange(1500))
    df.loc[1600, "timestamp"] = pd.NaT
    df.to_parquet(tmp_path / "nat.parquet")
    with pytest.raises(DataError, match=r"row 1601, column 'timestamp': empty time"):
        load_dataset("csv", tmp_path / "nat.parquet")
    gappy = _frame().iloc[::2].astype({"b": str})
    gappy.iloc[7, 2] = "x"
    gappy.to_parquet(tmp_path / "gappy.parquet")  # index 0, 2, 4, ...
    with pytest.raises(DataError, match=r"row 8, column 'b': non-numeric value 'x'"):
        load_dataset("csv", tmp_path / "gappy.parquet")
    indexed = _frame().set_index("timestamp").astype({"b": str})
    indexed.iloc[7, 1] = "x"
    indexed.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"row 8, column 'b': non-numeric value 'x'"):
        load_dataset("csv", tmp_path / "bad.parquet")


@pytest.mark.parametrize(
    "names,error",
    [
        (
            ["timestamp", "a", " a", "label"],
            "column 'a': this column name appears twice",
        ),
        (["timestamp", "a", "", "label"], "column 3: a column without a name"),
        ([0, 1, 2, 3], None),  # numbers are names in a Parquet file (not in a CSV)
    ],
)
def test_parquet_column_names_are_checked(
    names: list[object], error: str | None, tmp_path: Path
) -> None:
    """B7: the CSV header's checks, but numbers are fine names."""
    df = _frame().assign(timestamp=np.arange(3000))
    df.columns = names  # type: ignore[assignment]
    df.to_parquet(tmp_path / "x.parquet")
    if error is None:
        ds = load_dataset("csv", tmp_path / "x.parquet")
        assert ds.channels == ["0", "1", "2", "3"]
        return
    with pytest.raises(DataError, match=error):
        load_dataset("csv", tmp_path / "x.parquet")


def test_replay_dataset_csv_takes_the_csv_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """B9: `replay --dataset csv` reads the file with --timestamp-col, --entity-col
    (and --entity), as `data stats` does; it fails only at the absent service."""
    text = pumps(3000, ["p1", "p2"]).replace("timestamp", "recorded_at")
    (tmp_path / "plant.csv").write_text(text)
    argv = ["replay", "--dataset", "csv", "--root", str(tmp_path / "plant.csv")]
    argv += ["--timestamp-col", "recorded_at", "--entity-col", "pump"]
    code, err = run([*argv, "--entity", "p2", "--url", "http://127.0.0.1:9"], capsys)
    assert code == 2 and "cannot read http://127.0.0.1:9/models" in err, err
    s = read_dataset("csv", tmp_path / "plant.csv", "p2", entity_col="pump",
                     timestamp_col="recorded_at")  # fmt: skip
    assert s.name == "csv-p2" and s.channels == ["a", "b", "c"] and len(s.ts) == 1500


def test_a_label_col_the_file_lacks_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --label-col the file lacks was ignored: the file's real label column (here
    `label`) became a channel, which `scjepa calibrate` and `export` then served as
    a reading. It is refused in one line now, as a --timestamp-col the file lacks;
    left out, a `label` column is still optional."""
    (tmp_path / "plant.csv").write_text(table(3000))
    data = ["--dataset", "csv", "--root", str(tmp_path / "plant.csv")]
    code, err = run(["data", "stats", *data, "--label-col", "fault"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "plant.csv, line 1: no label column 'fault'" in err and "'label'" in err
    with pytest.raises(DataError, match="no label column 'fault'"):
        read_csv(tmp_path / "plant.csv", label_col="fault")  # scjepa replay --file
    ds = load_dataset("csv", tmp_path / "plant.csv", label_col="LABEL")  # any case
    assert ds.channels == ["a", "b", "c"] and ds.entities[0].labels is not None
    # a folder: the test file holds the labels, the train file need not
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.csv").write_text(table(3000, HEADER[:-1]))
    (tmp_path / "d" / "test.csv").write_text(table(3000).replace(",label", ",fault"))
    ds = load_dataset("csv", tmp_path / "d", label_col="fault")
    assert ds.channels == ["a", "b", "c"] and ds.entities[0].labels is not None
    with pytest.raises(DataError, match=r"test\.csv, line 1: no label column 'flt'"):
        load_dataset("csv", tmp_path / "d", label_col="flt")
    (tmp_path / "d" / "test.csv").unlink()
    with pytest.raises(DataError, match=r"train\.csv, line 1: no label column 'fault'"):
        load_dataset("csv", tmp_path / "d", label_col="fault")
    assert load_dataset("csv", tmp_path / "d").channels == ["a", "b", "c"]


def test_train_frac_on_a_file_without_labels_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--train-frac on a file without a label column was ignored without a word
    (every row is train), as it once was for a folder: `scjepa calibrate --train-frac
    0.3` calibrated on the same rows as without it. Refused in one line now."""
    (tmp_path / "plant.csv").write_text(table(3000, HEADER[:-1]))
    data = ["--dataset", "csv", "--root", str(tmp_path / "plant.csv")]
    code, err = run(["data", "stats", *data, "--train-frac", "0.3"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "plant.csv: --train-frac cuts a file with labels" in err
    assert "no 'label' column" in err and "; hint: " in err
    assert len(load_dataset("csv", tmp_path / "plant.csv").entities[0].train) == 3000
    (tmp_path / "plant.csv").write_text(table(3000))  # with labels, it cuts
    ds = load_dataset("csv", tmp_path / "plant.csv", train_frac=0.3)
    assert len(ds.entities[0].train) == 900


def test_a_reader_gone_is_a_quiet_exit(tmp_path: Path) -> None:
    """`scjepa data stats ... | head`: no BrokenPipeError traceback."""
    (tmp_path / "ok.csv").write_text(table(3000))
    cmd = [sys.executable, "-m", "training.cli", "data", "stats", "--dataset", "csv"]
    cmd += ["--root", str(tmp_path / "ok.csv"), "--per-entity"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err
