"""``scjepa label``: the incidents reported to the service (GET /incidents' body) as
the label column of a CSV of the streams' readings; each bad input refused with one
line naming the file and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.cli import main


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def incidents(path: Path, *items: dict) -> Path:  # type: ignore[type-arg]
    return write(path, json.dumps({"incidents": list(items)}))


def labels(path: Path) -> list[tuple[str, ...]]:
    return [tuple(line.split(",")) for line in path.read_text().splitlines()]


def test_rows_within_their_streams_incidents_are_labelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        f"{t},pump-{1 + k % 2},{t / 10}" for t in range(100, 124, 2) for k in (0, 1)
    ]
    src = write(tmp_path / "r.csv", "ts,stream,temp\n" + "\n".join(rows) + "\n\n")
    inc = incidents(
        tmp_path / "i.json",
        {"id": "A", "stream": "pump-1", "start": 104.0, "end": 108.0},
        {"id": "B", "stream": "pump-1", "start": 107.5, "end": 112},  # overlaps A
        {"id": "C", "stream": "pump-2", "start": 120, "end": 120},  # one instant
        {"id": "D", "stream": "fan", "start": 100, "end": 200},  # no row of it
        {"id": "E", "stream": "pump-2", "start": 101, "end": 101.5},  # between rows
    )
    out = tmp_path / "out" / "labelled.csv"
    argv = ["label", str(src), "--incidents", str(inc), "--entity-col", "stream"]
    assert main([*argv, "--out", str(out)]) == 0
    got = labels(out)
    assert got[0] == ("ts", "stream", "temp", "label")
    ones = {(int(ts), s) for ts, s, _, label in got[1:] if label == "1"}
    assert ones == {(t, "pump-1") for t in (104, 106, 108, 110, 112)} | {
        (120, "pump-2")
    }
    assert len(got) == 1 + len(rows)  # the blank line left out
    assert [r[:3] for r in got[1:]] == [tuple(r.split(",")) for r in rows]  # verbatim
    said = capsys.readouterr().out
    assert "24 rows, 6 labelled 1, from 3 of 5 incidents" in said
    assert "no row of the file falls in 2 incidents: D, E" in said
    assert (
        "scjepa evaluate --dataset csv --root" in said and "--entity-col stream" in said
    )


def test_a_file_of_one_stream(tmp_path: Path) -> None:
    src = write(tmp_path / "r.csv", "time;x\n1;0\n2;0\n3;0\n")  # ';' kept
    one = incidents(tmp_path / "one.json", {"stream": "s", "start": 2, "end": 3})
    out = tmp_path / "o.csv"
    assert main(["label", str(src), "--incidents", str(one), "--out", str(out)]) == 0
    assert out.read_text() == "time;x;label\n1;0;0\n2;0;1\n3;0;1\n"
    # incidents of two streams: the file's must be named
    two = incidents(tmp_path / "two.json", {"stream": "s", "start": 2, "end": 3},
                    {"stream": "t", "start": 1, "end": 1})  # fmt: skip
    argv = ["label", str(src), "--incidents", str(two), "--out", str(out)]
    assert main(argv) == 2
    assert main([*argv, "--stream", "t"]) == 0
    assert out.read_text() == "time;x;label\n1;0;1\n2;0;0\n3;0;0\n"


@pytest.mark.parametrize(
    ("csv_text", "items", "named"),
    [
        ("ts,x,label\n1,0,0\n", [], "has a 'label' column already"),
        ("x,y\n1,0\n", [], "no timestamp column"),
        ("ts,x\n1,0,5,6\n", [], "row 1 (line 2): 4 cells, the header has 2"),
        ("ts,x\nsoon,0\n", [], "row 1 (line 2), column 'ts': 'soon' is not a time"),
        ("ts,x\n1,0\n", [{"stream": "s", "start": 5, "end": 4}], "ends (4.0) before"),
        ("ts,x\n1,0\n", [{"stream": "s", "start": "soon", "end": 4}], "start is not"),
        ("ts,x\n1,0\n", [{"start": 1, "end": 4}], "incidents[0] has no stream"),
        ("ts,x\n1,0\n", [3], "incidents[0] is not an object"),
    ],
)
def test_bad_input_is_refused_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    csv_text: str,
    items: list,  # type: ignore[type-arg]
    named: str,
) -> None:
    src = write(tmp_path / "r.csv", csv_text)
    inc = incidents(tmp_path / "i.json", *items)
    out = tmp_path / "o.csv"
    assert main(["label", str(src), "--incidents", str(inc), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scjepa label: error: ") and named in err, err
    assert err.count("\n") == 1  # one line, no traceback


def test_bad_files_are_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "r.csv", "ts,x\n1,0\n")
    out = str(tmp_path / "o.csv")
    for inc, named in (
        (write(tmp_path / "bad.json", "{nope"), "bad.json: not JSON"),
        (write(tmp_path / "obj.json", '{"items": []}'), "expected GET /incidents"),
        (tmp_path / "missing.json", "missing.json: file not found"),
    ):
        assert main(["label", str(src), "--incidents", str(inc), "--out", out]) == 2
        assert named in capsys.readouterr().err
    inc = incidents(tmp_path / "i.json")
    for argv, named in (
        ([str(tmp_path / "none.csv")], "none.csv: file not found"),
        ([str(src), "--entity-col", "pump"], "no entity column 'pump'"),
        ([str(src), "--entity-col", "x", "--stream", "s"], "not both"),
    ):
        assert main(["label", *argv, "--incidents", str(inc), "--out", out]) == 2
        assert named in capsys.readouterr().err


def test_the_labelled_file_reads_as_a_csv_data_set(tmp_path: Path) -> None:
    """What scjepa evaluate --dataset csv reads: the label column, the entities."""
    from training.data.tabular import load_table_dataset

    rows = [f"{t},pump-{1 + t % 2},{t % 7}" for t in range(3000)]
    src = write(tmp_path / "r.csv", "ts,stream,temp\n" + "\n".join(rows) + "\n")
    inc = incidents(
        tmp_path / "i.json", {"stream": "pump-1", "start": 2000, "end": 2100}
    )
    out = tmp_path / "labelled.csv"
    argv = ["label", str(src), "--incidents", str(inc), "--entity-col", "stream"]
    assert main([*argv, "--out", str(out)]) == 0
    ds = load_table_dataset(out, entity_col="stream")
    assert sorted(e.name for e in ds.entities) == ["pump-1", "pump-2"]
    # its labels cut in time (the later half): pump-1's even seconds 2000-2100
    got = {e.name: int(e.labels.sum()) for e in ds.entities if e.labels is not None}
    assert got == {"pump-1": 51, "pump-2": 0}
