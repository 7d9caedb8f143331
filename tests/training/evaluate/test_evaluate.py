"""Evaluation protocol: split discipline, baselines, probe calibration, results files."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from training.cli import main
from training.data import Dataset, Samples, load_dataset
from training.evaluate.baselines import (
    FitContext,
    TS2VecConfig,
    TS2VecFeatures,
    fit_pca,
)
from training.evaluate.metrics import metrics
from training.evaluate.probe import Probe, ProbeConfig, SavedProbe
from training.evaluate.protocol import (
    baseline_methods,
    evaluate,
    limit_threads,
    normal_windows,
    prepare_folds,
)
from training.evaluate.warning import event_config

FAST_PROBE = ProbeConfig(hidden=32, max_epochs=60, patience=10)
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ds():
    return load_dataset("synthetic", seed=1, n_entities=3)


def garbage_like(s: Samples, rng: np.random.Generator) -> Samples:
    return Samples(
        x=rng.normal(size=s.x.shape).astype(np.float32) * 50,
        y=1 - s.y,
        cur=s.cur,
        entity=s.entity,
        t=s.t,
        end=s.end,
    )


def test_test_split_cannot_influence_fitting(ds) -> None:
    """Swap the test split (its windows at hop 100 and its dense windows) for garbage:
    every fitted choice must stay the same: thresholds (validation F1 and false-alarm
    budget), validation metrics, the probes' epochs and calibration."""
    rng = np.random.default_rng(9)
    events = event_config(ds)
    folds = prepare_folds(ds, events)
    fd = folds[0]
    bad = dataclasses.replace(
        fd,
        splits=dict(fd.splits, test=garbage_like(fd.splits["test"], rng)),
        dense=dict(fd.dense, test=garbage_like(fd.dense["test"], rng)),
    )
    tiny_ts2vec = TS2VecConfig(iters=3, output_dims=8, hidden_dims=8, depth=2)
    methods = baseline_methods(normal_windows(ds), tiny_ts2vec)
    a = evaluate(ds, methods, [0, 1], FAST_PROBE, n_boot=20, folds=[fd])
    b = evaluate(ds, methods, [0, 1], FAST_PROBE, n_boot=20, folds=[bad])
    for name in methods:
        ra, rb = a.rows[name], b.rows[name]
        assert ra["thresholds"] == rb["thresholds"], name
        assert ra["val"] == rb["val"], name
        assert ra.get("probe") == rb.get("probe"), name  # epochs, calibration
        assert ra["val_events"] == rb["val_events"], name
        for kind in ("budget", "val_threshold"):
            assert (
                ra["events"][kind]["thresholds"] == rb["events"][kind]["thresholds"]
            ), name
    # ...while the test metrics do see the change (the comparison above can fail)
    changed = [
        n for n in methods if a.rows[n]["all"]["roc_auc"] != b.rows[n]["all"]["roc_auc"]
    ]
    assert len(changed) >= len(methods) - 1  # always-positive's AUC is 0.5 either way
    assert (
        a.rows["kNN to train windows"]["curve"]
        != b.rows["kNN to train windows"]["curve"]
    )


def test_baseline_rows_and_floors(ds) -> None:
    res = evaluate(
        ds, baseline_methods(normal_windows(ds)), [0, 1, 2], FAST_PROBE, n_boot=20
    )
    test = res.test
    p = test.y.mean()
    ap = res.rows["always-positive"]["all"]
    assert ap["f1"]["mean"] == pytest.approx(2 * p / (1 + p))
    assert ap["roc_auc"]["mean"] == 0.5
    for name, s in res.scores.items():
        assert s.shape == (3, len(test)) and np.isfinite(s).all(), name
    onset = res.rows["random"]["onset"]
    assert onset["n"] == int((test.cur == 0).sum())
    assert onset["positives"] == int(((test.cur == 0) & (test.y == 1)).sum())
    assert res.rows["random"]["all"]["roc_auc"]["std"] > 0  # seeds differ


def test_pca_row_fits_once_for_every_seed(ds) -> None:
    """The PCA row's full SVD is the same for every seed, so the seeds share one fit
    per context; it scores as a fresh fit does, and another variance fits anew."""
    normal = normal_windows(ds)
    ctx = FitContext(None, None, normal, FAST_PROBE)  # type: ignore[arg-type]
    a, b = fit_pca(ctx, 0), fit_pca(ctx, 1)
    assert list(ctx.shared) == ["pca 0.9"]
    fresh = fit_pca(FitContext(None, None, normal, FAST_PROBE), 1)  # type: ignore[arg-type]
    x = normal[:40] + np.random.default_rng(0).normal(size=normal[:40].shape)
    np.testing.assert_array_equal(a(x), b(x))
    np.testing.assert_allclose(b(x), fresh(x), rtol=1e-10)
    fit_pca(ctx, 0, variance=0.5)
    assert sorted(ctx.shared) == ["pca 0.5", "pca 0.9"]


def test_threads_hold_every_pool_not_torch_alone() -> None:
    """`evaluate --threads N` holds torch and every BLAS and OpenMP pool numpy, scipy
    and scikit-learn load (the SVDs, the trees' histograms) to N threads."""
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    before = torch.get_num_threads()
    with threadpool_limits(2):  # two threads first, whatever the machine's cores
        limiter = limit_threads(1)
        try:
            pools = threadpool_info()
            assert {p["internal_api"] for p in pools} >= {"openblas", "openmp"}
            assert [p["num_threads"] for p in pools] == [1] * len(pools), pools
            assert torch.get_num_threads() == 1
        finally:
            limiter.restore_original_limits()
            torch.set_num_threads(before)


def test_ts2vec_features_are_seeded_and_leave_global_rng_alone(ds) -> None:
    """The TS2Vec row: a seed gives one encoder; NumPy's global RNG (which TS2Vec's
    cropping uses) is restored, so the rows after it do not depend on it running."""
    normal = normal_windows(ds)
    cfg = TS2VecConfig(iters=4, output_dims=8, hidden_dims=8, depth=2)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a, b = TS2VecFeatures(normal, 0, cfg), TS2VecFeatures(normal, 0, cfg)
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    other = TS2VecFeatures(normal, 1, cfg)
    x = normal[:7]
    assert a(x).shape == (7, 8) and np.isfinite(a(x)).all()
    np.testing.assert_allclose(a(x), b(x), rtol=1e-5, atol=1e-6)
    assert not np.allclose(a(x), other(x))
    assert len(a.losses) >= 1 and np.isfinite(a.losses).all()


def _separable(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    y = (rng.random(n) < 0.3).astype(np.int8)
    f = rng.normal(size=(n, 8)).astype(np.float32)
    f[:, 0] += 2.5 * y
    return f, y


def test_probe_learns_and_is_calibrated(rng) -> None:
    f_tr, y_tr = _separable(600, rng)
    f_va, y_va = _separable(400, rng)
    f_te, y_te = _separable(2000, rng)
    probe = Probe(8, FAST_PROBE, seed=0).fit(f_tr, y_tr, f_va, y_va)
    p = probe.predict(f_te)
    assert ((p > 0.5) == y_te).mean() > 0.85
    # calibrated: mean predicted risk close to the observed rate, Brier well below 0.21 (p*(1-p))
    assert abs(p.mean() - y_te.mean()) < 0.05
    assert np.mean((p - y_te) ** 2) < 0.12
    assert probe.state()["calibration"]["method"] == "platt"


def test_evaluate_cli_and_report(tmp_path: Path, capsys) -> None:
    out = tmp_path / "syn"
    args = [
        "evaluate",
        "--dataset",
        "synthetic",
        "--seeds",
        "2",
        "--n-boot",
        "20",
        "--out",
        str(out),
    ]
    probe = ["--probe", "hidden=32", "--probe", "max_epochs=40"]
    assert main([*args, *probe, "--ts2vec-iters", "3", "--no-tree-probes"]) == 0
    res = json.loads((out / "results.json").read_text())
    for key in (
        "dataset",
        "splits",
        "seeds",
        "config",
        "git_commit",
        "wall_time_s",
        "rows",
        "command",
    ):
        assert key in res, key
    assert res["config"]["probe"]["hidden"] == 32
    assert (out / "roc_pr.png").stat().st_size > 10_000
    assert (out / "risk_timeline.png").is_file() and (out / "reliability.png").is_file()
    doc = tmp_path / "results.md"
    notes = tmp_path / "notes.md"
    notes.write_text("## Findings\nThe codebook collapsed.\n")
    assert main(["report", str(out), "--notes", str(notes), "--out", str(doc)]) == 0
    text = doc.read_text()
    assert text.index("The codebook collapsed.") < text.index("### SYNTHETIC")
    assert "always-positive" in text and "raw-feature probe (MLP)" in text
    assert "(trees)" not in text  # --no-tree-probes: the MLP probes only
    assert "| TS2Vec + same probe |" in text
    assert text.startswith("# Results: anomaly prediction")
    assert (
        main(["report", str(out), "--title", "Ablations: MSL", "--out", str(doc)]) == 0
    )
    text = doc.read_text()
    assert text.startswith("# Ablations: MSL\n") and "--title 'Ablations: MSL'" in text
    # a second run on the same data set joins the same table, its SC-JEPA rows labelled
    rerun = tmp_path / "rerun"
    rerun.mkdir()
    res["rows"] = {"SC-JEPA probe": res["rows"]["random"]}
    (rerun / "results.json").write_text(json.dumps(res))
    assert main(["report", str(out), f"{rerun}=paper", "--out", str(doc)]) == 0
    text = doc.read_text()
    # one section; each row once per metric family (window metrics, the onset and
    # continuation subsets, event metrics)
    assert text.count("### SYNTHETIC") == 1 and text.count("| random |") == 3
    assert "| SC-JEPA probe (paper) |" in text
    res["splits"]["test"]["windows"] += 1
    (rerun / "results.json").write_text(json.dumps(res))
    assert main(["report", str(out), str(rerun), "--out", str(doc)]) == 2
    assert "different test splits" in capsys.readouterr().err
    assert (
        main(
            [
                "evaluate",
                "--dataset",
                "synthetic",
                "--out",
                str(out),
                "--probe",
                "nope=1",
            ]
        )
        == 2
    )
    assert "unknown probe setting 'nope'" in capsys.readouterr().err
    bad = ["evaluate", "--dataset", "synthetic", "--out", str(out)]
    assert main([*bad, "--probe", "kind=trees"]) == 2
    assert "the probe kind is each row's own" in capsys.readouterr().err


def test_codebook_ablation_evaluates_on_latents(tmp_path: Path) -> None:
    """`model.use_codebook=false` (continuous latents) goes through the same command:
    the probe reads the encoder's latents (V, P, D) in place of p (V, P, K), and no
    served probe is written (the served graph reads code probabilities)."""
    import torch

    from training.evaluate.encode import CodeFeatures
    from training.evaluate.protocol import load_encoders

    tiny = [
        "--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2",
        "--set", "model.pred_dim=16", "--set", "model.pred_layers=1",
        "--set", "model.pred_heads=2", "--set", "model.use_codebook=false",
        "--set", "optim.epochs=1", "--set", "optim.select_from=1",
        "--set", "run.progress=false", "--set", "run.threads=1",
    ]  # fmt: skip
    run = tmp_path / "run"
    syn = ["--dataset", "synthetic"]
    args = ["pretrain", *syn, "--config", "configs/fast.yaml", *tiny, "--out", str(run)]
    assert main(args) == 0
    trained, _, cfg = load_encoders(run / "best.pt")
    assert trained.codebook is None
    x = np.random.default_rng(0).normal(size=(3, 100, 4)).astype(np.float32)
    feats = CodeFeatures(trained)
    n_patches = 100 // cfg["patch_len"]
    assert feats(x).shape == (3, n_patches * cfg["d_model"])
    assert not feats.has_codes
    with pytest.raises(ValueError, match="without the codebook"):
        feats.codes(x)
    with torch.no_grad():  # the variable-wise max over channels of the latents
        h = trained.probe_inputs(torch.from_numpy(x))
    np.testing.assert_allclose(feats(x), h.amax(1).flatten(1).numpy(), rtol=1e-6)
    # the label-free row: mean over channels of the log reconstruction MSE on the
    # RevIN scale, recomputed one window and one channel at a time
    from training.evaluate.encode import ReconstructionError

    want = np.zeros(len(x))
    for n in range(len(x)):
        for v in range(x.shape[2]):
            series = torch.from_numpy(x[n, :, v].copy())[None]  # (1, T)
            with torch.no_grad():
                x_hat = trained.eval()(series, predict=False)["x_hat"].flatten()
            mse = float(((x_hat - series.flatten()) ** 2).mean())
            var = float(series.var(unbiased=False)) + cfg["revin_eps"]
            want[n] += np.log(mse / var + 1e-6) / x.shape[2]
    # atol: a log near 0 (error close to the window's variance) has no relative
    # precision; batched and one-window float32 sums differ by about 1e-7 there
    got = ReconstructionError(trained)(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    out = tmp_path / "eval"
    ev = ["evaluate", *syn, "--checkpoint", str(run / "best.pt"), "--seeds", "2"]
    ev += ["--baselines", "none", "--n-boot", "10", "--probe", "max_epochs=20"]
    assert main([*ev, "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert np.isfinite(rows["SC-JEPA probe"]["all"]["roc_auc"]["mean"])
    recon = rows["SC-JEPA reconstruction error (label-free)"]
    assert np.isfinite(recon["all"]["roc_auc"]["mean"])
    assert recon["all"]["roc_auc"]["std"] == 0  # no seed enters a label-free score
    assert not (out / "probe.pt").exists() and not (out / "code_usage.png").exists()


TINY = [
    "--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2",
    "--set", "model.pred_dim=16", "--set", "model.pred_layers=1",
    "--set", "model.pred_heads=2", "--set", "model.n_codes=8",
    "--set", "optim.epochs=1", "--set", "optim.select_from=1", "--set", "optim.batch_size=32",
    "--set", "run.progress=false", "--set", "run.threads=1",
]  # fmt: skip


def test_a_fold_reads_no_checkpoint_pre_trained_on_its_held_out_entities(
    tmp_path: Path, skab_root: Path, capsys
) -> None:
    """A checkpoint records the entities it was pre-trained on; evaluate refuses it
    for a fold that validates or tests on any of them, and takes one pre-trained on
    other data sets alone for every fold (no {fold}); one recording nothing must be
    the fold's own. The same for --serve-checkpoint and the serving split."""
    from training.data.windows import fit_entities
    from training.errors import UserError
    from training.evaluate.protocol import _checkpoint, _served_fold
    from training.pretrain.checkpoint import load_checkpoint, save_checkpoint

    ds = load_dataset("skab", skab_root)
    names = [e.name for e in ds.entities]
    pre = ["pretrain", "--root", str(skab_root), "--config", "configs/fast.yaml", *TINY]
    for spec, out in (("skab@0", "r0"), ("synthetic", "other")):
        assert main([*pre, "--dataset", spec, "--out", str(tmp_path / out)]) == 0
    r0, other = tmp_path / "r0" / "best.pt", tmp_path / "other" / "best.pt"
    fit0 = [names[i] for i in fit_entities(ds, 0)]
    assert load_checkpoint(r0)["corpus"] == {"skab": fit0}
    assert list(load_checkpoint(other)["corpus"]) == ["synthetic"]
    for k in range(len(ds.folds)):  # another data set's encoder serves every fold
        assert _checkpoint(str(other), k, ds) == other
    assert _checkpoint(str(r0), 0, ds) == r0  # fold 0's own
    # the manifest names what the served encoder saw
    assert _served_fold(ds, checkpoint=r0)["pretrained_on"] == fit0
    seen = _served_fold(ds, checkpoint=other)
    assert seen["pretrained_on"] == [] and seen["pretrained_also_on"] == ["synthetic"]
    refused = [k for k in range(1, len(ds.folds)) if set(fit0) & {
        names[i] for i in ds.folds[k]["val"] + ds.folds[k]["test"]}]  # fmt: skip
    assert refused  # fold 0's train runs are other folds' held-out ones
    for k in refused:
        with pytest.raises(UserError, match=f"fold {k} validates or tests on"):
            _checkpoint(str(r0), k, ds)
    legacy = tmp_path / "legacy.pt"  # written before checkpoints recorded a corpus
    save_checkpoint(legacy, **{k: v for k, v in load_checkpoint(r0).items()
                               if k != "corpus"})  # fmt: skip
    with pytest.raises(UserError, match="does not record"):
        _checkpoint(str(legacy), 0, ds)
    seen_all = tmp_path / "all.pt"  # pre-trained on every run, fold 0's val ones too
    save_checkpoint(seen_all, **(load_checkpoint(r0) | {"corpus": {"skab": names}}))
    ev = ["evaluate", "--dataset", "skab", "--root", str(skab_root), "--seeds", "1"]
    ev += ["--ts2vec-iters", "0", "--out", str(tmp_path / "ev"), "--checkpoint"]
    assert main([*ev, str(other), "--serve-checkpoint", str(seen_all)]) == 2
    err = capsys.readouterr().err
    assert "stop and threshold the served model" in err and "Traceback" not in err
    assert not (tmp_path / "ev").exists()


def test_folds_end_to_end_on_skab(tmp_path: Path, skab_root: Path, capsys) -> None:
    """SKAB (split by run): one pre-training per fold (--dataset skab@K), evaluate
    reads each fold's checkpoint, pools the folds' test splits (every run tested
    once), adds the event metrics, intervals, paired differences and SKAB's own
    metrics; the report shows both metric families and the operator's line."""
    from training.data import load_dataset

    ds = load_dataset("skab", skab_root)
    root = ["--root", str(skab_root)]
    for k in range(len(ds.folds)):
        args = ["pretrain", "--dataset", f"skab@{k}", *root]
        args += [
            "--config",
            "configs/fast.yaml",
            *TINY,
            "--out",
            str(tmp_path / f"r{k}"),
        ]
        assert main(args) == 0
    out = tmp_path / "skab"
    ev = ["evaluate", "--dataset", "skab", *root, "--seeds", "2", "--n-boot", "30"]
    ev += ["--probe", "max_epochs=20", "--ts2vec-iters", "0", "--out", str(out)]
    assert main([*ev, "--checkpoint", str(tmp_path / "r0" / "best.pt")]) == 2
    assert "{fold}" in capsys.readouterr().err  # one checkpoint per fold, or none
    assert main([*ev, "--checkpoint", str(tmp_path / "r{fold}" / "best.pt")]) == 0
    err = capsys.readouterr().err
    assert "fold 5/5 [" in err and "SC-JEPA probe: fitted 2 seed(s)" in err
    # the cross-validation choosing the served model reports each candidate
    n_cv = err.count("evaluate: cross-validation: [")
    assert n_cv >= 11 and f"cross-validation: [{n_cv}/{n_cv}]" in err
    assert err.count("evaluate: cross-validation: fold 5/5 of [") == n_cv  # and folds
    # one model per fold; the files to serve hold fold 0's, and export serves it with
    # fold 0's checkpoint (another fold's is refused: the probe reads other features)
    assert "split by entity into 5 folds" in err and "fold 0's model" in err
    # (the tiny runs' out-of-fold risks hold no threshold at the budget)
    exp = [
        "export",
        "--probe",
        str(out),
        "--dataset",
        "skab",
        *root,
        "--threshold",
        "f1",
    ]
    art = tmp_path / "art"
    r1 = tmp_path / "r1" / "best.pt"
    assert main([*exp, "--checkpoint", str(r1), "--out", str(art)]) == 2
    refused = capsys.readouterr().err
    assert f"--checkpoint {r1}: not the checkpoint" in refused and not art.exists()
    r0 = tmp_path / "r0" / "best.pt"
    assert main([*exp, "--checkpoint", str(r0), "--out", str(art)]) == 0
    assert "this is fold 0's model, fitted on" in capsys.readouterr().err
    m = json.loads((art / "manifest.json").read_text())
    fold = m["eval_metrics"]["fold"]
    assert fold["fold"] == 0 and fold["of"] == 5
    assert fold["tested_on"] == [
        ds.entities[i].name for i in sorted(ds.folds[0]["test"])
    ]
    assert set(fold["tested_on"]).isdisjoint(fold["fitted_on"] + fold["pretrained_on"])
    assert "real_test" in m["eval_metrics"]["onnx_parity"]
    res = json.loads((out / "results.json").read_text())
    assert res["folds"] == 5 and res["served_fold"] == 0
    # the tree probes are candidates by default, each beside its MLP twin
    # and so is the fine-tuned SC-JEPA read by the trees (its floor a row beside it)
    for name in (
        "raw-feature probe (trees)",
        "SC-JEPA probe (trees)",
        "SC-JEPA fine-tuned + stats (trees)",
    ):
        assert name in res["rows"]
        assert name in {r["row"] for r in res["leaderboard"]["rows"]}
    assert "SC-JEPA fine-tuned + stats, untrained model (trees)" in res["rows"]
    n_runs = sum(1 for e in ds.entities if e.test is not None)
    assert res["events"]["test"]["events"] == n_runs  # one fault per run, each once
    assert res["events"]["stride"] == 5 and res["events"]["lookback"] == 100
    for name in ("level / variance shift (training-free)", "k-means distance",
                 "SC-JEPA probe", "SC-JEPA reconstruction error (label-free)"):  # fmt: skip
        row = res["rows"][name]
        assert len(row["thresholds"]) == 2 and len(row["thresholds"][0]) == 5
        # a served-model candidate (whichever wins) is also counted at its
        # cross-fitted threshold, and at the served one at each operating point
        kinds = {"val_threshold", "budget"}
        board = {e["row"]: e for e in res["leaderboard"]["rows"]}
        if name in board:
            kinds |= {"cv_budget", "operating_points"}
            for p in board[name]["operating_points"]:  # per fold
                assert len(p["cv_budget_thresholds"]) == 5
        assert set(row["events"]) == kinds
        b = row["events"]["budget"]
        assert b["events"] == n_runs and len(b["per_seed"]) == 2
        w = b["warned"]["mean"] + b["late"]["mean"] + b["missed"]["mean"]
        assert w == pytest.approx(n_runs)
        assert set(row["external"]["val_threshold"]) >= {
            "f1",
            "far",
            "mar",
            "nab_standard",
        }
        assert set(row["block_ci95"]) >= {"f1", "roc_auc", "pr_auc"}
        assert len(row["curve"]["warned_rate"]) >= 2
    # the served threshold: per seed and fold, the most cautious of the probe's
    # validation budget threshold, its fold's out-of-fold one (the leaderboard's) and
    # the out-of-fold quantile (the leaderboard's) carried to its validation risks
    board = {r["row"]: r for r in res["leaderboard"]["rows"]}
    raised = 0
    for name, e in board.items():
        got = res["rows"][name]["events"]["cv_budget"]
        val = res["rows"][name]["events"]["budget"]["thresholds"]
        cv, quantiles = e["cv_budget_thresholds"], e["cv_budget_quantiles"]
        assert len(cv) == len(quantiles) == 5 and len(got["thresholds"]) == 2
        assert all(u is None or 0 < u <= 1 for u in quantiles)
        for s in range(2):
            for k in range(5):
                both = [t for t in (val[s][k], cv[k]) if t is not None]
                two = max((t for t in both if np.isfinite(t)), default=-np.inf)
                served = got["thresholds"][s][k]
                served = np.inf if served is None else served
                if cv[k] is None and quantiles[k] is None:  # no out-of-fold estimate
                    assert served == np.inf  # held the budget: none served
                elif np.isfinite(two):  # the highest finite: never below the two
                    assert two - 1e-12 <= served < np.inf
                raised += served > two + 1e-12
        w = got["warned"]["mean"] + got["late"]["mean"] + got["missed"]["mean"]
        assert w == pytest.approx(n_runs) and got["events"] == n_runs
        # a false page starts a run of alerting windows with a false alarm: no more
        # pages than false alarms
        pages, fa = got["false_pages_per_day"], got["false_alarms_per_day"]
        assert 0 <= pages["mean"] <= fa["mean"] + 1e-9
        assert len(got["ci95"]["false_pages_per_day"]) == 2
        # per 1,000 scored windows, the service's rate-free yardstick: the same pages
        per_w = got["false_pages_per_1000_windows"]["mean"]
        assert 0 <= per_w <= got["false_alarms_per_1000_windows"]["mean"] + 1e-9
        lo, hi = got["ci95"]["false_pages_per_1000_windows"]
        assert lo <= hi and (per_w > 0) == (pages["mean"] > 0)
    assert raised  # the quantile is the highest of the three somewhere
    best = res["best_baseline"]
    # among evaluation.md item 7's rows: SC-JEPA only as its untrained twin
    assert best["window"] and (
        not best["window"].startswith("SC-JEPA") or "untrained" in best["window"]
    )
    assert res["rows"]["SC-JEPA probe"]["paired"]["window"]["vs"] == best["window"]
    assert (out / "warning_curve.png").stat().st_size > 10_000
    # the served files hold fold 0's model, its test figures fold 0's test entities'
    # (the first windows of the pooled test split)
    served = SavedProbe.load(out / "probe-served.pt")
    z = np.load(out / "scores.npz")
    n0 = int(np.isin(z["entity"], sorted(ds.folds[0]["test"])).sum())
    assert 0 < n0 < len(z["y"]) and set(z["entity"][:n0]) <= set(ds.folds[0]["test"])
    s0 = z[f"score/{served.metrics['row']}"][served.probe["seed"], :n0]
    want = metrics(z["y"][:n0], s0, served.threshold)
    assert served.metrics["test"] == pytest.approx(want, nan_ok=True)
    doc = tmp_path / "results.md"
    assert main(["report", str(out), "--out", str(doc)]) == 0
    text = doc.read_text()
    assert "### SKAB: 5 folds by entity" in text
    assert "`scjepa export --probe RESULTS_DIR` serves fold 0's model" in text
    assert "**What an operator gets**" in text and "n too small" in text
    assert "at the threshold it is served at" in text
    assert "false pages a day: alerts that start with a false alarm" in text
    assert "the same at the served threshold |" in text
    assert "SKAB's own metrics" in text and "Conv-AE F1 0.78" in text
    assert (
        "![warned-event rate against false alarms, skab](skab/warning_curve.png)"
        in text
    )
    assert "| k-means distance |" in text

    # --serve-checkpoint: the files to serve hold the model fitted on every entity
    # but fold 0's validation ones, pre-trained on them (--dataset skab@serve); the
    # rows, the choice and the figures are the folds' as before
    rs = tmp_path / "rs" / "best.pt"
    args = ["pretrain", "--dataset", "skab@serve", *root, "--config"]
    assert main([*args, "configs/fast.yaml", *TINY, "--out", str(rs.parent)]) == 0
    out_s = tmp_path / "skab-serve"
    ev_s = [*ev[:-1], str(out_s), "--checkpoint", str(tmp_path / "r{fold}" / "best.pt")]
    assert main([*ev_s, "--serve-checkpoint", str(tmp_path / "nothing.pt")]) == 2
    assert "nothing.pt: checkpoint not found" in capsys.readouterr().err
    assert main([*ev_s, "--serve-checkpoint", str(rs)]) == 0
    err = capsys.readouterr().err
    assert "serving split: [" in err
    assert "hold the model fitted on every entity but fold 0's validation" in err
    res_s = json.loads((out_s / "results.json").read_text())
    assert res_s["served_fold"] == "serve" and res_s["serve_checkpoint"]["path"] == str(
        rs
    )
    assert res_s["leaderboard"]["winner"] == res["leaderboard"]["winner"]
    for name in res["rows"]:  # the same rows, from the same fits
        assert res_s["rows"][name]["all"] == res["rows"][name]["all"]
    val0 = sorted(ds.folds[0]["val"])
    names = [e.name for e in ds.entities]
    every = sorted(i for i, e in enumerate(ds.entities) if e.test is not None)
    for file in ("probe-served.pt", "probe.pt", "probe-stats.pt"):
        p = SavedProbe.load(out_s / file)
        fold = p.metrics["fold"]
        assert fold["fold"] == "serve" and fold["tested_on"] == []
        assert fold["validated_on"] == [names[i] for i in val0]
        assert fold["fitted_on"] == [names[i] for i in every if i not in val0]
        assert set(fold["pretrained_on"]) >= set(fold["fitted_on"])
        assert not set(fold["pretrained_on"]) & set(fold["validated_on"])
        assert "test" not in p.metrics and "test_mean_over_seeds" in p.metrics
        assert p.checkpoint == str(rs)
    assert (
        served.metrics["row"]
        == SavedProbe.load(out_s / "probe-served.pt").metrics["row"]
    )
    art_s = tmp_path / "art-serve"
    assert (
        main(
            [*exp, "--probe", str(out_s), "--checkpoint", str(r0), "--out", str(art_s)]
        )
        == 2
    )
    assert f"--checkpoint {r0}: not the checkpoint" in capsys.readouterr().err
    assert (
        main(
            [*exp, "--probe", str(out_s), "--checkpoint", str(rs), "--out", str(art_s)]
        )
        == 0
    )
    assert "this is the model fitted on" in capsys.readouterr().err
    m = json.loads((art_s / "manifest.json").read_text())
    assert m["eval_metrics"]["fold"]["fold"] == "serve"
    # the input-drift monitor: the serving split's normal windows, its train split's
    # the reference, its validation split's (every stride steps) the calibration
    nov = SavedProbe.load(out_s / "probe-served.pt").novelty
    assert nov is not None and m["novelty"] is not None
    for key in ("reference_windows", "calibration_windows", "expected_share"):
        assert m["novelty"][key] == nov[key]
    assert 0.0 <= nov["expected_share"] <= 0.05
    assert "real_val" in m["eval_metrics"]["onnx_parity"]
    assert main(["report", str(out_s), "--out", str(doc)]) == 0
    assert "serves the model fitted on every entity but fold 0's" in doc.read_text()


def test_an_older_results_file_still_reports_unchanged(tmp_path: Path) -> None:
    """results.json written before event metrics: the same one table as always."""
    from training.evaluate.results import markdown

    old = json.loads(
        (
            REPO / "docs" / "results" / "ablations" / "msl-full" / "results.json"
        ).read_text()
    )
    text = markdown(old)
    assert (
        "Event metrics" not in text
        and "| method | F1 | ROC AUC | PR AUC | precision |" in text
    )


def test_pooled_folds_read_their_own_windows(skab_root: Path) -> None:
    """A data set split into folds pools the folds' dense test scores: the warning
    curve and the rotation null of each row must read every fold's own windows
    (recomputed here fold by fold, from that fold's scores alone)."""
    from training.evaluate.baselines import fit_level_shift
    from training.evaluate.events import Segment, shifted_warned, warning_curve
    from training.evaluate.warning import N_SHIFTS

    ds = load_dataset("skab", skab_root)
    events = event_config(ds)
    folds = prepare_folds(ds, events)
    assert len(folds) > 1
    name = "level / variance shift (training-free)"
    ev = evaluate(ds, {name: fit_level_shift}, [0], FAST_PROBE, n_boot=10,
                  events=events, folds=folds)  # fmt: skip
    cuts = np.cumsum([len(fd.dense["test"]) for fd in folds])[:-1]
    own = np.split(ev.dense_scores[name][0], cuts)  # each fold's scores
    assert [len(s) for s in own] == [len(fd.dense["test"]) for fd in folds]
    segs = [
        [Segment(st.labels, st.ends, own[k][st.idx]) for st in fd.stretches["test"]]
        for k, fd in enumerate(folds)
    ]
    row = ev.rows[name]
    want = warning_curve([s for per_fold in segs for s in per_fold], events.lookback)
    for key in ("warned_rate", "false_alarms_per_1000_windows"):
        np.testing.assert_allclose(row["curve"][key], want[key], atol=1e-5)
    b = row["events"]["budget"]
    null = sum(
        shifted_warned(segs[k], b["thresholds"][0][k], events.lookback, N_SHIFTS, k)
        for k in range(len(folds))
    )
    assert b["chance"]["warned_rate"] == pytest.approx(null.mean() / b["events"])
    # a row whose seeds alert alike: its seeds are rotated alike, so the null of their
    # mean is that of one seed (rotated independently, its spread and p would shrink)
    two = evaluate(ds, {name: fit_level_shift}, [0, 1], FAST_PROBE, n_boot=10,
                   events=events, folds=folds)  # fmt: skip
    assert two.rows[name]["events"]["budget"]["chance"] == b["chance"]


def test_no_drift_monitor_from_too_few_normal_windows(capsys) -> None:
    """Where the served probe's split holds too few normal windows to rank a window
    among, the files to serve get no monitor, and evaluate says why."""
    from types import SimpleNamespace

    from training.evaluate.protocol import served_novelty

    def split(n: int) -> SimpleNamespace:
        x = np.random.default_rng(n).normal(size=(n, 100, 3)).astype(np.float32)
        return SimpleNamespace(x=x, cur=np.zeros(n, np.int8))

    fd = SimpleNamespace(splits={"train": split(50)}, dense={"val": split(1)})
    assert served_novelty("tiny", fd) is None  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "no drift monitor: tiny: 50 normal train and 1 normal validation" in err
    fd.dense["val"] = split(300)
    record = served_novelty("tiny", fd)  # type: ignore[arg-type]
    assert record is not None and record["calibration_windows"] == 300
    assert record["reference_windows"] == 50 and record["detectors"] == "knn+pca"


def test_a_time_split_names_the_entities_of_each_split(ds: Dataset) -> None:
    """A served model of a data set split in time records, per split, the entities
    with a window in it: an entity whose test series is short has windows in the
    test split and none to fit on, and is named so."""
    from dataclasses import replace

    from training.evaluate.protocol import _time_split_entities

    short = ds.entities[1]
    assert short.test is not None and short.labels is not None
    cut = replace(short, test=short.test[:300], labels=short.labels[:300])
    small = replace(ds, entities=[ds.entities[0], cut, *ds.entities[2:]])
    names = [e.name for e in ds.entities]
    every = {"fitted_on": names, "validated_on": names, "tested_on": names}
    assert _time_split_entities(ds) == {"split": "time", **every}
    got = _time_split_entities(small)
    assert got["tested_on"] == names
    assert (
        got["fitted_on"] == got["validated_on"] == [n for n in names if n != cut.name]
    )
