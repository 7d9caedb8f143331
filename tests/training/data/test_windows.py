"""Window, label, split and pair invariants, checked against brute-force recounts."""

from __future__ import annotations

import numpy as np
import pytest

from training.data import (
    downstream_splits,
    load_dataset,
    pretrain_pairs,
    split_bounds,
)
from training.data.types import Dataset, Entity
from training.data.windows import cut_windows, entity_samples


@pytest.fixture(scope="module")
def ds() -> Dataset:
    # Uneven entity lengths, so windows would straddle entities if cut naively.
    return load_dataset(
        "synthetic", seed=3, n_entities=3, train_steps=2345, test_steps=3456
    )


def test_samples_match_brute_force(ds: Dataset) -> None:
    for i, e in enumerate(ds.entities):
        s = entity_samples(ds, i)
        n_windows = len(e.test) // 100
        assert len(s) == n_windows - 1
        for t in range(len(s)):
            raw = e.test[t * 100 : (t + 1) * 100][:, ds.mask]
            np.testing.assert_array_equal(s.x[t], raw)  # never crosses the entity
            assert s.cur[t] == int(e.labels[t * 100 : (t + 1) * 100].any())
            assert s.y[t] == int(e.labels[(t + 1) * 100 : (t + 2) * 100].any())


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 9, 10, 11, 19, 148, 1000])
def test_split_bounds_gap_and_order(n: int) -> None:
    b = split_bounds(n)
    (tr0, tr1), (va0, va1), (te0, te1) = b["train"], b["val"], b["test"]
    assert tr0 == 0 and te1 == n
    assert tr1 <= va0 - 1 or tr1 == 0  # one sample dropped before each cut
    assert va1 <= te0 - 1 or va1 == va0
    windows = {k: set() for k in b}
    for k, (lo, hi) in b.items():
        for t in range(lo, hi):  # sample t reads window t and labels window t + 1
            windows[k] |= {t, t + 1}
    assert not windows["train"] & windows["val"]
    assert not windows["val"] & windows["test"]
    assert not windows["train"] & windows["test"]


def test_downstream_splits_disjoint_and_chronological(ds: Dataset) -> None:
    sp = downstream_splits(ds)
    seen: dict[tuple[int, int], str] = {}
    for name, s in sp.items():
        for e, t in zip(s.entity, s.t, strict=True):
            for w in (int(t), int(t) + 1):
                assert seen.setdefault((int(e), w), name) == name, (
                    "window in two splits"
                )
    for i in range(len(ds.entities)):
        last = {k: s.t[s.entity == i] for k, s in sp.items()}
        assert (
            last["train"].max()
            < last["val"].min()
            < last["val"].max()
            < last["test"].min()
        )
    assert abs(len(sp["test"]) / sum(map(len, sp.values())) - 0.2) < 0.05


def test_pretrain_pairs_brute_force(ds: Dataset) -> None:
    pairs = pretrain_pairs(ds, val_frac=0.1)
    V = ds.n_channels
    expected_train, expected_val = [], []
    for e in ds.entities:
        x = e.train[:, ds.mask]
        n = len(x) // 100
        n_val = round(0.1 * n)
        for part, lo, hi in (
            (expected_train, 0, n - n_val),
            (expected_val, n - n_val, n),
        ):
            for t in range(lo, hi - 1):  # both windows inside the part: no pair crosses
                for v in range(V):
                    part.append(
                        np.stack(
                            [
                                x[t * 100 : (t + 1) * 100, v],
                                x[(t + 1) * 100 : (t + 2) * 100, v],
                            ]
                        )
                    )
    np.testing.assert_array_equal(pairs.train, np.stack(expected_train))
    np.testing.assert_array_equal(pairs.val, np.stack(expected_val))
    assert pairs.train.dtype == np.float32


def test_pairs_pool_datasets(ds: Dataset) -> None:
    other = load_dataset("synthetic", seed=4, n_channels=3, n_entities=1)
    a, b = pretrain_pairs(ds), pretrain_pairs(other)
    both = pretrain_pairs([ds, other])
    assert len(both.train) == len(a.train) + len(b.train)


def test_zero_variance_mask_is_train_only() -> None:
    rng = np.random.default_rng(0)
    train = rng.normal(size=(500, 3)).astype(np.float32)
    train[:, 1] = 7.0  # constant on train
    test = rng.normal(size=(300, 3)).astype(np.float32)  # varies on test: still dropped
    lab = np.zeros(300, dtype=np.int8)
    d = Dataset("x", ["a", "b", "c"], [Entity("e", train, test, lab)])
    from training.data import fit_channel_mask

    assert fit_channel_mask(d).tolist() == [True, False, True]
    assert entity_samples(d, 0).x.shape == (2, 100, 2)


def test_one_window_length_for_training_and_the_model() -> None:
    """training/ defines the window once (training.data.WINDOW); the pre-training
    config and the model's own default (model/ cannot import training/) agree."""
    from model.config import ModelConfig
    from training.data import WINDOW
    from training.pretrain.config import DataConfig

    assert ModelConfig().seq_len == DataConfig().window == WINDOW


def old_downstream_splits(ds: Dataset) -> dict[str, list[tuple[int, int]]]:
    """The split as it was written before dense windows: (entity, window index) of the
    samples of split_bounds' index ranges over each entity's non-overlapping windows."""
    out: dict[str, list[tuple[int, int]]] = {"train": [], "val": [], "test": []}
    for i, e in enumerate(ds.entities):
        n = max(len(e.test) // 100 - 1, 0)
        for name, (lo, hi) in split_bounds(n).items():
            out[name] += [(i, t) for t in range(lo, hi)]
    return out


def test_stride_window_reproduces_the_protocols_split(ds: Dataset) -> None:
    """Same samples, same values and the same memory layout as the windows were always
    cut (float32 reductions depend on it: the figures must reproduce to the bit)."""
    old = old_downstream_splits(ds)
    new = downstream_splits(ds)  # stride defaults to the window
    for name, s in new.items():
        assert list(zip(s.entity.tolist(), s.t.tolist(), strict=True)) == old[name]
        np.testing.assert_array_equal(s.end, (s.t + 1) * 100)
        parts = []
        for i, e in enumerate(ds.entities):
            w = cut_windows(e.test[:, ds.mask])
            t = [t for j, t in old[name] if j == i]
            parts.append(w[t[0] : t[-1] + 1])
        want = np.concatenate(parts)
        np.testing.assert_array_equal(s.x, want)
        assert s.x.strides == want.strides


@pytest.mark.parametrize("stride", [1, 7, 10, 25, 100])
def test_dense_split_never_leaks(ds: Dataset, stride: int) -> None:
    """At any stride: no step of a window or of its target in two splits; every
    sample's window, labels and target read from its own entity (brute force)."""
    sp = downstream_splits(ds, stride=stride)
    steps: dict[tuple[int, int], str] = {}
    for name, s in sp.items():
        assert (np.diff(s.end[s.entity == 0]) % stride == 0).all()
        for i in np.unique(s.entity):
            ends = s.end[s.entity == i]
            covered = np.zeros(len(ds.entities[i].test), bool)
            for e in ends:  # window [e - 100, e) and target [e, e + 100)
                covered[e - 100 : e + 100] = True
            for step in np.flatnonzero(covered):
                assert steps.setdefault((int(i), int(step)), name) == name, (
                    f"step {step} of entity {i} in {steps[(int(i), int(step))]} and {name}"
                )
        for k in range(0, len(s), max(len(s) // 40, 1)):
            e = ds.entities[s.entity[k]]
            end = int(s.end[k])
            np.testing.assert_array_equal(s.x[k], e.test[end - 100 : end][:, ds.mask])
            assert s.cur[k] == int(e.labels[end - 100 : end].any())
            assert s.y[k] == int(e.labels[end : end + 100].any())
    # a dense stride keeps the same cuts: its splits hold the windows of the sparse ones
    sparse = downstream_splits(ds)
    for name in sp:
        if stride in (1, 10, 25, 100):  # strides dividing the window share its grid
            pairs = set(
                zip(sp[name].entity.tolist(), sp[name].end.tolist(), strict=True)
            )
            assert (
                set(
                    zip(
                        sparse[name].entity.tolist(),
                        sparse[name].end.tolist(),
                        strict=True,
                    )
                )
                <= pairs
            )


def test_data_md_states_the_event_strides_evaluate_uses() -> None:
    """docs/reference/data.md names the dense stride `scjepa evaluate` scores the
    event metrics at (and so the hop an export serves at): the defaults in code."""
    import re
    from pathlib import Path

    from training.evaluate.warning import EVENT_DEFAULT, EVENT_DEFAULTS

    doc = (Path(__file__).parents[3] / "docs/reference/data.md").read_text()
    (stated,) = re.findall(r"`scjepa evaluate --stride`; (\d+), Daphnet (\d+)", doc)
    assert tuple(map(int, stated)) == (EVENT_DEFAULT[0], EVENT_DEFAULTS["daphnet"][0])
