"""The scorer's risk records of a batch (service.worker.records_of), from its arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from service.inference import Scores, load_model
from service.manifest import Budget
from service.store import Window
from service.worker import records_of


def test_records_of_a_batch(artifact_dir: Path) -> None:
    """Top channels by share, ties in channel order, zero shares left out; the risk,
    alert, codes and window span of each row; one model and one time per batch."""
    model = load_model(artifact_dir)  # channels a, b, c, flat; threshold 0.5
    contrib = np.array(
        [[0.2, 0.5, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.5, 0.0]],
        np.float32,
    )
    scores = Scores(
        risk=np.array([0.9, 0.1, 0.5], np.float32),
        contrib=contrib,
        codes=np.array([[1, 2], [3, 4], [5, 6]], np.int64),
        by=model,
    )
    x = np.zeros((100, 4), np.float32)
    windows = [Window(100 + i, float(i), float(i + 99), x) for i in range(3)]
    recs = records_of(model, 2, windows, scores, ["t"] * 3)
    assert [[(c.name, c.share) for c in r.top_channels] for r in recs] == [
        [("b", 0.5), ("c", 0.3)],
        [],
        [("c", 0.5), ("a", 0.25)],
    ]
    assert [r.risk for r in recs] == [float(np.float32(v)) for v in (0.9, 0.1, 0.5)]
    assert [r.alert for r in recs] == [True, False, True]  # risk >= threshold
    assert [r.codes for r in recs] == [[1, 2], [3, 4], [5, 6]]
    assert [(r.n, r.window_start, r.window_end) for r in recs] == [
        (100, 0.0, 99.0),
        (101, 1.0, 100.0),
        (102, 2.0, 101.0),
    ]
    assert {(r.model.name, r.model.version, r.computed_at) for r in recs} == {
        ("tiny", "0.0.1", recs[0].computed_at)
    }


def test_records_are_at_each_tenants_threshold(art_points: Path) -> None:
    """A tenant served at an operating point of its own (SCJEPA_TENANT_FA_BUDGET) has
    its windows' threshold and alert at it; the others at the manifest's."""
    model = load_model(art_points)  # threshold 0.9; points 1 (0.9) and 3 (0.25)
    model.serve_tenants({"acme": Budget(3.0)})
    scores = Scores(
        risk=np.array([0.3, 0.3, 0.95], np.float32),
        contrib=np.ones((3, 4), np.float32),
        codes=np.zeros((3, 2), np.int64),
        by=model,
    )
    x = np.zeros((100, 4), np.float32)
    windows = [Window(100 + i, float(i), float(i + 99), x) for i in range(3)]
    recs = records_of(model, 2, windows, scores, ["acme", "globex", "globex"])
    assert [(r.threshold, r.alert) for r in recs] == [
        (0.25, True),
        (0.9, False),
        (0.9, True),
    ]
