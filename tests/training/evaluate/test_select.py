"""Choosing the served model on train + validation (training/evaluate/select.py):
blocks that never hold a test window, out-of-fold scores that never saw their block,
the one-standard-error rule, and the choice itself on known cases."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from training.data import Samples, load_dataset, split_segments
from training.evaluate.events import Segment, event_counts
from training.evaluate.events import events as event_runs
from training.evaluate.metrics import roc_auc
from training.evaluate.probe import ProbeConfig
from training.evaluate.select import (
    CVConfig,
    HeldOut,
    OutOfFold,
    cautious,
    choose,
    cv_blocks,
    cv_quantile,
    cv_threshold,
    one_se,
    out_of_fold,
    quantile_threshold,
    read_out_of_fold,
    write_out_of_fold,
)
from training.evaluate.warning import Stretch

FAST_PROBE = ProbeConfig(hidden=16, max_epochs=40, patience=10)


@pytest.fixture(scope="module")
def ds():
    return load_dataset("synthetic", seed=1, n_entities=3)


def test_blocks_split_in_time_hold_no_test_window(ds) -> None:
    """K contiguous, disjoint stretches per entity covering train + validation; every
    window and its target inside its block, none in the test range."""
    k = 4
    blocks = cv_blocks(ds, 0, k, stride=10)
    assert [b.block for b in blocks] == list(range(k))
    test_lo = {i: lo for i, lo, _ in split_segments(ds)["test"]}
    val_hi = {i: hi for i, _, hi in split_segments(ds)["val"]}
    for e in test_lo:
        spans = []
        for b in blocks:
            for s in (b.hop, b.dense):
                m = s.entity == e
                assert (s.end[m] + 100 <= test_lo[e]).all()  # target before the test
            m = b.dense.entity == e
            spans.append((b.dense.end[m].min() - 100, b.dense.end[m].max() + 100))
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        assert spans[-1][1] <= val_hi[e]
    # the stretches index their block's dense windows and carry its labels
    for b in blocks:
        for st in b.stretches:
            assert (b.dense.entity[st.idx] == st.entity).all()
            assert np.array_equal(b.dense.end[st.idx] - st.start, st.ends)
    with pytest.raises(ValueError, match="need 3"):
        cv_blocks(ds, 0, 2, stride=10)


def test_blocks_of_whole_entities_of_a_data_set_split_in_time(ds) -> None:
    """``by_entity``: each entity's train + validation stretch whole, in one block;
    still no window or target in the test range."""
    blocks = cv_blocks(ds, 0, 3, stride=10, by_entity=True)
    segs = split_segments(ds)
    for b, (i, lo, _), (_, _, hi) in zip(
        blocks, segs["train"], segs["val"], strict=True
    ):
        assert set(b.dense.entity.tolist()) == set(b.hop.entity.tolist()) == {i}
        assert b.dense.end.min() == lo + 100 and b.dense.end.max() + 10 > hi - 100
        assert b.dense.end.max() + 100 <= hi  # the target too, before the test range


def test_blocks_split_by_entity_are_whole_train_and_val_entities(
    skab_root: Path,
) -> None:
    skab = load_dataset("skab", skab_root)
    for fold in range(len(skab.folds)):
        blocks = cv_blocks(skab, fold, 3, stride=10)
        got = [set(np.unique(b.hop.entity).tolist()) for b in blocks]
        assert all(not (a & b) for i, a in enumerate(got) for b in got[i + 1 :])
        want = set(skab.folds[fold]["train"]) | set(skab.folds[fold]["val"])
        assert set().union(*got) == want
        assert not want & set(skab.folds[fold]["test"])


def _block(x: np.ndarray, y: np.ndarray, block: int) -> HeldOut:
    n = len(y)
    s = Samples(
        x=x.astype(np.float32),
        y=y.astype(np.int8),
        cur=np.zeros(n, np.int8),
        entity=np.zeros(n, np.int32),
        t=np.arange(n, dtype=np.int32),
        end=np.arange(1, n + 1, dtype=np.int64) * 100,
    )
    return HeldOut(0, block, s, s, [])


def test_out_of_fold_scores_never_saw_their_block(rng) -> None:
    """Block 0's labels follow the opposite rule to the other blocks': fitted without
    it, its out-of-fold scores rank it backwards (fitted on it, they would not)."""
    n = 200
    blocks = []
    for j in range(3):
        f = rng.normal(size=(n, 1, 1))
        y = (f[:, 0, 0] > 0) if j == 0 else (f[:, 0, 0] < 0)
        blocks.append(_block(f, y.astype(int), j))
    oof = out_of_fold(blocks, lambda x: x.reshape(len(x), -1), FAST_PROBE, [0, 1])
    assert oof.n_inputs == 1
    assert [h.shape for h in oof.hop] == [(2, n)] * 3
    # held out j: fitted on the third block, calibrated (Platt sets the sign) on j + 1
    assert roc_auc(blocks[0].hop.y, oof.hop[0].mean(0)) < 0.1  # calibrated on 1
    assert roc_auc(blocks[1].hop.y, oof.hop[1].mean(0)) > 0.9  # calibrated on 2
    assert roc_auc(blocks[2].hop.y, oof.hop[2].mean(0)) < 0.1  # calibrated on 0
    # the same fits' risks on the block each was calibrated on: they rank it right
    assert [c.shape for c in oof.cal] == [(2, n)] * 3
    for j in range(3):
        assert roc_auc(blocks[(j + 1) % 3].dense.y, oof.cal[j].mean(0)) > 0.9


def test_out_of_fold_risks_round_trip(tmp_path: Path, rng) -> None:
    """cv_scores.npz keeps every array; a file written before the calibration-block
    risks reads with none."""
    a = OutOfFold(
        [rng.random((2, 5)) for _ in range(3)],
        [rng.random((2, 9)) for _ in range(3)],
        4,
        [rng.random((2, 9)) for _ in range(3)],
    )
    old = OutOfFold(a.hop, a.dense, 4)
    write_out_of_fold(tmp_path / "cv.npz", {"x": [a, a], "old": [old]})
    back = read_out_of_fold(tmp_path / "cv.npz")
    assert len(back["x"]) == 2 and back["old"][0].cal == []
    for got, want in ((back["x"][1], a), (back["old"][0], old)):
        assert got.n_inputs == 4
        for kind in ("hop", "dense", "cal"):
            assert len(getattr(got, kind)) == len(getattr(want, kind))
            for g, w in zip(getattr(got, kind), getattr(want, kind), strict=True):
                np.testing.assert_array_equal(g, w)


def test_one_standard_error_rule() -> None:
    r = np.random.default_rng(0)
    base = r.normal(0, 0.01, 500)
    keys = {"a": 0.50, "b": 0.47, "c": 0.10, "d": float("nan")}
    reps = {
        "a": 0.50 + base,
        "b": 0.47 + base + r.normal(0, 0.05, 500),  # gap 0.03 < its SD 0.05: kept
        "c": 0.10 + base + r.normal(0, 0.05, 500),  # gap 0.40 > SD: dropped
        "d": np.full(500, np.nan),
    }
    keep, info = one_se(keys, reps, list(keys))
    assert keep == ["a", "b"]
    assert info["a"]["gap"] == 0 and info["b"]["se"] == pytest.approx(0.05, rel=0.2)
    nan = {"x": float("nan"), "y": float("nan")}
    assert one_se(nan, {"x": np.zeros(3), "y": np.zeros(3)}, ["x", "y"])[0] == [
        "x",
        "y",
    ]


def _event_blocks(rng: np.random.Generator, k: int = 4) -> list[HeldOut]:
    """K held-out blocks of one entity stretch each: 20 events, dense windows every
    10 steps; the hop windows are every 10th dense one."""
    out = []
    for j in range(k):
        labels = np.zeros(6000, np.int8)
        for onset in rng.choice(np.arange(300, 5700, 270), 20, replace=False):
            labels[onset : onset + 40] = 1
        ends = np.arange(100, 5901, 10, dtype=np.int64)
        n = len(ends)
        nxt = np.array([labels[e : e + 100].any() for e in ends], np.int8)
        s = Samples(
            x=np.zeros((n, 1, 1), np.float32),
            y=nxt,
            cur=np.array([labels[e - 100 : e].any() for e in ends], np.int8),
            entity=np.zeros(n, np.int32),
            t=np.arange(n, dtype=np.int32),
            end=ends,
        )
        st = Stretch(0, 0, 0, labels, ends, np.arange(n))
        hop = s.take(np.arange(0, n, 10))
        out.append(HeldOut(0, j, hop, s, [st]))
    return out


def _oof(blocks: list[HeldOut], score, n_inputs: int) -> OutOfFold:
    dense = [np.stack([score(b.dense, s) for s in range(2)]) for b in blocks]
    hop = [d[:, ::10] for d in dense]
    return OutOfFold(hop, dense, n_inputs)


def test_choice_prefers_what_warns_then_the_simpler(rng) -> None:
    """A candidate whose risk rises before onsets beats noise though it reads more
    inputs; two that warn alike go to the one with fewer inputs."""
    blocks = _event_blocks(rng)
    onset_near = [
        np.array(
            [
                any(o - 100 <= e <= o for o, _ in event_runs(st.labels).tolist())
                for e in st.ends
            ]
        )
        for b in blocks
        for st in b.stretches
    ]

    def warns(s: Samples, seed: int) -> np.ndarray:
        j = next(i for i, b in enumerate(blocks) if b.dense is s)
        noise = np.random.default_rng(seed + 10 * j).random(len(s))
        return onset_near[j] * 0.8 + 0.2 * noise

    def noise(s: Samples, seed: int) -> np.ndarray:
        return np.random.default_rng(100 + seed).random(len(s))

    cfg = CVConfig(blocks=4, seeds=2, n_boot=200)
    oof = {"noise": [_oof(blocks, noise, 4)], "warns": [_oof(blocks, warns, 640)]}
    got = choose([blocks], oof, 100, cfg)
    assert got["winner"] == "warns"
    by = {r["row"]: r for r in got["rows"]}
    assert by["warns"]["cv_warned_rate"] > 0.9 > 0.2 > by["noise"]["cv_warned_rate"]
    assert by["noise"]["cv_stage"] == 0 and by["warns"]["cv_stage"] == 2
    assert got["cv"]["events"] == 80 and got["cv"]["seeds"] == 2
    # the same risks read from fewer inputs: indistinguishable, the simpler wins
    oof["also warns"] = [_oof(blocks, warns, 4)]
    assert choose([blocks], oof, 100, cfg)["winner"] == "also warns"


def test_cv_threshold_holds_the_budget_on_every_block_and_seed_pooled(rng) -> None:
    """The lowest threshold whose false alarms, counted over every held-out block's
    out-of-fold risks of every seed, stay within the budget; a block whose fit runs
    high raises it for all (one block alone would not)."""
    blocks = _event_blocks(rng, k=3)

    def risk(s: Samples, seed: int) -> np.ndarray:
        j = next(i for i, b in enumerate(blocks) if b.dense is s)
        scale = 3.0 if j == 2 else 1.0  # block 2's fold model runs high
        return scale * np.random.default_rng(seed + 10 * j).random(len(s))

    oof = _oof(blocks, risk, 4)
    thr = cv_threshold(blocks, oof, 100, 5.0)

    def per_1000(t: float, which: list[int]) -> float:
        segs = [
            Segment(st.labels, st.ends, oof.dense[j][s][st.idx])
            for j in which
            for s in range(2)
            for st in blocks[j].stretches
        ]
        return event_counts(segs, t, 100).false_alarms_per_1000

    assert per_1000(thr, [0, 1, 2]) <= 5.0
    lower = np.concatenate([d.ravel() for d in oof.dense])
    assert per_1000(float(lower[lower < thr].max()), [0, 1, 2]) > 5.0  # the lowest
    # block 0 alone would set a threshold under 1, which block 2 overshoots
    alone = cv_threshold(blocks[:1], OutOfFold(oof.hop[:1], oof.dense[:1], 4), 100, 5.0)
    assert alone < 1.0 < thr and per_1000(alone, [2]) > 50
    empty = [HeldOut(0, 0, b.hop, b.dense, []) for b in blocks]
    assert cv_threshold(empty, oof, 100, 5.0) == float("inf")


def test_cv_quantile_sets_the_budget_in_quantiles_of_each_block(rng) -> None:
    """The budget set on each block's risks as their share within the block (every
    block and seed pooled): blind to the scale each fold model's risks lie on, and
    carried to a probe as that quantile of its own validation risks."""
    blocks = _event_blocks(rng, k=3)

    def risk_at(scale: float):
        def risk(s: Samples, seed: int) -> np.ndarray:
            j = next(i for i, b in enumerate(blocks) if b.dense is s)
            r = np.random.default_rng(seed + 10 * j).random(len(s))
            return (scale if j == 2 else 1.0) * r

        return risk

    oof = _oof(blocks, risk_at(3.0), 4)
    u = cv_quantile(blocks, oof, 100, 5.0)

    shares = [[_share_at_or_below(d) for d in oof.dense[j]] for j in range(3)]
    segs = [
        Segment(st.labels, st.ends, shares[j][s][st.idx])
        for j in range(3)
        for s in range(2)
        for st in blocks[j].stretches
    ]
    below = max(q for g in segs for q in g.scores if q < u)
    assert 0.5 < u < 1.0
    assert event_counts(segs, u, 100).false_alarms_per_1000 <= 5.0
    assert event_counts(segs, below, 100).false_alarms_per_1000 > 5.0  # the lowest
    # the scale block 2's fold model runs at does not move it (cv_threshold's does)
    same = _oof(blocks, risk_at(1.0), 4)
    assert cv_quantile(blocks, same, 100, 5.0) == u
    assert cv_threshold(blocks, same, 100, 5.0) < cv_threshold(blocks, oof, 100, 5.0)
    # carried to a probe: that quantile of its validation risks, whatever their scale;
    # on those risks it alerts on the windows u alerts on in quantile space
    val = 50 * rng.random(997)
    thr = quantile_threshold(val, u)
    assert thr in val
    np.testing.assert_array_equal(val >= thr, _share_at_or_below(val) >= u)
    inf = float("inf")
    assert quantile_threshold(val, inf) == quantile_threshold(val, None) == inf
    assert quantile_threshold(None, u) == quantile_threshold(val[:0], u) == inf
    assert quantile_threshold(val, 1.0) == val.max()
    empty = [HeldOut(0, 0, b.hop, b.dense, []) for b in blocks]
    assert cv_quantile(empty, oof, 100, 5.0) == inf


def _share_at_or_below(r: np.ndarray) -> np.ndarray:
    return np.array([(r <= v).mean() for v in r])


def test_cautious_serves_the_highest_finite_threshold() -> None:
    inf = float("inf")
    assert cautious(0.2, 0.3) == cautious(0.3, 0.2) == 0.3
    assert cautious(inf, 0.3) == cautious(0.3, None) == 0.3  # none held: no estimate
    assert cautious(inf, None) == inf
    assert cautious(0.2, 0.3, 0.4) == cautious(0.4, inf, None) == 0.4
