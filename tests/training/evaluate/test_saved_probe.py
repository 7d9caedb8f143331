"""probe.pt, the hand-off from `scjepa evaluate` to `scjepa export`: SavedProbe writes
it, reads it back (older dicts included) and refuses what export could not use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from training.errors import UserError
from training.evaluate.probe import (
    PROBE_FORMAT,
    Probe,
    ProbeConfig,
    SavedProbe,
    build_probe_net,
)


def make_probe(**changes: object) -> SavedProbe:
    rng = np.random.default_rng(0)
    f, y = rng.normal(size=(64, 6)).astype(np.float32), (rng.random(64) < 0.3)
    probe = Probe(6, ProbeConfig(hidden=8, max_epochs=3), seed=0)
    probe.fit(f, y.astype(np.int8), f, y.astype(np.int8))
    fields = {
        "state_dict": probe.net.state_dict(),
        "n_features": 6,
        "probe": probe.state(),
        "threshold": 0.4,
        "dataset": "synthetic",
        "channels": ["a", "b", "c"],
        "mask": [True, False, True],
        "metrics": {"val": {"f1": 0.5}},
        "checkpoint": "runs/x/best.pt",
        "data_fingerprint": "abc",
    }
    return SavedProbe(**(fields | changes))


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    probe = make_probe()
    probe.save(tmp_path / "sub" / "probe.pt")
    back = SavedProbe.load(tmp_path / "sub" / "probe.pt")
    for name in ("n_features", "probe", "threshold", "dataset", "channels", "mask"):
        assert getattr(back, name) == getattr(probe, name), name
    assert (back.budget_threshold, back.budget) == (None, None)  # none given
    budgeted = make_probe(budget_threshold=0.7, budget={"false_alarms_per_1000": 1.0})
    budgeted.save(tmp_path / "b.pt")
    back_b = SavedProbe.load(tmp_path / "b.pt")
    assert (back_b.budget_threshold, back_b.budget) == (0.7, budgeted.budget)
    assert (back.features, back.stats_scale, back.metrics) == (
        "codes",
        None,
        probe.metrics,
    )
    x = torch.randn(5, 6)
    with torch.no_grad():
        torch.testing.assert_close(
            back.build_net().eval()(x), probe.build_net().eval()(x)
        )
    assert back.platt == (
        probe.probe["calibration"]["a"],
        probe.probe["calibration"]["b"],
    )
    # on disk: a plain dict, readable without this class
    raw = torch.load(tmp_path / "sub" / "probe.pt", weights_only=False)
    assert isinstance(raw, dict) and raw["format_version"] == PROBE_FORMAT


def test_reads_the_older_dict_without_the_later_keys(tmp_path: Path) -> None:
    """probe.pt files from before SavedProbe: no format_version; the oldest also lack
    features, stats_scale and data_fingerprint (export read them with defaults); all
    of them lack the budget threshold."""
    probe = make_probe()
    old = {f: getattr(probe, f) for f in ("state_dict", "n_features", "probe")}
    old |= {"threshold": 0.4, "checkpoint": None, "dataset": "synthetic"}
    old |= {"channels": ["a", "b", "c"], "mask": [True, False, True], "metrics": {}}
    torch.save(old, tmp_path / "old.pt")
    back = SavedProbe.load(tmp_path / "old.pt")
    assert (back.features, back.data_fingerprint) == ("codes", "unknown")
    assert back.threshold == 0.4 and back.checkpoint is None
    assert (back.budget_threshold, back.budget) == (None, None)


def test_uncalibrated_probe_serves_the_plain_sigmoid() -> None:
    probe = make_probe()
    probe.probe["calibration"] = {"method": "none"}
    assert probe.problem() is None and probe.platt == (1.0, 0.0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "probe file not found"),
        (b"not a torch file", "not a readable probe file"),
        ([1, 2, 3], "not a served-probe file (a list, not a dict)"),
        ({"config": {}, "model": {}}, "not a served-probe file (no 'state_dict')"),
    ],
)
def test_missing_unreadable_or_foreign_files(
    tmp_path: Path, content: object, message: str
) -> None:
    path = tmp_path / "probe.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        torch.save(content, path)
    with pytest.raises(UserError, match=r"probe\.pt: ") as e:
        SavedProbe.load(path)
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_features": 7}, "weights do not fit 7 features"),
        ({"mask": [True]}, "3 channels but a mask of 1"),
        ({"features": "codes+stats"}, "without the 18 statistics' mean and std"),
        ({"features": "raw"}, "unknown features 'raw'"),
        ({"features": "stats+codes"}, "out of order"),
        ({"features": "codes+knn"}, "without its detectors' constants"),
        (
            {"features": "codes+knn", "detectors": {"scale_mean": [0.0, 1.0]}},
            "without its detectors' constants",
        ),
        ({"probe": {"config": {}, "calibration": {"method": "none"}}}, "no hidden"),
        ({"state_dict": [1, 2]}, "AttributeError"),
    ],
)
def test_corrupt_files_name_the_problem(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    make_probe(**changes).save(tmp_path / "probe.pt")
    with pytest.raises(UserError, match="corrupt probe file") as e:
        SavedProbe.load(tmp_path / "probe.pt")
    assert message in str(e.value) and str(tmp_path / "probe.pt") in str(e.value)


def test_a_later_format_is_refused(tmp_path: Path) -> None:
    d = {"format_version": PROBE_FORMAT + 1}
    probe = make_probe()
    d |= {k: getattr(probe, k) for k in ("state_dict", "n_features", "probe")}
    d |= {"threshold": 0.4, "dataset": "x", "channels": [], "mask": [], "metrics": {}}
    torch.save(d, tmp_path / "probe.pt")
    with pytest.raises(UserError, match=f"format_version {PROBE_FORMAT + 1}"):
        SavedProbe.load(tmp_path / "probe.pt")


def test_the_served_net_is_the_probe_net() -> None:
    net = make_probe().build_net()
    assert [type(m) for m in net] == [type(m) for m in build_probe_net(6, 8, 0.1)]


def _novelty() -> dict:
    rng = np.random.default_rng(1)
    return {
        "detectors": "knn+pca",
        "params": {
            "knn_k": 5,
            "knn_bank": rng.normal(size=(20, 12)).astype(np.float32),
            "knn_mean": np.zeros(12),
            "knn_std": np.ones(12),
            "pca_mean": np.zeros(200, np.float32),
            "pca_components": rng.normal(size=(3, 200)).astype(np.float32),
            "scale_mean": np.zeros(2),
            "scale_std": np.ones(2),
        },
        "rarity": {
            "calibration": torch.linspace(-2, 2, 50),
            "bandwidth": torch.tensor(0.3),
        },
        "level": 0.99,
        "expected_share": 0.01,
        "reference_windows": 20,
        "calibration_windows": 50,
    }


def test_the_novelty_record_round_trips_and_is_checked(tmp_path: Path) -> None:
    """The input-drift monitor's record comes back as saved; a broken one is refused
    naming what is wrong; files without one read None (older files)."""
    make_probe(novelty=_novelty()).save(tmp_path / "n.pt")
    back = SavedProbe.load(tmp_path / "n.pt").novelty
    assert back is not None and back["detectors"] == "knn+pca"
    np.testing.assert_array_equal(
        back["params"]["knn_bank"], _novelty()["params"]["knn_bank"]
    )
    torch.testing.assert_close(back["rarity"]["calibration"], torch.linspace(-2, 2, 50))
    assert {k: back[k] for k in ("level", "expected_share")} == {
        "level": 0.99,
        "expected_share": 0.01,
    }
    make_probe().save(tmp_path / "old.pt")
    assert SavedProbe.load(tmp_path / "old.pt").novelty is None
    for change, problem in [
        ({"detectors": "knn+surprise"}, "not knn/pca"),
        ({"rarity": {"calibration": torch.zeros(0), "bandwidth": torch.tensor(1.0)}},
         "no calibration scores"),
        ({"level": 1.5}, "level is not between 0 and 1"),
        ({"calibration_windows": 0}, "calibration_windows is not a positive count"),
    ]:  # fmt: skip
        make_probe(novelty=_novelty() | change).save(tmp_path / "bad.pt")
        with pytest.raises(UserError, match=problem):
            SavedProbe.load(tmp_path / "bad.pt")
    broken = _novelty()
    del broken["params"]["pca_components"]
    make_probe(novelty=broken).save(tmp_path / "bad.pt")
    with pytest.raises(UserError, match="lacks its detectors' constants"):
        SavedProbe.load(tmp_path / "bad.pt")
