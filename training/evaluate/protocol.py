"""`scjepa evaluate`: the anomaly-prediction protocol of evaluation.md, end to end.

    scjepa evaluate --dataset msl --root DIR --checkpoint runs/msl/best.pt --seeds 5 --out results/msl

Step 1 fits every method (baselines and SC-JEPA probes, every seed) and picks its
threshold on the train/validation splits; step 2 reads the test split once and scores
all of them. Writes results.json (everything a table needs, with split sizes, seeds,
config, git commit, wall time), results.md, test scores (scores.npz) and figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from training.data import WINDOW, Dataset, Samples, cut_windows, downstream_splits
from training.errors import UserError
from training.evaluate.baselines import (
    FitContext,
    ProbeScorer,
    Scorer,
    TS2VecConfig,
    WindowStatsFeatures,
    fit_always_positive,
    fit_feature_probe,
    fit_knn,
    fit_logistic,
    fit_pca,
    fit_persistence,
    fit_random,
    fit_ts2vec,
    raw_feature_probe,
    window_stats,
)
from training.evaluate.encode import CodeFeatures, ReconstructionError
from training.evaluate.metrics import (
    METRICS,
    best_f1_threshold,
    bootstrap_ci,
    brier,
    metrics,
    reliability,
)
from training.evaluate.probe import ProbeConfig, ProbeState, SavedProbe
from training.evaluate.results import (
    Results,
    Row,
    RunInfo,
    SplitSummary,
    Stat,
    git_commit,
    write_results,
)

if TYPE_CHECKING:
    from model import SCJEPA

FitFn = Callable[[FitContext, int], Scorer]
SUBSETS = ("all", "onset", "continuation")


@dataclass
class Fitted:
    """One method fitted with one seed, thresholded on validation."""

    seed: int
    scorer: Scorer
    threshold: float
    val: dict[str, float]  # validation metrics at ``threshold``
    info: ProbeState | None = None  # the probe's state, for probe rows


@dataclass
class Evaluation:
    """What :func:`evaluate` returns: results.json's rows and summaries, and what only
    this process needs (the test split, its scores, the fitted methods)."""

    dataset: str
    splits: dict[str, SplitSummary]
    seeds: list[int]
    rows: dict[str, Row]
    wall_time_s: float
    scores: dict[str, np.ndarray]  # method -> test scores (seeds, N)
    test: Samples
    fitted: dict[str, list[Fitted]]

    def results(self, run: RunInfo | None = None) -> Results:
        """results.json's content; ``run`` (checkpoint, config, ...) follows the rows."""
        res: Results = {
            "dataset": self.dataset,
            "splits": self.splits,
            "seeds": self.seeds,
            "rows": self.rows,
            "wall_time_s": self.wall_time_s,
        }
        if run is not None:
            res["checkpoint"] = run["checkpoint"]
            res["config"] = run["config"]
            res["git_commit"] = run["git_commit"]
            res["command"] = run["command"]
            res["created"] = run["created"]
        return res


def normal_windows(ds: Dataset, window: int = WINDOW) -> np.ndarray:
    """Official TRAIN windows of every entity (masked channels), for label-free fits."""
    return np.concatenate(
        [cut_windows(e.train[:, ds.mask], window) for e in ds.entities]
    )


TS2VEC_ROW = "TS2Vec + same probe"


def baseline_methods(
    normal: np.ndarray, ts2vec: TS2VecConfig | None = None
) -> dict[str, FitFn]:
    """The baseline rows; TS2Vec (a peer representation learner) when ``ts2vec``."""
    methods: dict[str, FitFn] = {
        "always-positive": fit_always_positive,
        "random": fit_random,
        "persistence (IForest)": fit_persistence,
        "kNN to train windows": fit_knn,
        "PCA reconstruction": fit_pca,
        "logistic, pooled stats": fit_logistic,
        "raw-feature probe (MLP)": raw_feature_probe(normal),
    }
    if ts2vec is not None:
        methods[TS2VEC_ROW] = fit_ts2vec(ts2vec)
    return methods


def fit_methods(
    ctx: FitContext, methods: dict[str, FitFn], seeds: list[int]
) -> dict[str, list[Fitted]]:
    """Step 1: fit and threshold every method on train/val. Never sees the test split."""
    fitted: dict[str, list[Fitted]] = {}
    for name, fit in methods.items():
        fitted[name] = []
        for seed in seeds:
            scorer = fit(ctx, seed)
            s_val = scorer(ctx.val.x)
            thr = best_f1_threshold(ctx.val.y, s_val)
            info = scorer.probe.state() if isinstance(scorer, ProbeScorer) else None
            fitted[name].append(
                Fitted(seed, scorer, thr, metrics(ctx.val.y, s_val, thr), info)
            )
    return fitted


def _subset(s: Samples, name: str) -> np.ndarray:
    return {
        "all": np.ones(len(s), bool),
        "onset": s.cur == 0,
        "continuation": s.cur == 1,
    }[name]


def _summary(rows: list[dict[str, float]]) -> dict[str, Stat]:
    return {
        m: {
            "mean": float(np.nanmean([r[m] for r in rows])),
            "std": float(np.nanstd([r[m] for r in rows])),
        }
        for m in METRICS
    }


def score_test(
    fitted: dict[str, list[Fitted]], test: Samples, n_boot: int = 1000
) -> tuple[dict[str, Row], dict[str, np.ndarray]]:
    """Step 2: the test split, read once: metrics per subset, seed mean/std, bootstrap CI."""
    rows: dict[str, Row] = {}
    scores: dict[str, np.ndarray] = {}
    for name, runs in fitted.items():
        s_test = [f.scorer(test.x) for f in runs]
        thr = [f.threshold for f in runs]
        scores[name] = np.stack(s_test)  # (seeds, N)
        subsets: dict[str, dict[str, Any]] = {}
        for sub in SUBSETS:
            m = _subset(test, sub)
            per_seed = [
                metrics(test.y[m], s[m], t) for s, t in zip(s_test, thr, strict=True)
            ]
            subsets[sub] = {
                **_summary(per_seed),
                "n": int(m.sum()),
                "positives": int(test.y[m].sum()),
            }
        row: Row = {
            "thresholds": thr,
            "val": _summary([f.val for f in runs]),
            "all": subsets["all"],
            "onset": subsets["onset"],
            "continuation": subsets["continuation"],
            "ci95": bootstrap_ci(test.y, s_test, thr, n_boot=n_boot),
        }
        probes = [f.info for f in runs if f.info is not None]
        if probes:
            row["probe"] = probes
            p = np.mean(s_test, axis=0)
            row["brier"] = brier(test.y, p)
            row["reliability"] = reliability(test.y, p)
        rows[name] = row
    return rows, scores


def split_summary(splits: dict[str, Samples]) -> dict[str, SplitSummary]:
    return {
        k: {
            "windows": len(s),
            "positives": int(s.y.sum()),
            "prevalence": float(s.y.mean()),
            "onsets": int(((s.cur == 0) & (s.y == 1)).sum()),
            "onset_windows": int((s.cur == 0).sum()),
        }
        for k, s in splits.items()
    }


def evaluate(
    ds: Dataset,
    methods: dict[str, FitFn],
    seeds: list[int],
    probe: ProbeConfig,
    n_boot: int = 1000,
    splits: dict[str, Samples] | None = None,
    normal: np.ndarray | None = None,
) -> Evaluation:
    """The whole protocol on one data set. ``splits`` and ``normal`` (the official
    train windows) default to :func:`downstream_splits` and :func:`normal_windows`."""
    t0 = time.time()
    splits = splits or downstream_splits(ds)
    normal = normal_windows(ds) if normal is None else normal
    ctx = FitContext(splits["train"], splits["val"], normal, probe)
    fitted = fit_methods(ctx, methods, seeds)
    rows, scores = score_test(fitted, splits["test"], n_boot)
    return Evaluation(
        dataset=ds.name,
        splits=split_summary(splits),
        seeds=seeds,
        rows=rows,
        wall_time_s=time.time() - t0,
        scores=scores,
        test=splits["test"],
        fitted=fitted,
    )


# -- command line --------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    from training.data import DATASETS

    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--root", type=Path, help="data folder (default $SCJEPA_DATA)")
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="pre-trained SC-JEPA checkpoint; without it only baselines run",
    )
    p.add_argument("--seeds", type=int, default=5, help="number of seeds (0..N-1)")
    p.add_argument("--out", type=Path, required=True, help="results folder")
    p.add_argument(
        "--n-boot", type=int, default=1000, help="bootstrap resamples of the test split"
    )
    p.add_argument("--baselines", choices=("all", "none"), default="all")
    p.add_argument(
        "--ts2vec-iters",
        type=int,
        default=TS2VecConfig.iters,
        help="training iterations of the TS2Vec row, per seed (0 = no TS2Vec row; "
        f"default {TS2VecConfig.iters}, TS2Vec's own)",
    )
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="probe setting, e.g. --probe hidden=128 (see ProbeConfig)",
    )
    p.add_argument(
        "--threads", type=int, default=0, help="torch threads (0 = torch default)"
    )


def _probe_config(pairs: list[str]) -> ProbeConfig:
    cfg = ProbeConfig()
    for kv in pairs:
        key, _, value = kv.partition("=")
        if not hasattr(cfg, key):
            raise UserError(f"--probe {kv}: unknown probe setting {key!r}")
        setattr(
            cfg,
            key,
            type(getattr(cfg, key))(value)
            if not isinstance(getattr(cfg, key), bool)
            else value.lower() in ("1", "true", "yes"),
        )
    return cfg


def run(args: argparse.Namespace) -> int:
    import shlex
    import sys
    from dataclasses import asdict

    import torch

    from training.data import load_dataset

    if args.threads:
        torch.set_num_threads(args.threads)
    ds = load_dataset(args.dataset, args.root)
    probe_cfg = _probe_config(args.probe)
    normal = normal_windows(ds)
    if args.ts2vec_iters < 0:
        raise UserError(f"--ts2vec-iters {args.ts2vec_iters}: must be >= 0")
    ts2vec = TS2VecConfig(iters=args.ts2vec_iters) if args.ts2vec_iters else None
    methods = baseline_methods(normal, ts2vec) if args.baselines == "all" else {}
    encoders: dict[str, CodeFeatures] = {}
    model_config: dict[str, Any] | None = None
    if args.checkpoint:
        trained, untrained, model_config = load_encoders(args.checkpoint)
        encoders = {
            "SC-JEPA probe, untrained encoder": CodeFeatures(untrained),
            "SC-JEPA probe": CodeFeatures(trained),
        }
        methods |= {name: fit_feature_probe(f) for name, f in encoders.items()}
        # Diagnostic: does the level/scale information that RevIN removes from the
        # encoder's input add to the codes? Same probe, same pooled window statistics
        # as the raw-feature probe, concatenated to the code features. Saved as
        # probe-stats.pt too: `scjepa export --probe probe-stats.pt` serves it.
        stats = window_stats(normal)
        methods[STATS_ROW] = fit_feature_probe(
            with_window_stats(encoders["SC-JEPA probe"], stats)
        )
        # Label-free: the model's own reconstruction error of the current window,
        # beside the PCA row (same kind of detector, pre-training as its only fit).
        recon = ReconstructionError(trained)
        methods[RECON_ROW] = lambda ctx, seed: recon
        # ... and its floor, as the probe has one: the same score from the untrained
        # model. Where it is as good, the row measures the window (how many channels
        # move), not what pre-training learned.
        recon0 = ReconstructionError(untrained)
        methods[RECON_UNTRAINED_ROW] = lambda ctx, seed: recon0
    if not methods:
        raise UserError("nothing to evaluate: give --checkpoint or keep the baselines")

    ev = evaluate(
        ds, methods, list(range(args.seeds)), probe_cfg, args.n_boot, normal=normal
    )
    run_info: RunInfo = {
        "checkpoint": str(args.checkpoint) if args.checkpoint else None,
        "config": {"probe": asdict(probe_cfg), "model": model_config, "window": WINDOW},
        "git_commit": git_commit(),
        "command": "scjepa evaluate " + shlex.join(sys.argv[2:]),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = write_results(args.out, ev.results(run_info), ev.scores, ev.test)
    if "SC-JEPA probe" in ev.fitted and encoders["SC-JEPA probe"].has_codes:
        # (the served graph reads code probabilities: a codebook-free ablation model
        # is evaluated, not exported)
        ckpt = args.checkpoint
        served_probe(ev, "SC-JEPA probe", ckpt, ds).save(args.out / "probe.pt")
        served_probe(ev, STATS_ROW, ckpt, ds, stats).save(args.out / "probe-stats.pt")
    _figures(args.out, ds, ev, encoders)
    sys.stdout.write((args.out / "results.md").read_text())
    sys.stdout.write(f"\nwrote {path} and figures in {args.out}\n")
    return 0


STATS_ROW = "SC-JEPA probe + window stats (diagnostic)"
RECON_ROW = "SC-JEPA reconstruction error (label-free)"
RECON_UNTRAINED_ROW = "SC-JEPA reconstruction error, untrained model (label-free)"


def with_window_stats(
    codes: CodeFeatures, stats: WindowStatsFeatures
) -> Callable[[np.ndarray], np.ndarray]:
    """Features = [code features, the raw-feature probe's window statistics]."""
    return lambda x: np.concatenate([codes(x), stats(x)], axis=1)


def served_probe(
    ev: Evaluation,
    name: str,
    checkpoint: Path | None,
    ds: Dataset,
    stats: WindowStatsFeatures | None = None,
) -> SavedProbe:
    """The probe `scjepa export` will serve from row ``name``: the seed with the best
    validation PR AUC.

    Its ``features`` say what it reads: "codes" (the spec's probe, P * K inputs) or,
    with ``stats``, "codes+stats" (also the 18 pooled window statistics, with their
    train-set scaling).
    """
    runs = ev.fitted[name]
    i = int(np.argmax([f.val["pr_auc"] for f in runs]))  # chosen on validation only
    chosen = runs[i]
    if not isinstance(chosen.scorer, ProbeScorer):
        raise TypeError(f"{name!r} is not a probe row")
    probe = chosen.scorer.probe
    return SavedProbe(
        state_dict=probe.net.state_dict(),
        n_features=probe.n_features,
        probe=probe.state(),
        threshold=chosen.threshold,
        checkpoint=str(checkpoint) if checkpoint else None,
        dataset=ev.dataset,
        channels=ds.channels,
        mask=ds.mask.tolist(),
        data_fingerprint=ds.fingerprint(),
        features="codes" if stats is None else "codes+stats",
        stats_scale=None
        if stats is None
        else {"mean": stats.scale.mean.tolist(), "std": stats.scale.std.tolist()},
        metrics={
            "val": chosen.val,
            "test": metrics(ev.test.y, ev.scores[name][i], chosen.threshold),
            "test_mean_over_seeds": {
                k: ev.rows[name]["all"][k]["mean"] for k in METRICS
            },
        },
    )


def load_encoders(path: Path) -> tuple[SCJEPA, SCJEPA, dict[str, Any]]:
    """(trained model, same architecture untrained, its config) from a checkpoint."""
    import torch

    from model import SCJEPA, ModelConfig
    from training.pretrain.checkpoint import load_model

    trained = load_model(path)
    cfg = trained.cfg
    torch.manual_seed(0)
    untrained = SCJEPA(ModelConfig(**cfg.to_dict()))
    return trained, untrained, cfg.to_dict()


def _figures(
    out: Path, ds: Dataset, ev: Evaluation, encoders: dict[str, CodeFeatures]
) -> None:
    from training.evaluate import plots

    test, scores, rows = ev.test, ev.scores, ev.rows
    plots.roc_pr(out / "roc_pr.png", test, scores, rows)
    # The timeline shows a risk, so only calibrated rows qualify: SC-JEPA when present.
    calibrated = [n for n in rows if "reliability" in rows[n]]
    if calibrated:
        best = "SC-JEPA probe" if "SC-JEPA probe" in calibrated else calibrated[-1]
        thr = float(np.mean(rows[best]["thresholds"]))
        names = [e.name for e in ds.entities]
        plots.risk_timeline(
            out / "risk_timeline.png", test, scores[best].mean(0), thr, names
        )
        plots.reliability_plot(
            out / "reliability.png", rows[best]["reliability"], rows[best]["brier"]
        )
    if "SC-JEPA probe" in encoders and encoders["SC-JEPA probe"].has_codes:
        codes = encoders["SC-JEPA probe"].codes(test.x)  # (N, V, P)
        plots.code_usage(out / "code_usage.png", codes[test.y == 0], codes[test.y == 1])
