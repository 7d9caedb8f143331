"""`scjepa evaluate --dataset csv` on a user's labels that leave a split without
anomalies: undefined figures are n/a (null in results.json), never zeros; no baseline
is "best on validation" when validation has nothing to rank on; bad option values are
one line, before any work."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.json_helpers import strict_loads

from training.cli import main
from training.evaluate.metrics import best_f1_threshold, confusion
from training.evaluate.warning import best_baselines

TRAIN_ROWS, TEST_ROWS = 1600, 2000  # the documented minimums are 1,500 and 900


def _csv_folder(root: Path, anomalies: list[tuple[int, int]]) -> Path:
    """train.csv (no label) and test.csv with label 1 on ``anomalies`` (row ranges),
    2 channels; the 6:2:2 split of test.csv: rows <1200 / 1200-1600 / >=1600."""
    rng = np.random.default_rng(0)
    root.mkdir()
    for name, n, t0 in (("train", TRAIN_ROWS, 0), ("test", TEST_ROWS, TRAIN_ROWS)):
        t = np.arange(n) + t0
        x = np.stack([np.sin(t / 20), np.cos(t / 35)], 1) + 0.3 * rng.normal(
            size=(n, 2)
        )
        y = np.zeros(n, int)
        if name == "test":
            for a, b in anomalies:
                y[a:b], x[a:b] = 1, x[a:b] + 3
        head = "timestamp,a,b" + (",label" if name == "test" else "")
        lines = [head] + [
            f"{t[i]},{x[i, 0]:.4f},{x[i, 1]:.4f}"
            + (f",{y[i]}" if name == "test" else "")
            for i in range(n)
        ]
        (root / f"{name}.csv").write_text("\n".join(lines) + "\n")
    return root


FAST = [
    "--seeds", "1", "--n-boot", "5", "--ts2vec-iters", "0", "--threads", "1",
    "--no-tree-probes", "--no-fine-tune", "--cv-seeds", "1",
    "--probe", "hidden=8", "--probe", "max_epochs=5",
]  # fmt: skip


def test_no_positive_window_has_no_recall_or_f1() -> None:
    """Recall and F1 of the anomaly class need an anomaly; precision needs an alert."""
    y, s = np.zeros(4), np.array([0.1, 0.2, 0.3, 0.4])
    quiet = confusion(y, s, 1.0)  # nothing flagged, nothing to flag
    assert all(math.isnan(quiet[k]) for k in ("precision", "recall", "f1"))
    noisy = confusion(y, s, 0.3)  # two false alerts: every alert false
    assert noisy["precision"] == 0.0
    assert math.isnan(noisy["recall"]) and math.isnan(noisy["f1"])
    # with positives the figures are defined as before: all missed is F1 0
    assert confusion(np.array([1, 0]), np.array([0.0, 0.0]), 0.5) == {
        "precision": 0.0,
        "recall": 0.0,
        "f1": 0.0,
    }


def test_threshold_without_validation_positives_flags_nothing() -> None:
    """Validation without a positive: the threshold lies above every score, at any
    scale (kNN distances of unscaled readings: max + 1e-12 was the max itself)."""
    for scale in (1.0, 1e5, 1e12):
        s = np.array([0.2, 0.9, 0.5]) * scale
        t = best_f1_threshold(np.zeros(3), s)
        assert not (s >= t).any()
    assert best_f1_threshold(np.zeros(2), np.array([0.0, 1.0])) == 1.0 + 1e-12


def test_no_best_baseline_without_validation_pr_auc() -> None:
    nan = {"mean": float("nan"), "std": float("nan")}

    def row(pr: float) -> dict[str, Any]:
        return {"val": {"pr_auc": {"mean": pr, "std": 0.0} if pr == pr else nan}}

    rows = {
        "persistence (IForest)": row(float("nan")),
        "kNN to train windows": row(float("nan")),
    }
    assert best_baselines(rows)["window"] is None  # was the first row listed
    rows["PCA reconstruction"] = row(0.3)
    assert best_baselines(rows)["window"] == "PCA reconstruction"


def test_untrained_twins_are_baselines_to_beat() -> None:
    """evaluation.md item 7: the SC-JEPA probe on an untrained encoder is a row the
    model must beat, so it can be the best baseline (it was never one); the trained
    SC-JEPA rows, the floors and the no-SC-JEPA refits cannot."""

    def row(pr: float, warned: float) -> dict[str, Any]:
        return {
            "val": {"pr_auc": {"mean": pr, "std": 0.0}},
            "val_events": {
                "warned_rate": {"mean": warned},
                "false_alarms_per_1000_windows": {"mean": 0.5},
            },
        }

    rows = {
        "always-positive": row(0.9, 0.9),
        "kNN to train windows": row(0.3, 0.05),
        "SC-JEPA probe": row(0.8, 0.8),
        "SC-JEPA probe on detector scores": row(0.7, 0.7),
        "probe on kNN + PCA (no SC-JEPA)": row(0.6, 0.6),
        "SC-JEPA probe, untrained encoder": row(0.4, 0.02),
        "SC-JEPA fine-tuned + stats, untrained model (trees)": row(0.35, 0.1),
    }
    assert best_baselines(rows) == {
        "window": "SC-JEPA probe, untrained encoder",
        "events": "SC-JEPA fine-tuned + stats, untrained model (trees)",
    }


def test_test_split_without_anomalies_reads_na(tmp_path: Path) -> None:
    """Anomalies only in the first 80 % of test.csv: the test split has none, so its
    recall and F1 are n/a in results.json and in the report (they were 0.000), and the
    run prints no numpy warning about it. results.json is strict JSON: undefined is
    null (it was NaN, which JSON.parse, Go and dashboards refuse)."""
    root = _csv_folder(
        tmp_path / "data", [(300, 350), (700, 750), (1300, 1350), (1450, 1500)]
    )
    out = tmp_path / "ev"
    args = ["evaluate", "--dataset", "csv", "--root", str(root), "--out", str(out)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert main([*args, *FAST]) == 0
    res = strict_loads((out / "results.json").read_text())
    assert res["splits"]["test"]["positives"] == 0
    assert res["splits"]["val"]["positives"] > 0
    for name in ("kNN to train windows", "raw-feature probe (MLP)"):
        a = res["rows"][name]["all"]
        assert a["recall"]["mean"] is None and a["f1"]["mean"] is None, name
    doc = tmp_path / "r.md"
    assert main(["report", str(out), "--out", str(doc)]) == 0
    line = next(
        x for x in doc.read_text().splitlines() if x.startswith("| kNN to train")
    )
    assert line.split(" | ")[1] == "n/a" and line.split(" | ")[5] == "n/a"  # F1, recall


def test_validation_without_anomalies_names_no_best_baseline(tmp_path: Path) -> None:
    """No anomaly in the validation part (rows 1200-1600): no validation PR AUC, so no
    row is the best baseline "on validation PR AUC" (it was the first one listed). No
    threshold is set at the false-alarm budget either: null in results.json (it was
    Infinity, not JSON), a threshold that never alerts."""
    root = _csv_folder(
        tmp_path / "data", [(300, 350), (700, 750), (1000, 1050), (1750, 1800)]
    )
    out = tmp_path / "ev"
    args = ["evaluate", "--dataset", "csv", "--root", str(root), "--out", str(out)]
    assert main([*args, *FAST]) == 0
    res = strict_loads((out / "results.json").read_text())
    assert res["splits"]["val"]["positives"] == 0
    assert res["best_baseline"]["window"] is None
    knn = res["rows"]["kNN to train windows"]["events"]["budget"]
    assert knn["thresholds"] == [None] and knn["warned"]["mean"] == 0
    assert main(["report", str(out), "--out", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "best baseline on validation PR AUC (-)" in text
    assert (
        "(best baseline)" not in text.split("Window metrics (hop")[1].split("Event")[0]
    )


@pytest.mark.parametrize(
    "bad, said",
    [
        (["--seeds", "0"], "--seeds 0: must be >= 1"),
        (["--n-boot", "-1"], "--n-boot -1: must be >= 0"),
        (["--threads", "-1"], "--threads -1: must be >= 0"),
        (["--fa-budget", "-1"], "--fa-budget -1: false alarms per 1,000 windows"),
        (["--fa-budget", "nan"], "--fa-budget nan: false alarms per 1,000 windows"),
        (["--probe", "hidden=abc"], "--probe hidden=abc: hidden takes an integer"),
        (
            ["--probe", "max_epochs=-1"],
            "--probe max_epochs=-1: max_epochs must be >= 1",
        ),
        (["--probe", "hidden=0"], "--probe hidden=0: hidden must be >= 1"),
        (["--probe", "select_on=auc"], "--probe select_on=auc: select_on is one of"),
        (["--probe", "class_weight=maybe"], "class_weight is true or false"),
    ],
)
def test_bad_values_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list[str], said: str
) -> None:
    """Refused before the data are read (the root does not even exist): each was a
    traceback (--seeds 0, --n-boot -1, --threads -1, --probe hidden=abc or
    max_epochs=-1) or a run with a meaningless budget ("within -1 per 1,000 windows")."""
    args = ["evaluate", "--dataset", "csv", "--root", str(tmp_path / "none")]
    assert main([*args, "--out", str(tmp_path / "ev"), *bad]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
