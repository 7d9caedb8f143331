"""SKAB and Daphnet: loaders on small files in their public layouts, and the folds that
split them by entity (runs, subjects): every labelled entity tested once, nothing of a
validation or test entity in a fold's pre-training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from training.data import (
    downstream_splits,
    fit_entities,
    load_dataset,
    pretrain_pairs,
    serving_view,
)
from training.data.windows import cut_windows
from training.errors import DataError

# what tests/training/data/conftest.py writes
SKAB_RUNS = {"valve1": range(6), "valve2": range(2), "other": range(1, 4)}
DAPHNET_EXPERIMENT_ROWS = 1300 + 850 + 500 + 750 + 900


def check_folds(ds) -> None:
    """Each fold puts whole entities into disjoint splits; each labelled entity is
    tested in exactly one fold; val and test always hold labelled entities."""
    labelled = {i for i, e in enumerate(ds.entities) if e.test is not None}
    tested = [i for f in ds.folds for i in f["test"]]
    assert sorted(tested) == sorted(labelled)
    for f in ds.folds:
        sets = [set(f[s]) for s in ("train", "val", "test")]
        assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
        assert sets[0] | sets[1] | sets[2] == labelled
        assert f["val"] and f["test"]


def test_skab_runs_pre_onset_train_and_stratified_folds(skab_root: Path) -> None:
    ds = load_dataset("skab", skab_root)
    names = [e.name for e in ds.entities]
    want = ["anomaly-free"] + [f"{g}/{k}" for g, ks in SKAB_RUNS.items() for k in ks]
    assert names == want
    assert ds.channels[0] == "Accelerometer1RMS" and len(ds.channels) == 8
    assert ds.steps_per_day == 86400 and len(ds.folds) == 5
    free = ds.entities[0]
    assert free.test is None and len(free.train) == 2500
    v1 = ds.entities[1]  # valve1/0: onset 250, fault until 340
    assert v1.labels[249] == 0 and v1.labels[250:340].all() and v1.labels[340] == 0
    assert len(v1.train) == 250  # its steps before the fault
    np.testing.assert_array_equal(v1.train, v1.test[:250])
    assert v1.aux["changepoint"].nonzero()[0].tolist() == [250, 340]
    t = v1.aux["time_s"]
    assert t[0] == 0 and np.diff(t).max() == 2  # the file's one 2 s step kept
    assert ds.entities[-1].labels[-1] == 1  # a fault running to the end of its run
    check_folds(ds)
    # stratified: the dealing order is valve1, valve2, other, so each kind spreads
    for k, f in enumerate(ds.folds):
        groups = {ds.entities[i].group for i in f["test"]}
        assert len(f["test"]) in (2, 3) and (len(groups) >= 2 or k >= 4)
        assert 0 not in f["val"] + f["test"]  # the anomaly-free run only trains
        assert f["val"] == ds.folds[(k + 1) % 5]["test"]


def test_daphnet_stretches_and_leave_one_subject_out(daphnet_root: Path) -> None:
    ds = load_dataset("daphnet", daphnet_root)
    assert [e.name for e in ds.entities] == [
        "S01R01",
        "S01R02",
        "S02R01a",
        "S02R01b",
        "S03R01",
    ]
    assert ds.steps_per_day == 64 * 86400 and len(ds.channels) == 9
    e = ds.entities[0]  # rows 100..1399 of the file, freezes at 500 and 900
    assert len(e.test) == 1300 and e.group == "S01"
    assert e.labels[399] == 0 and e.labels[400:460].all() and e.labels[460] == 0
    assert len(e.train) == 1300 - 60 - 100  # the rows outside freezes
    assert not ds.entities[4].labels.any()  # S03 never froze
    check_folds(ds)
    subject = {i: e.group for i, e in enumerate(ds.entities)}
    for f in ds.folds:
        # a subject's runs stay together, and validation holds freezes
        for s in ("train", "val", "test"):
            others = {
                subject[i] for t in ("train", "val", "test") if t != s for i in f[t]
            }
            assert not {subject[i] for i in f[s]} & others
        assert any(ds.entities[i].labels.any() for i in f["val"])
    assert [sorted({subject[i] for i in f["test"]}) for f in ds.folds] == [
        ["S01"],
        ["S02"],
        ["S03"],
    ]
    assert sum(len(e.test) for e in ds.entities) == DAPHNET_EXPERIMENT_ROWS


@pytest.mark.parametrize("name", ["skab", "daphnet"])
def test_fold_pretraining_reads_only_its_train_entities(
    name: str, skab_root: Path, daphnet_root: Path
) -> None:
    root = skab_root if name == "skab" else daphnet_root
    ds = load_dataset(name, root)
    with pytest.raises(DataError, match=f"--dataset {name}@K"):
        pretrain_pairs(ds)  # all train parts at once: would pre-train on test runs
    for k, f in enumerate(ds.folds):
        view = load_dataset(f"{name}@{k}", root)
        assert view.fold == k and (view.mask == ds.mask).all()
        held = set(f["val"]) | set(f["test"])
        for i, e in enumerate(view.entities):
            assert (len(e.train) == 0) == (i in held or len(ds.entities[i].train) == 0)
        assert set(fit_entities(ds, k)) == set(range(len(ds.entities))) - held
        # brute force: the pairs are those of the fold's train entities, nothing else
        pairs = pretrain_pairs(view, min_train=0)  # small files: no validation pair
        n = 0
        for i in fit_entities(ds, k):
            w = len(cut_windows(ds.entities[i].train[:, ds.mask]))
            n_val = round(0.1 * w)
            n += (max(w - n_val - 1, 0)) * ds.n_channels
        assert len(pairs.train) == n
        # the fold's downstream splits hold whole entities, each in one split
        sp = downstream_splits(ds, fold=k, need_classes=False)
        for s in ("train", "val", "test"):
            assert set(np.unique(sp[s].entity)) <= set(f[s])
    with pytest.raises(DataError, match="no such fold"):
        load_dataset(f"{name}@9", root)
    with pytest.raises(DataError, match="a number or 'serve'"):
        load_dataset(f"{name}@all", root)


@pytest.mark.parametrize("name", ["skab", "daphnet"])
def test_the_serving_split_holds_every_entity_but_fold_0s_validation_ones(
    name: str, skab_root: Path, daphnet_root: Path
) -> None:
    """The model served for a data set split by entity may be fitted on every entity
    but fold 0's validation ones (``serving_view``): one fold, no test split; its
    pre-training view (``NAME@serve``) reads the train parts of the same entities."""
    root = skab_root if name == "skab" else daphnet_root
    ds = load_dataset(name, root)
    view = serving_view(ds)
    val = set(ds.folds[0]["val"])
    labelled = {i for i, e in enumerate(ds.entities) if e.test is not None}
    assert view.folds == [
        {"train": sorted(labelled - val), "val": sorted(val), "test": []}
    ]
    assert ds.folds[0]["test"] and len(ds.folds) > 1  # the data set is unchanged
    sp = downstream_splits(view)
    assert len(sp["test"]) == 0 and len(sp["val"]) and len(sp["train"])
    assert set(np.unique(sp["train"].entity)) == labelled - val
    assert set(fit_entities(view, 0)) == set(range(len(ds.entities))) - val
    pre = load_dataset(f"{name}@serve", root)
    assert pre.fold == 0 and (pre.mask == ds.mask).all()
    for i, e in enumerate(pre.entities):
        assert (len(e.train) == 0) == (i in val or len(ds.entities[i].train) == 0)
    with pytest.raises(DataError, match="no folds"):
        serving_view(load_dataset("synthetic"))


def test_skab_refuses_a_run_without_a_fault(skab_root: Path) -> None:
    path = skab_root / "SKAB" / "data" / "valve2" / "1.csv"
    text = path.read_text().replace(";1.0;", ";0.0;")
    path.write_text(text)
    with pytest.raises(DataError, match="no anomalous row"):
        load_dataset("skab", skab_root)


def test_daphnet_refuses_bad_annotations(daphnet_root: Path) -> None:
    path = daphnet_root / "daphnet" / "dataset" / "S01R02.txt"
    lines = path.read_text().splitlines()
    lines[5] = lines[5].rsplit(" ", 1)[0] + " 7"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="annotation must be 0, 1 or 2"):
        load_dataset("daphnet", daphnet_root)
