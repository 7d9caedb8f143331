"""`scjepa replay`: in process, and the CLI against a live service."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from support.service_artifact import build_artifact
from support.service_helpers import ClientFactory, free_port

from training.cli import main as scjepa
from training.demo import demo
from training.demo.replay import (
    incidents_of,
    match_channels,
    read_csv,
    read_dataset,
    replay,
    report_incidents,
)
from training.errors import DataError, UserError


def write_csv(path: Path, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(n, 4)), 4)
    labels = np.zeros(n, dtype=int)
    labels[230:240] = 1
    lines = ["timestamp,a,b,c,flat,label"]
    for i in range(n):
        cells = ["" if (i == 7 and j == 1) else str(v) for j, v in enumerate(x[i])]
        lines.append(",".join([str(1000.0 + i), *cells, str(labels[i])]))
    path.write_text("\n".join(lines) + "\n")
    return x


def test_read_csv(tmp_path: Path) -> None:
    x = write_csv(tmp_path / "pump.csv", 20)
    s = read_csv(tmp_path / "pump.csv")
    assert s.channels == ["a", "b", "c", "flat"]
    assert s.ts[0] == 1000.0 and s.labels is not None and len(s.labels) == 20
    assert np.isnan(s.values[7, 1])
    np.testing.assert_allclose(s.values[8], x[8])
    (tmp_path / "bad.csv").write_text("a,b\n1,x\n")
    with pytest.raises(
        DataError,
        match=r"bad\.csv, row 1 \(line 2\), column 'b': non-numeric value 'x'",
    ):
        read_csv(tmp_path / "bad.csv")


def test_replay_prints_risks_and_labels(client: TestClient, tmp_path: Path) -> None:
    write_csv(tmp_path / "pump.csv", 250)
    lines: list[str] = []
    series = read_csv(tmp_path / "pump.csv")
    window = client.get("/models").json()["models"][0]["manifest"]["window"]
    seen = replay(
        client, series, stream="pump", window=window, batch=30, out=lines.append
    )
    # requests of 30 readings: windows end at readings 100 and 200
    assert [r["n"] for r in seen] == [100, 200]
    assert [r["ts"] for r in seen] == [1099.0, 1199.0]
    assert len(lines) == 3 and "risk=" in lines[0]
    assert lines[-1].startswith("sent 250 readings: 250 accepted, 0 duplicates")
    assert seen[0]["label"] == 0  # readings 100..199 are normal
    hist = client.get("/risk/pump/history").json()["items"]
    assert [h["n"] for h in hist] == [200, 100]
    assert seen[-1]["label"] == 1  # readings 200..299 hold the anomaly at 230
    assert "next-window label=1" in lines[-2]
    # the same series as MessagePack columns (a missing value included): same risks
    series.values[5, 1] = np.nan
    js = replay(client, series, stream="js", window=window, batch=30, out=print)
    mp = replay(
        client, series, stream="mp", window=window, batch=30, out=print, body="msgpack"
    )
    assert mp == js and len(mp) == 2
    # the same readings again: none kept, and it says so (it printed nothing)
    lines.clear()
    assert replay(client, series, stream="js", window=window, batch=30,
                  out=lines.append) == []  # fmt: skip
    assert lines[0].startswith("sent 250 readings: 0 accepted, 250 duplicates")
    assert "kept none of them" in lines[1] and "--stream" in lines[1]


def test_replay_prints_every_window_at_a_hop_below_the_batch(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """At an exported model's default hop (5) a request of 30 readings completes six
    windows, and its answer carries the latest: replay prints them all, each with the
    risk the service recorded, as many as evaluate's dense windows would score."""
    client = make_client(hop=5)
    write_csv(tmp_path / "pump.csv", 250)
    lines: list[str] = []
    seen = replay(
        client, read_csv(tmp_path / "pump.csv"), stream="p", window=100, batch=30,
        out=lines.append,
    )  # fmt: skip
    hist = client.get("/risk/p/history", params={"limit": 100}).json()["items"]
    assert [r["n"] for r in seen] == list(range(100, 251, 5))
    assert [(r["n"], r["risk"]) for r in seen] == [
        (h["n"], h["risk"]) for h in reversed(hist)
    ]
    # the next window of reading n is readings n .. n + 99: the anomaly at 230 .. 239
    # (none after the last reading)
    labels = [int(130 < r["n"] < 240) for r in seen[:-1]]
    assert [r["label"] for r in seen] == [*labels, None]
    assert len(lines) == 32 and lines[-1].endswith("; 31 scored windows printed")


def test_replay_reports_the_labelled_incidents(
    make_client: ClientFactory, tmp_path: Path
) -> None:
    """--report-incidents: each run of label 1 posted as an incident once replayed,
    and what the service judged of it printed. The test model at threshold 0.9
    alerts on the window of 50s only (readings 100-199), 31 readings before the
    incident at 230-239."""
    build_artifact(tmp_path / "art", threshold=0.9)
    client = make_client(artifact=tmp_path / "art")
    lines = ["timestamp,a,b,c,flat,label"]
    for i in range(250):
        v = 50.0 if 100 <= i < 200 else 0.0
        lines.append(
            f"{1000.0 + i},{v},{v},{v},0,{int(230 <= i < 240 or i in (10, 11))}"
        )
    (tmp_path / "pump.csv").write_text("\n".join(lines) + "\n")
    series = read_csv(tmp_path / "pump.csv")
    assert incidents_of(series) == [(10, 11), (230, 239)]
    replay(client, series, stream="pump", window=100, batch=50, out=print)
    hist = client.get("/risk/pump/history").json()["items"]
    assert [(h["n"], h["alert"]) for h in hist] == [(200, True), (100, False)]
    out: list[str] = []
    got = report_incidents(client, series, stream="pump", out=out.append)
    # the first, before the first window, could not be warned: unscored
    assert [i["outcome"] for i in got] == ["unscored", "warned"]
    assert (got[1]["start"], got[1]["end"], got[1]["lead_readings"]) == (1230, 1239, 31)
    assert (
        out[1] == "incident at readings 230-239 (1230.000): warned, 31 readings ahead"
    )
    assert out[-1] == (
        "1 of 1 incidents judged were warned of (median lead 31 readings); "
        "1 could not be judged (unscored, unknown)"
    )
    listed = client.get("/incidents").json()["incidents"]
    assert {i["id"] for i in listed} == {"pump@1010.0", "pump@1230.0"}


def test_report_incidents_needs_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "plain.csv").write_text("ts,a,b,c,flat\n1,0,0,0,0\n")
    argv = ["replay", "--file", str(tmp_path / "plain.csv"), "--report-incidents"]
    assert scjepa(argv) == 2
    err = capsys.readouterr().err
    assert "plain.csv has no labels" in err and err.count("\n") == 1


def test_cli_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert scjepa(["serve", "--artifact", str(tmp_path)]) == 2
    assert "manifest.json: file not found" in capsys.readouterr().err
    assert scjepa(["replay", "--file", str(tmp_path / "none.csv")]) == 2
    assert "none.csv" in capsys.readouterr().err


def test_read_dataset_entity() -> None:
    s = read_dataset("synthetic", None, "unit-2")
    assert s.name == "synthetic-unit-2"
    assert s.values.shape[1] == len(s.channels) and s.labels is not None
    assert len(s.labels) == len(s.values) == len(s.ts) and np.all(np.diff(s.ts) > 0)
    with pytest.raises(ValueError, match="no entity 'nope'"):
        read_dataset("synthetic", None, "nope")


# -- channels matched by name, checked files, against a live service ------------------


def test_match_channels_reorders_by_name_and_refuses_a_mismatch(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.csv"
    # ';'-delimited, newest first: read in time order, columns in the model's order
    path.write_text("ts;flat;c;a;b\n2;40;30;10;20\n1;4;3;1;2\n")
    s = match_channels(read_csv(path), ["a", "b", "c", "flat"], str(path))
    assert s.channels == ["a", "b", "c", "flat"] and list(s.ts) == [1.0, 2.0]
    np.testing.assert_array_equal(s.values, [[1, 2, 3, 4], [10, 20, 30, 40]])
    with pytest.raises(UserError) as e:
        match_channels(read_csv(path), ["a", "b", "c", "d"], str(path))
    msg = str(e.value)
    assert "lacks the model's channels ['d']" in msg
    assert "columns the model does not know ['flat']" in msg
    assert "--by-position" in msg
    # another number of channels: renaming or file order cannot help
    with pytest.raises(UserError) as e:
        match_channels(read_csv(path), ["a", "b", "c", "flat", "e"], str(path))
    assert "--by-position" not in str(e.value)
    assert "needs the model's 5 channel columns" in str(e.value)
    # the service keeps one reading per time: a repeated timestamp is refused here
    path.write_text("ts;a;b;c;flat\n1;1;2;3;4\n2;1;2;3;4\n1;5;6;7;8\n")
    with pytest.raises(DataError, match=r"rows 1 and 3 have the same timestamp '1'"):
        read_csv(path)


@pytest.fixture
def service_url(artifact_dir: Path, tmp_path: Path) -> Iterator[str]:
    """The service (memory store) on a loopback port, serving the tiny artifact
    (channels a, b, c, flat)."""
    url = f"http://127.0.0.1:{free_port()}"
    proc = demo.start_service(
        artifact_dir, int(url.rsplit(":", 1)[1]), tmp_path / "log"
    )
    try:
        import httpx

        with httpx.Client(base_url=url) as c:
            demo.wait_ready(c, proc, tmp_path / "log", timeout=60)
        yield url
    finally:
        demo.stop_service(proc)


def test_replay_cli_by_name_iso_times_and_refusals(
    service_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import httpx

    rng = np.random.default_rng(1)
    t0 = datetime(2024, 5, 1, tzinfo=UTC).timestamp()
    good = tmp_path / "pump.csv"
    lines = ["time,flat,c,b,a,label"]  # another order than the model's a, b, c, flat
    for i in range(120):
        stamp = datetime.fromtimestamp(t0 + i, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(",".join([stamp, *map(str, np.round(rng.normal(size=4), 3)), "0"]))
    good.write_text("\n".join(lines) + "\n")
    argv = ["replay", "--url", service_url, "--rate", "0", "--batch", "50"]
    assert scjepa([*argv, "--file", str(good)]) == 0
    out = capsys.readouterr().out
    assert f"{t0 + 99:.3f}  n=    100" in out  # ISO times sent as epoch seconds
    risk = httpx.get(f"{service_url}/risk/pump").json()
    assert risk["window_end"] == t0 + 99 and risk["risk"] is not None

    # a column the model does not know: refused before anything is sent
    bad = tmp_path / "other.csv"
    bad.write_text(good.read_text().replace("time,flat,", "time,temp,", 1))
    assert scjepa([*argv, "--file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "lacks the model's channels ['flat']" in err and "['temp']" in err
    assert "Traceback" not in err
    assert httpx.get(f"{service_url}/risk/other").status_code == 404
    # ... which --by-position sends in file order (four columns, four channels)
    assert scjepa([*argv, "--file", str(bad), "--by-position"]) == 0
    assert httpx.get(f"{service_url}/risk/other").json()["window_end"] == t0 + 99
    # the same file as MessagePack columns, on a stream of its own: the same risk
    assert (
        scjepa([*argv, "--file", str(good), "--body", "msgpack", "--stream", "mp"]) == 0
    )
    packed = httpx.get(f"{service_url}/risk/mp").json()
    assert (packed["window_end"], packed["risk"]) == (t0 + 99, risk["risk"])
