"""The tree probe: scikit-learn's boosted trees as model/trees.py's tensor ops (the
same scores, in evaluation and in the served graph), stopped and calibrated on
validation like the MLP, saved and refused like the MLP's probe.pt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.ensemble import HistGradientBoostingClassifier

from model.trees import TreeEnsemble
from training.evaluate.probe import (
    Probe,
    ProbeConfig,
    SavedProbe,
    Splits,
    _Gaps,
    trees_state,
)


def data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features on a coarse grid (many rows sit exactly on a split value) and a
    non-linear target."""
    rng = np.random.default_rng(seed)
    x = (np.round(rng.normal(size=(n, 5)) * 4) / 4 + 1e-3).astype(np.float32)
    y = (x[:, 0] * x[:, 1] + np.abs(x[:, 2]) + rng.normal(size=n) > 1).astype(np.int8)
    return x, y


@pytest.mark.parametrize("stages", [1, 7, 60])
def test_tensor_trees_equal_scikit_learn(stages: int) -> None:
    x, y = data(600)
    clf = HistGradientBoostingClassifier(
        max_iter=60, max_leaf_nodes=9, early_stopping=False, random_state=1
    ).fit(x[:400], y[:400], sample_weight=np.where(y[:400] == 1, 2.5, 1.0))
    want = list(clf.staged_decision_function(x[400:]))[stages - 1].ravel()
    trees = TreeEnsemble.from_state(trees_state(clf, stages, Splits(x[:400])))
    with torch.no_grad():
        got = trees(torch.from_numpy(x[400:])).squeeze(1).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    # the float32 split rule: a row at the float32 nearest a threshold goes where
    # scikit-learn sends it
    root = clf._predictors[0][0].nodes[0]
    at = x[400:401].copy()
    at[0, root["feature_idx"]] = np.float32(root["num_threshold"])
    with torch.no_grad():
        got_at = trees(torch.from_numpy(at)).item()
    want_at = list(clf.staged_decision_function(at))[stages - 1].item()
    assert got_at == pytest.approx(want_at, abs=1e-5)


def test_tree_probe_stops_and_calibrates_on_validation() -> None:
    x, y = data(900)
    cfg = ProbeConfig(kind="trees", max_trees=80)
    probe = Probe(5, cfg, seed=0).fit(x[:500], y[:500], x[500:700], y[500:700])
    assert len(probe.net.state_dict()["roots"]) == 80  # by default every stage
    stop = ProbeConfig(kind="trees", max_trees=80, tree_select_on="val_loss")
    stopped = Probe(5, stop, seed=0).fit(x[:500], y[:500], x[500:700], y[500:700])
    losses = [h["val_loss"] for h in stopped.history]
    assert len(losses) == 80 and stopped.best_epoch == int(np.argmin(losses))
    assert len(stopped.net.state_dict()["roots"]) == stopped.best_epoch + 1 < 80
    assert probe.calibrator is not None
    risk = probe.predict(x[700:])
    assert ((risk > 0) & (risk < 1)).all()
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(y[700:], risk) > 0.75  # it learned the target
    # all features per split: the seed changes nothing; a share of them: it does
    same = Probe(5, cfg, seed=1).fit(x[:500], y[:500], x[500:700], y[500:700])
    np.testing.assert_array_equal(same.predict(x[700:]), risk)
    cfg.max_features = 0.5
    a, b = (
        Probe(5, cfg, seed).fit(x[:500], y[:500], x[500:700], y[500:700])
        for seed in (0, 1)
    )
    assert not np.allclose(a.predict(x[700:]), b.predict(x[700:]))


def test_tree_count_follows_select_on() -> None:
    """tree_select_on="val_auc" (with class weights) stops the trees where validation
    ROC AUC peaks, as select_on stops the MLP's epochs."""
    from training.evaluate.metrics import roc_auc

    x, y = data(700)
    cfg = ProbeConfig(
        kind="trees", max_trees=40, tree_select_on="val_auc", tree_class_weight=True
    )
    probe = Probe(5, cfg, seed=0).fit(x[:400], y[:400], x[400:], y[400:])
    from sklearn.ensemble import HistGradientBoostingClassifier as H

    clf = H(max_iter=40, learning_rate=0.05, max_leaf_nodes=15, early_stopping=False)
    n_pos = float(y[:400].sum())
    w = float(np.float32((400 - n_pos) / n_pos))  # the probe's float32 class weight
    clf.fit(x[:400], y[:400], sample_weight=np.where(y[:400] == 1, w, 1.0))
    aucs = [roc_auc(y[400:], z.ravel()) for z in clf.staged_decision_function(x[400:])]
    assert probe.best_epoch == int(np.argmax(aucs))


def test_saved_tree_probe_round_trips_and_is_checked(tmp_path: Path) -> None:
    x, y = data(400)
    probe = Probe(5, ProbeConfig(kind="trees", max_trees=20), seed=0)
    probe.fit(x[:300], y[:300], x[300:], y[300:])
    saved = SavedProbe(
        state_dict=probe.net.state_dict(),
        n_features=5,
        probe=probe.state(),
        threshold=0.5,
        dataset="synthetic",
        channels=["a"],
        mask=[True],
        metrics={},
        features="stats",
        stats_scale={"mean": [0.0] * 18, "std": [1.0] * 18},
    )
    back = SavedProbe.load(saved.save(tmp_path / "probe.pt"))
    assert back.kind == "trees"
    with torch.no_grad():
        got = back.build_net()(torch.from_numpy(x)).squeeze(1).numpy()
    np.testing.assert_allclose(got, probe.logits(x), atol=1e-6)
    # refused: trees without their leaves, trees reading a feature the probe lacks
    broken = dict(saved.state_dict)
    del broken["value"]
    saved.state_dict = broken
    assert "lack value" in (saved.problem() or "")
    saved.state_dict = probe.net.state_dict()
    saved.n_features = int(saved.state_dict["feature"].max())
    assert "beyond" in (saved.problem() or "")


def test_unknown_probe_kind_is_refused() -> None:
    from training.errors import UserError

    with pytest.raises(UserError, match="probe kind 'forest'"):
        Probe(5, ProbeConfig(kind="forest"), seed=0)
    with pytest.raises(UserError, match="tree_select_on 'auc'"):
        Probe(5, ProbeConfig(kind="trees", tree_select_on="auc"), seed=0)


def test_unweighted_tree_probe_is_the_unit_weight_fit() -> None:
    """Without class weights the probe fits with no sample_weight (scikit-learn then
    bins with np.percentile, not its slow weighted percentile): the trees must be those
    of the unit-weight fit, on features with more distinct values than bins and on
    features on a coarse grid."""
    rng = np.random.default_rng(3)
    x = np.c_[rng.normal(size=(1500, 3)), data(1500)[0][:, :2]].astype(np.float32)
    y = (x[:, 0] + x[:, 3] * x[:, 4] + rng.normal(size=1500) > 1).astype(np.int8)
    probe = Probe(5, ProbeConfig(kind="trees", max_trees=40), seed=0)
    probe.fit(x[:1000], y[:1000], x[1000:1200], y[1000:1200])
    clf = HistGradientBoostingClassifier(
        max_iter=40, learning_rate=0.05, max_leaf_nodes=15, early_stopping=False
    ).fit(x[:1000], y[:1000], sample_weight=np.ones(1000))
    trees = TreeEnsemble.from_state(trees_state(clf, 40, Splits(x[:1000])))
    with torch.no_grad():
        want = trees(torch.from_numpy(x[1200:])).squeeze(1).numpy()
    np.testing.assert_allclose(probe.logits(x[1200:]), want, atol=1e-5)


def test_splits_sit_midway_between_training_values() -> None:
    """A discrete sensor repeats its values, and scikit-learn's percentile split can
    equal one of them: rows at that value then change sides with a few ulps of float
    rounding (PyTorch and onnxruntime differ by that much), and the export's parity
    fails. The served splits sit midway between neighbouring training values: every
    training row scores as under scikit-learn, and ulp noise moves none of them."""
    rng = np.random.default_rng(5)
    # more distinct values than bins (percentile splits), each repeated
    x = (np.round(rng.normal(size=(3000, 3)) * 150) / 100).astype(np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] + rng.normal(size=3000) > 1).astype(np.int8)
    clf = HistGradientBoostingClassifier(
        max_iter=30, max_leaf_nodes=15, early_stopping=False, random_state=0
    ).fit(x, y)
    on_value = [
        n["num_threshold"] in set(x[:, n["feature_idx"]].astype(np.float64))
        for (tree,) in clf._predictors
        for n in tree.nodes
        if not n["is_leaf"]
    ]
    assert any(on_value)  # the case: scikit-learn splits at a training value
    trees = TreeEnsemble.from_state(trees_state(clf, 30, Splits(x)))
    internal = trees.left != torch.arange(len(trees.left))
    for f, t in zip(trees.feature[internal], trees.threshold[internal], strict=True):
        assert not (x[:, int(f)] == t.item()).any()
    noisy = x * (1 + rng.choice([-1, 1], size=x.shape) * 3e-7).astype(np.float32)
    assert (noisy != x).mean() > 0.9
    with torch.no_grad():
        got = trees(torch.from_numpy(x)).squeeze(1).numpy()
        got_noisy = trees(torch.from_numpy(noisy)).squeeze(1).numpy()
    np.testing.assert_allclose(got, clf.decision_function(x), atol=1e-5)
    np.testing.assert_array_equal(got_noisy, got)
    # scikit-learn's own splits move rows under that noise
    assert (clf.decision_function(noisy) != clf.decision_function(x)).any()


def test_a_split_inside_a_noise_group_moves_to_its_edge() -> None:
    """Values within float noise of each other (one window encoded in two batches) are
    one value: a split between them moves out of the group, the way most of its
    training rows went, to the middle of the gap beside it."""
    col = np.float32([1.0, 1.0, 1.00001, 2.0, 2.00002, 2.00002, 2.00002, 3.0, 3.0])
    g = _Gaps(col)
    u1, u2 = float(np.float32(1.00001)), float(np.float32(2.00002))
    assert g.split(1.000005) == pytest.approx((u1 + 2.0) / 2)  # 2 of 3 went left
    assert g.split(2.00001) == pytest.approx((u1 + 2.0) / 2)  # 3 of 4 went right
    assert g.split(2.5) == pytest.approx((u2 + 3.0) / 2)  # between groups: the middle
    assert g.split(0.5) == 0.5 and g.split(3.5) == 3.5  # nothing on one side
    assert _Gaps(np.float32([4.0, 4.000001])).split(4.0000005) == np.inf
