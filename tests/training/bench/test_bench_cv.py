"""`scjepa bench cv`: the cross-validation one fit after another and in forked workers,
timed, with the workers' out-of-fold risks equal to the serial ones to the bit."""

from __future__ import annotations

import json
from pathlib import Path

from training.cli import main


def test_bench_cv_times_the_runs_and_checks_the_risks(tmp_path: Path) -> None:
    # the cheapest candidate; the others' workers: tests/training/evaluate/test_parallel.py
    out = tmp_path / "cv.json"
    bench = ["bench", "cv", "--dataset", "synthetic", "--cv-seeds", "1"]
    assert main([*bench, "--candidates", "stats (trees)", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["jobs"] == 2 and got["fits_per_candidate"] == got["blocks"] == 4
    assert list(got["candidates"]) == ["stats (trees)"]
    r = got["candidates"]["stats (trees)"]
    assert r["risks_equal"] is True
    for k in ("serial_1_s", "serial_n_s", "forked_1_s", "forked_n_s"):
        assert r[k] > 0
    ratio = r["serial_n_s"] / r["forked_n_s"]  # of the rounded times
    assert abs(r["speedup_vs_serial_n"] - ratio) < 0.02 * ratio + 0.01
    assert got["cpu"] and len(got["load_before"]) == 3 and got["peak_rss_mb"] > 0
    assert (
        got["commit"] and len(got["load_after"]) == 3 and "serial_n" in got["baseline"]
    )
    # a bad request is refused, naming the option
    assert main([*bench, "--jobs", "1"]) == 2
    assert main([*bench, "--candidates", "stats (mlp)"]) == 2
