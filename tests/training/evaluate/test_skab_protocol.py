"""`scjepa skab-protocol`: SKAB's own protocol (each run's first rows its reference,
point-wise F1 pooled over runs), its detectors and its per-fold choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_evaluate import TINY

from training.cli import main
from training.evaluate import skab_protocol as sp


def test_knn_leaves_a_reference_window_out() -> None:
    f = np.array([[0.0], [1.0], [5.0]])
    assert sp._knn(f, m=2, k=1).tolist() == [1.0, 1.0, 4.0]


def test_flags_need_the_limit_exceeded_persist_rows_in_a_row() -> None:
    ref = np.array([[0.0], [1.0], [np.nan]])
    rows = np.array([[np.nan], [2.0], [2.0], [0.5], [2.0], [2.0], [2.0]])
    assert sp.flags((ref, rows), 1.0, 1.0, 1).tolist() == [0, 1, 1, 0, 1, 1, 1]
    assert sp.flags((ref, rows), 1.0, 1.0, 2).tolist() == [0, 0, 1, 0, 0, 1, 1]
    assert sp.flags((ref, rows), 1.0, 2.5, 1).tolist() == [0] * 7


def test_t2q_and_knn_flag_a_level_shift_after_the_reference() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, 4))
    z[300:400, :2] += 6.0
    truth = np.zeros(500, dtype=bool)
    truth[300:400] = True
    for scores in (sp.t2q(z, 200, 1), sp.knn_raw(z, 200, 10), sp.knn_stats(z, 200, 10)):
        f = sp.flags(scores, 1.0, 4 / 3, 1)[200:].astype(bool)
        t = truth[200:]
        assert f[t].mean() > 0.85 and f[~t].mean() < 0.15


def test_the_choice_for_a_fold_reads_only_the_other_folds() -> None:
    """A setting perfect on fold 0's runs and one perfect on fold 1's: fold 0 gets the
    one chosen on fold 1, so neither fold is scored by a choice its labels made."""
    y = np.r_[np.zeros(10), np.ones(10)].astype(np.int8)
    runs = [sp.Run(f"r{k}", np.zeros((20, 1)), y, fold=k) for k in (0, 1)]
    ones, zeros = np.ones(20, np.int8), np.zeros(20, np.int8)
    cands = {("good on 0",): [y, zeros], ("good on 1",): [zeros, y]}
    out, chosen = sp.nested(cands, runs, n_ref=0)
    assert chosen == [("good on 1",), ("good on 0",)]
    assert [o.tolist() for o in out] == [zeros.tolist(), zeros.tolist()]
    assert ones.sum() == 20  # (the always-positive floor is its own row)


def test_end_to_end_on_skab_layout(tmp_path: Path, skab_root: Path) -> None:
    ckpt = tmp_path / "pre"
    args = ["pretrain", "--dataset", "skab@0", "--root", str(skab_root)]
    assert (
        main([*args, "--config", "configs/fast.yaml", *TINY, "--out", str(ckpt)]) == 0
    )
    out = tmp_path / "own"
    args = ["skab-protocol", "--root", str(skab_root), "--train-rows", "200"]
    args += ["--checkpoint", str(ckpt / "best.pt"), "--n-boot", "20", "--out", str(out)]
    assert main(args) == 0
    res = json.loads((out / "results.json").read_text())
    rows = res["rows"]
    assert res["runs"] == 11
    assert set(sp.BASELINES) < set(rows)
    assert {"SC-JEPA codes (kNN)", "SC-JEPA surprise, untrained model"} < set(rows)
    p = res["anomaly_share"]
    floor = rows["always-positive"]
    assert floor["f1"] == pytest.approx(2 * p / (1 + p)) and floor["far"] == 100.0
    for name, r in rows.items():
        assert 0 <= r["f1"] <= 1 and r["f1_ci"][0] <= r["f1"] + 1e-9, name
    # one choice per fold, each a setting of the row's detector
    assert len(rows["kNN, raw windows"]["chosen"]) == 5
    assert {c[0] for c in rows["kNN, raw windows"]["chosen"]} == {"kNN, raw windows"}
    # the best baseline is chosen among the baselines and SC-JEPA's untrained twins
    among = set(res["best_baseline_among"])
    assert among == set(sp.BASELINES) | {n for n in rows if "untrained" in n}
    assert len(among) == len(sp.BASELINES) + 4
    base = {c[0] for c in rows["best baseline (chosen per fold)"]["chosen"]}
    assert base <= among
    # early warning: every detector's events add up, thresholds chosen per fold
    ew = res["early_warning"]["rows"]
    assert set(ew) == set(rows) - {"always-positive", "best of all (chosen per fold)"}
    for name, r in ew.items():
        assert r["warned"] + r["late"] + r["missed"] == r["events"] > 0, name
        assert len(r["chosen"]) == 5 and 0 <= r["chance_p"] <= 1, name
    table = (out / "table.md").read_text()
    assert "| best of all (chosen per fold) |" in table and "Conv-AE" in table
    # `scjepa report` renders the folder beside evaluate's, with the command
    md = tmp_path / "results.md"
    assert main(["report", str(out), "--out", str(md)]) == 0
    text = md.read_text()
    assert "### SKAB under its own protocol" in text and table in text
    assert f"--train-rows 200 --n-boot 20 --out {out}" in text


def test_segment_scales_each_run_by_its_reference() -> None:
    """Dense windows every STRIDE rows after the reference, scores / the reference's
    largest, labels and ends relative to the reference's end."""
    y = np.zeros(60, dtype=np.int8)
    y[45:50] = 1
    run = sp.Run("r", np.zeros((60, 1)), y, fold=0)
    ref = np.array([[1.0, 2.0], [4.0, 0.5]])  # two columns: largest 4 and 2
    rows = np.tile([[2.0, 1.0]], (60, 1))
    rows[39] = [8.0, 1.0]
    rows[49] = [1.0, 6.0]
    seg = sp.segment(run, (ref, rows), n_ref=30)
    assert seg.ends.tolist() == [10, 20, 30]  # rows 39, 49, 59 end a window
    assert seg.scores.tolist() == [2.0, 3.0, 0.5]
    assert seg.labels.tolist() == y[30:].tolist()


def test_a_run_no_longer_than_its_reference_is_refused(skab_root: Path) -> None:
    with pytest.raises(Exception, match="not more than --train-rows 1000"):
        sp.evaluate(skab_root, None, n_ref=1000, n_boot=2)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--train-rows", "0"], "--train-rows 0: at least 101"),
        (["--train-rows", "-5"], "--train-rows -5: at least 101"),
        (["--train-rows", "100"], "--train-rows 100: at least 101"),
        (["--n-boot", "0"], "--n-boot 0: at least 1"),
    ],
)
def test_bad_values_are_refused_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    """--train-rows 0 ended in a ValueError traceback (a zero-size reduction), a
    negative one in an AssertionError, --n-boot 0 in an IndexError after the whole
    evaluation; now one line, before the data are read."""
    out = tmp_path / "own"
    args = ["skab-protocol", "--root", str(tmp_path / "no-data"), *argv]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_an_out_that_cannot_be_made_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out under a file (or a file itself) failed with a traceback after the whole
    evaluation; now it is refused before the data are read."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for bad in (blocker, blocker / "own"):
        args = ["skab-protocol", "--root", str(tmp_path / "no-data")]
        assert main([*args, "--out", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"--out {bad}:" in err and len(err.strip().splitlines()) == 1


def test_untrained_twins_are_baselines_and_trained_rows_are_not() -> None:
    """evaluation.md item 7: the best baseline is chosen among the detectors without
    SC-JEPA and SC-JEPA's untrained twins, never its trained rows."""
    assert all(sp.is_baseline(n) for n in sp.BASELINES)
    assert sp.is_baseline("SC-JEPA codes (kNN), untrained model")
    assert not sp.is_baseline("SC-JEPA codes (kNN)")
    assert not sp.is_baseline("always-positive")
