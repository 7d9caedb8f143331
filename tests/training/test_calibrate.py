"""`scjepa calibrate`: a served model for data without labels, end to end: an
unlabelled CSV -> the label-free probe -> `scjepa export` -> onnxruntime -> the service."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
import torch
from fastapi.testclient import TestClient
from support.train_helpers import TINY_MODEL

from service.config import Settings
from service.main import create_app
from service.manifest import load_manifest
from training.calibrate import budget_threshold
from training.cli import main
from training.data.windows import dense_windows
from training.evaluate.probe import SavedProbe
from training.export import build_served
from training.pretrain.checkpoint import load_model

N_ROWS, CHANNELS = 40_000, ["flow", "temp", "valve"]
TINY = [a for k, v in TINY_MODEL.items() for a in ("--set", f"model.{k}={v}")] + [
    "--set", "optim.epochs=1", "--set", "run.progress=false", "--set", "run.threads=1",
]  # fmt: skip


def _normal(rng: np.random.Generator, n: int) -> np.ndarray:
    t = np.arange(n)
    return np.c_[
        np.sin(t / 15.0) + 0.1 * rng.normal(size=n),
        20.0 + 0.2 * rng.normal(size=n),
        np.full(n, 3.0),  # constant: masked
    ].astype(np.float32)


POOLED = Path(__file__).resolve().parents[2] / "model/pretrained/scjepa-pooled.pt"


def _plant_csv(path: Path, x: np.ndarray, label: bool = False) -> list[str]:
    """Write ``x`` as a CSV a minute a row (all-0 labels with ``label``); calibrate's
    arguments on it with the shipped pooled encoder, writing ``p.pt`` beside it."""
    df = pd.DataFrame(x, columns=CHANNELS)
    df.insert(0, "timestamp", 60.0 * np.arange(len(df)))
    if label:
        df["label"] = 0
    df.to_csv(path, index=False)
    return ["calibrate", "--dataset", "csv", "--root", str(path),
            "--checkpoint", str(POOLED), "--out", str(path.parent / "p.pt")]  # fmt: skip


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("calibrate")
    run = ["pretrain", "--dataset", "synthetic", "--config", "configs/fast.yaml"]
    assert main([*run, *TINY, "--out", str(d / "run")]) == 0
    x = _normal(np.random.default_rng(0), N_ROWS)
    df = pd.DataFrame(x, columns=CHANNELS)
    df.insert(0, "timestamp", 60.0 * np.arange(N_ROWS))  # no label column
    df.to_csv(d / "plant.csv", index=False)
    ckpt, probe = d / "run" / "best.pt", d / "lf.pt"
    data = ["--dataset", "csv", "--root", str(d / "plant.csv")]
    assert (
        main(["calibrate", *data, "--checkpoint", str(ckpt), "--out", str(probe)]) == 0
    )
    art = d / "art"
    # with the (unlabelled) data: parity on its calibration windows too
    assert main(["export", "--checkpoint", str(ckpt), "--probe", str(probe),
                 "--out", str(art), *data]) == 0  # fmt: skip
    return {"dir": d, "ckpt": ckpt, "probe": probe, "art": art, "csv": d / "plant.csv"}


def _onnx_risk(art: Path, x: np.ndarray) -> np.ndarray:
    run = ort.InferenceSession(
        str(art / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    return run.run(["risk"], {"window": x.astype(np.float32)})[0]


def test_label_free_artifact_holds_its_budget_on_normal_data(
    calibrated: dict[str, Path],
) -> None:
    """The served threshold alerts on about the budget's share of normal windows it
    was not calibrated on, and on windows unlike them; ONNX matches PyTorch."""
    m = load_manifest(calibrated["art"])
    assert m.probe_features == "knn+pca" and m.channel_mask == [True, True, False]
    assert m.eval_metrics["onnx_parity"]["real_calibration"]["risk_max_abs"] < 1e-4
    rec = m.eval_metrics["threshold"]
    assert rec["rule"] == "budget" and rec["false_alarms_per_1000"] == 1.0
    assert rec["f1_threshold"] is None  # no labels, no F1 point (was the budget's)
    assert m.hop == 5 and m.eval_metrics["label_free"]["calibration_windows"] > 200
    # tighter budgets never alert more
    points = sorted(rec["operating_points"], key=lambda p: p["false_alarms_per_1000"])
    assert [p["threshold"] for p in points] == sorted(
        (p["threshold"] for p in points), reverse=True
    )
    fresh = _normal(np.random.default_rng(1), 20_000)  # new normal data
    normal = np.ascontiguousarray(dense_windows(fresh, 100, 5))
    risk = _onnx_risk(calibrated["art"], normal)
    assert risk.min() >= 0.0 and risk.max() < 1.0
    at10 = next(p["threshold"] for p in points if p["false_alarms_per_1000"] == 10)
    assert np.mean(risk >= m.threshold) < 0.005  # budget 1 / 1,000, sampling slack
    assert 0.002 < np.mean(risk >= at10) < 0.03  # budget 10 / 1,000
    assert 0.3 < np.median(risk) < 0.7  # a normal window ranks mid-way
    odd = normal[:8].copy()
    odd[:, 50:, 0] += 6.0  # a level shift in the flow
    assert np.all(_onnx_risk(calibrated["art"], odd) >= m.threshold)
    served = build_served(
        load_model(calibrated["ckpt"]), SavedProbe.load(calibrated["probe"])
    ).eval()
    with torch.no_grad():
        ref = served(torch.from_numpy(normal[:64]))[0].numpy()
    np.testing.assert_allclose(
        _onnx_risk(calibrated["art"], normal[:64]), ref, atol=1e-4
    )


def _onnx(art: Path, x: np.ndarray, outputs: list[str]) -> list[np.ndarray]:
    run = ort.InferenceSession(
        str(art / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    return list(run.run(outputs, {"window": x.astype(np.float32)}))


def test_the_artifact_carries_the_input_drift_monitor(
    calibrated: dict[str, Path],
) -> None:
    """The label-free probe's own head is its novelty record (it reads knn+pca): the
    graph's novelty output is its risk, as in PyTorch, about 0.5 on new normal windows
    and near 1 on windows whose level moved by 50 train standard deviations."""
    m = load_manifest(calibrated["art"])
    assert m.novelty is not None and m.novelty.detectors == "knn+pca"
    assert m.novelty.level == 0.99 and 0.0 < m.novelty.expected_share < 0.03
    lf = m.eval_metrics["label_free"]
    assert m.novelty.reference_windows == lf["reference_windows"]
    assert m.novelty.calibration_windows == lf["calibration_windows"]
    assert m.eval_metrics["onnx_parity"]["real_calibration"]["novelty_max_abs"] < 1e-4
    probe = SavedProbe.load(calibrated["probe"])
    assert probe.novelty is not None
    for key in ("calibration", "bandwidth"):
        torch.testing.assert_close(probe.novelty["rarity"][key], probe.state_dict[key])
    fresh = _normal(np.random.default_rng(11), 6_000)
    normal = np.ascontiguousarray(dense_windows(fresh, 100, 5))
    risk, novelty = _onnx(calibrated["art"], normal, ["risk", "novelty"])
    np.testing.assert_allclose(novelty, risk, atol=1e-6)
    assert novelty.shape == (len(normal),) and novelty.dtype == np.float32
    assert novelty.min() >= 0.0 and novelty.max() <= 1.0
    assert 0.3 < np.median(novelty) < 0.7 and np.mean(novelty >= 0.99) < 0.05
    shifted = normal[:16].copy()
    shifted[:, :, 0] += 50 * _normal(np.random.default_rng(0), N_ROWS)[:, 0].std()
    (far,) = _onnx(calibrated["art"], shifted, ["novelty"])
    assert far.min() > 0.999
    served = build_served(load_model(calibrated["ckpt"]), probe)
    with torch.no_grad():
        ref = served(torch.from_numpy(np.concatenate([normal[:32], shifted])))[4]
    np.testing.assert_allclose(np.r_[novelty[:32], far], ref.numpy(), atol=1e-4)


def test_other_detectors_still_record_the_knn_pca_monitor(tmp_path: Path) -> None:
    """A label-free probe on other detectors records a knn+pca monitor anyway, the
    same one a knn+pca probe of the same data records (the monitor means the same in
    every artifact)."""
    x = _normal(np.random.default_rng(9), 6000)
    base = _plant_csv(tmp_path / "plant.csv", x)
    assert main(base) == 0
    own = SavedProbe.load(tmp_path / "p.pt")
    assert main([*base[:-1], str(tmp_path / "q.pt"), "--detectors", "pca"]) == 0
    other = SavedProbe.load(tmp_path / "q.pt")
    assert other.features == "pca" and own.novelty and other.novelty
    assert other.novelty["detectors"] == "knn+pca"
    assert other.novelty["expected_share"] == own.novelty["expected_share"]
    for key in ("calibration", "bandwidth"):
        torch.testing.assert_close(
            other.novelty["rarity"][key], own.novelty["rarity"][key]
        )
    # not the pca head's own ranks
    ranks = other.state_dict["calibration"]
    assert not torch.equal(other.novelty["rarity"]["calibration"], ranks)


def test_label_free_artifact_serves(calibrated: dict[str, Path]) -> None:
    """The service runs the label-free artifact as any other: a normal stretch scores
    below the threshold, a shifted one alerts."""
    x = _normal(np.random.default_rng(2), 200)
    x[150:, 0] += 6.0
    body = {"stream": "p", "readings": [{"ts": 60.0 * i, "values": r.tolist()}
                                        for i, r in enumerate(x)]}  # fmt: skip
    m = load_manifest(calibrated["art"])
    thr = m.threshold
    with TestClient(create_app(Settings(artifact=calibrated["art"]))) as client:
        res = client.post("/ingest?wait=20", json=body).json()["results"][0]
        assert res["windows_scored"] > 10 and res["risk"] >= thr
        hist = client.get("/risk/p/history", params={"limit": 100}).json()["items"]
        first = min(hist, key=lambda h: h["window_end"])
        assert first["risk"] < thr  # the window before the shift
        text = client.get("/metrics").text
        page = client.get("/ui").text  # the live page says what the number is
        assert "how rare each 100-step window is" in page and "<b>next</b>" not in page
    # the paging monitor's yardstick: the calibration windows' pages at the point served
    point = next(
        p for p in m.eval_metrics["threshold"]["operating_points"]
        if p["false_alarms_per_1000"] == 1.0
    )  # fmt: skip
    cal = point["calibration"]
    assert "test" not in point and cal["windows"] > 200
    assert cal["false_pages_per_1000"] <= cal["false_alarms_per_1000"] <= 1.0
    low, high = cal["false_pages_per_1000_ci95"]
    assert low <= cal["false_pages_per_1000"] < high
    gauge = "scjepa_alert_evaluated_false_pages_per_1000_windows"
    got = {
        e: float(re.search(rf'\n{gauge}{{estimate="{e}"}} (\S+)\n', text).group(1))
        for e in ("mean", "upper95")
    }
    assert got == pytest.approx({"mean": cal["false_pages_per_1000"], "upper95": high})


def test_budget_threshold() -> None:
    """The lowest risk keeping at most the budget's share at or above it, ties
    counted; above every window where even one is too many."""
    risk = np.array([0.1] * 990 + [0.5] * 5 + [0.9] * 3 + [0.95, 0.99])
    t = budget_threshold(risk, 10.0, top=1.0)
    assert t == 0.5 and np.mean(risk >= t) <= 0.010
    t = budget_threshold(risk, 3.0, top=1.0)  # 3 of 1,000: 0.9 would give 5
    assert t == 0.95 and np.sum(risk >= t) == 2
    t = budget_threshold(risk, 0.1, top=1.0)  # none of 1,000 windows allowed
    assert 0.99 < t < 1.0 and not np.any(risk >= t)


def test_calibrate_errors_are_one_line(
    calibrated: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt, csv = str(calibrated["ckpt"]), str(calibrated["csv"])
    base = ["calibrate", "--dataset", "csv", "--root", csv, "--checkpoint", ckpt]
    out = ["--out", str(tmp_path / "p.pt")]
    assert main([*base, *out, "--detectors", "stats"]) == 2
    err = capsys.readouterr().err
    assert "--detectors stats" in err and "knn, pca, surprise, recon" in err
    assert len(err.strip().splitlines()) == 1
    short = tmp_path / "short.csv"
    pd.read_csv(csv).iloc[:400].to_csv(short, index=False)
    assert main([*base[:4], str(short), *base[5:], *out]) == 2
    err = capsys.readouterr().err
    assert "calibration windows" in err and "at least" in err
    assert not (tmp_path / "p.pt").exists()
    # a label-free probe has no F1 threshold to serve
    exp = ["export", "--checkpoint", ckpt, "--probe", str(calibrated["probe"])]
    assert main([*exp, "--out", str(tmp_path / "a"), "--threshold", "f1"]) == 2
    assert "label-free" in capsys.readouterr().err
    # nor labelled windows to keep an int8 variant on
    assert main([*exp, "--out", str(tmp_path / "a"), "--int8"]) == 2
    assert "--int8/--fp16" in capsys.readouterr().err


def test_calibrate_refuses_a_bad_stride_or_out_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--stride 0 fell back on the default stride without a word, a negative one
    ended in a numpy traceback, and --out naming a folder in torch's; each is one
    line now, before anything is computed or written."""
    base = _plant_csv(tmp_path / "plant.csv", _normal(np.random.default_rng(3), 3000))
    base, out = base[:-2], tmp_path / "p.pt"  # --out given below
    for stride in ("0", "-5"):
        assert main([*base, "--out", str(out), "--stride", stride]) == 2
        err = capsys.readouterr().err
        assert f"--stride {stride}" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "dir").mkdir()
    assert main([*base, "--out", str(tmp_path / "dir")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "folder" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_too_few_windows_names_the_remedy_that_helps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Too few calibration windows asked for a smaller --calibration-frac, which cuts
    them further (41 -> 1 on 2,000 rows); the hint now points each shortfall the way
    that helps, and following it calibrates."""
    base = _plant_csv(tmp_path / "plant.csv", _normal(np.random.default_rng(4), 2000))
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "41 calibration windows" in err and "a larger --calibration-frac" in err
    assert "smaller --calibration-frac" not in err
    assert main([*base, "--calibration-frac", "0.99"]) == 2  # the reference falls short
    err = capsys.readouterr().err
    assert "0 reference" in err and "a smaller --calibration-frac" in err
    assert "--stride" not in err
    assert main([*base, "--calibration-frac", "0.6"]) == 0
    assert (tmp_path / "p.pt").is_file()


def test_a_labelled_file_says_its_test_rows_are_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file with a `label` column is cut into train and test, and calibrate reads
    the train part only: the later half of the rows, the recent past the ranks
    should come from, was left out without a word. It is said now."""
    x = _normal(np.random.default_rng(5), 12_000)
    base = _plant_csv(tmp_path / "plant.csv", x, label=True)
    assert main(base) == 0
    err = capsys.readouterr().err
    assert "its 6000 labelled test rows are left out" in err and "--train-frac" in err
    assert SavedProbe.load(tmp_path / "p.pt").channels == CHANNELS  # not the label
    _plant_csv(tmp_path / "plant.csv", x)
    assert main(base) == 0  # without labels, every row is read: nothing to say
    assert "left out" not in capsys.readouterr().err


def test_export_refuses_data_other_than_the_calibration_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export --dataset` cuts the probe's calibration windows again for its parity
    check: from other data it cut other windows and called them the calibration ones
    (or, from a short file, failed naming calibrate's --calibration-frac, which export
    has not). Other data are refused in one line now."""
    assert (
        main(
            _plant_csv(tmp_path / "plant.csv", _normal(np.random.default_rng(6), 6000))
        )
        == 0
    )
    _plant_csv(tmp_path / "newer.csv", _normal(np.random.default_rng(7), 6000))
    capsys.readouterr()
    other = ["--dataset", "csv", "--root", str(tmp_path / "newer.csv")]
    exp = ["export", "--checkpoint", str(POOLED), "--probe", str(tmp_path / "p.pt")]
    assert main([*exp, *other, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "not the data the label-free probe was calibrated on" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "a").exists()


def test_calibration_windows_all_alike_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows whose last part is one repeated pattern (a sensor stuck) gave calibration
    windows that all score alike: a probe file whose every threshold was 0.75, a risk
    of 0.5 or 1 by float32 rounding, and an export with the data that failed its
    parity check 240 times over. calibrate refuses them in one line now."""
    x = _normal(np.random.default_rng(8), 6000)
    x[4700:, :2] = [0.5, 20.0]  # stuck from before the calibration rows (4,800 on)
    base = _plant_csv(tmp_path / "plant.csv", x)
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "calibration windows all score alike on knn+pca" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "p.pt").exists()
    assert main([*base, "--calibration-frac", "0.3"]) == 0  # a varying part included
