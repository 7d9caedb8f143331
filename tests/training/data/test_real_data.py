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
