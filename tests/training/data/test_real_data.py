"""The real MSL and SMD-19 data agree with the figures in docs/evaluation.md and
docs/reference/data.md ("The real data in numbers")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from training.data import load_dataset
from training.data.stats import dataset_stats

pytestmark = pytest.mark.real_data


def test_msl_shapes_and_rates(data_root: Path) -> None:
    ds = load_dataset("msl", data_root)
    assert len(ds.entities) == 27
    assert sum(len(e.train) for e in ds.entities) == 58317
    assert sum(len(e.test) for e in ds.entities) == 73729
    labels = np.concatenate([e.labels for e in ds.entities])
    assert labels.mean() == pytest.approx(0.1053, abs=5e-4)

    st = dataset_stats(ds)
    assert st["concatenated"]["onset_rate"] == pytest.approx(0.056, abs=0.001)
    test = st["splits"]["test"]
    assert (test["windows"], test["positives"], test["onsets"]) == (149, 31, 7)
    p = test["prevalence"]
    assert 2 * p / (1 + p) == pytest.approx(0.34, abs=0.005)  # always-positive F1


def test_smd19_rates(data_root: Path) -> None:
    ds = load_dataset("smd", data_root)
    assert len(ds.entities) == 19 and len(ds.channels) == 38
    st = dataset_stats(ds)
    test = st["splits"]["test"]
    assert test["onsets"] == 47
    p = test["prevalence"]
    assert 2 * p / (1 + p) == pytest.approx(0.23, abs=0.005)
    assert 140_000 <= st["pretrain_pairs"]["train"] <= 150_000


def test_skab_runs_events_and_folds(data_root: Path) -> None:
    """SKAB as the datasets README counts it: 34 labelled runs (16 valve1, 4 valve2,
    14 other), one fault each, onsets 557-578 but for three runs, 37,401 rows."""
    ds = load_dataset("skab", data_root)
    runs = [e for e in ds.entities if e.test is not None]
    assert len(runs) == 34 and len(ds.channels) == 8
    assert [sum(e.group == g for e in runs) for g in ("valve1", "valve2", "other")] == [
        16,
        4,
        14,
    ]
    assert sum(len(e.test) for e in runs) == 37401
    onsets = {e.name: int(np.argmax(e.labels)) for e in runs}
    odd = {n: o for n, o in onsets.items() if not 557 <= o <= 578}
    assert odd == {"other/2": 104, "other/13": 495, "other/4": 796}
    assert sum(int(e.aux["changepoint"].sum()) for e in runs) == 129
    assert len(ds.entities[0].train) == 9405  # the anomaly-free run
    st = dataset_stats(ds)
    assert (
        st["splits"]["test"]["onsets"] == 34
    )  # pooled over the 5 folds: every run once


def test_daphnet_subjects_and_freezes(data_root: Path) -> None:
    """The 7 recordings: 205,768 experiment rows, 43 freeze onsets, 5 subjects."""
    from training.evaluate.events import events

    ds = load_dataset("daphnet", data_root)
    assert sum(len(e.test) for e in ds.entities) == 205768
    assert sum(len(events(e.labels)) for e in ds.entities) == 43
    assert sorted({e.group for e in ds.entities}) == ["S01", "S02", "S03", "S06", "S07"]
    assert len(ds.folds) == 5
