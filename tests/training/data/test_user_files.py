"""A user's own files through the real `scjepa` commands: every bad file gets one line
naming the file, the row and the column where they apply, and a hint; exit code 2,
never a traceback. One row of the table per case seen failing (issue 23)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from training.cli import main

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
    if "argument --window" not in err:  # argparse's own line has no hint
        assert "; hint: " in err, err


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
