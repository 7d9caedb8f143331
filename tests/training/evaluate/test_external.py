"""Other benchmarks' metrics on our alerts (training/evaluate/external.py): SKAB's
outlier and NAB changepoint scores as its core/metrics.py defines them, Daphnet's
pre-freeze sensitivity / specificity, on hand-made series with hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from training.evaluate.external import (
    point_predictions,
    prefreeze,
    skab_binary,
    skab_nab,
)


def test_point_predictions_hold_the_last_score() -> None:
    # windows end at 3, 5, 8: steps 3-4 take the first alert, 5-7 the second, 8- the third
    p = point_predictions(10, np.array([5, 3, 8]), np.array([False, True, True]))
    assert p.tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]


def test_skab_binary_by_hand() -> None:
    y = [np.array([0, 0, 1, 1, 1, 0]), np.array([0, 1, 1, 0])]
    p = [np.array([0, 1, 1, 0, 1, 0]), np.array([0, 0, 1, 1])]
    # TP 3, FP 2, FN 2, TN 3
    m = skab_binary(y, p)
    assert m["f1"] == pytest.approx(3 / (3 + (2 + 2) / 2))
    assert m["far"] == pytest.approx(100 * 2 / 5)
    assert m["mar"] == pytest.approx(100 * 2 / 5)


def scale(pos: float) -> float:
    """SKAB's improved NAB scale at a relative position in [0, 1) of the window."""
    x = np.linspace(-np.pi / 2, np.pi / 2, 1000)
    y = 1.11 / 2 * -np.tanh(x) / np.tanh(np.pi / 2) + 1.11 / 2 - 0.11  # Standard
    return float(y[min(int(pos * 1000), 999)])


def test_skab_nab_perfect_null_and_penalties() -> None:
    t = np.arange(400.0)  # seconds
    cp = np.zeros(400, int)
    cp[[100, 250]] = 1  # fault from 100 to 250
    perfect = np.zeros(400, int)
    perfect[100:250] = 1  # its changes fall on both change points
    assert skab_nab([cp], [perfect], [t]) == pytest.approx(
        {"Standard": 100.0, "LowFP": 100.0, "LowFN": 100.0}
    )
    null = np.zeros(400, int)
    assert skab_nab([cp], [null], [t])["Standard"] == pytest.approx(0.0)
    # late by 30 s on the first change point, an extra blip at 350 (2 FPs: up, down)
    late = np.zeros(400, int)
    late[130:250] = 1
    late[350] = 1
    s = 1.0 + scale(30 / 60) - 0.11 * 2
    want = 100 * (s - (-2)) / (2 - (-2))
    assert skab_nab([cp], [late], [t])["Standard"] == pytest.approx(want)
    # a prediction running from the first step: its first value counts as a change
    first = np.ones(400, int)
    got = skab_nab([cp], [first], [t])["Standard"]
    assert got == pytest.approx(100 * (-0.11 - 2 - (-2)) / 4)


def test_skab_nab_windows_cut_on_the_right_and_use_time() -> None:
    # change points 40 s apart: the second window starts where the first ends (100 s)
    t = np.arange(0.0, 400.0, 2.0)  # rows 2 s apart: 60 s is 30 rows
    cp = np.zeros(200, int)
    cp[[20, 40]] = 1  # at 40 s and 80 s
    pred = np.zeros(200, int)
    pred[50:] = 1  # one change at 100 s: the first window's end = the second's start
    # inclusive boundaries: it is the (last) TP of window 1 and the first of window 2
    s = scale(60 / 60) + scale(0.0)
    assert skab_nab([cp], [pred], [t])["Standard"] == pytest.approx(100 * (s + 2) / 4)


def brute_prefreeze(y, ends, alerts, window, lookback):
    pre, norm = [], []
    for e, a in zip(ends, alerts, strict=True):
        own = y[e - window : e].any()
        ahead = y[e : e + lookback + 1]
        starts = [
            t for t in range(e, min(e + lookback + 1, len(y))) if y[t] and not y[t - 1]
        ]
        if not own and starts:
            pre.append(a)
        if not own and not y[e : e + lookback + 1].any():
            norm.append(not a)
        del ahead
    return np.mean(pre), np.mean(norm), len(pre), len(norm)


@pytest.mark.parametrize("seed", range(10))
def test_prefreeze_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = np.zeros(600, int)
    for on in rng.choice(np.arange(60, 560), 4, replace=False):
        y[on : on + int(rng.integers(5, 30))] = 1
    ends = np.arange(20, 600, 7)
    alerts = rng.random(len(ends)) < 0.3
    got = prefreeze([y], [ends], [alerts], window=20, lookback=15)
    sens, spec, n_pre, n_norm = brute_prefreeze(y, ends, alerts, 20, 15)
    assert (got["prefreeze_windows"], got["normal_windows"]) == (n_pre, n_norm)
    assert got["sensitivity"] == pytest.approx(sens)
    assert got["specificity"] == pytest.approx(spec)
