"""`scjepa evaluate`: the anomaly-prediction protocol of evaluation.md, end to end.

    scjepa evaluate --dataset msl --root DIR --checkpoint runs/msl/best.pt --seeds 5 --out results/msl
    scjepa evaluate --dataset skab --root DIR --checkpoint 'runs/skab@{fold}/best.pt' --out results/skab

Step 1 fits every method (baselines and SC-JEPA probes, every seed, every fold) and
picks its thresholds on the train/validation splits: the F1-optimal one on the
validation windows (hop = window), and the one meeting the false-alarm budget on the
validation split's dense windows (evaluation.md item 9). Step 2 reads the test split
once and scores all of them: window metrics at hop = window (items 5-6; the figures of
earlier results files reproduce unchanged), event metrics on the dense windows (items
9-10), block-bootstrap intervals and paired differences with the best baseline (item
11). Data sets split by entity (SKAB, Daphnet) run every fold, each with its own fits,
thresholds and pre-training checkpoint (``{fold}`` in ``--checkpoint``, or one
pre-trained on none of its entities for all), and pool the folds' test splits: every
labelled entity is tested exactly once. Writes results.json
(everything a table needs, with split sizes, seeds, config, git commit, wall time),
results.md, test scores (scores.npz), the served-model cross-validation's out-of-fold
scores (cv_scores.npz) and figures.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from training.data import (
    SERVE,
    WINDOW,
    Dataset,
    Samples,
    cut_windows,
    downstream_splits,
    fit_entities,
    n_folds,
    serving_view,
    split_segments,
)
from training.errors import UserError
from training.evaluate.baselines import (
    FitContext,
    ProbeScorer,
    Scorer,
    TS2VecConfig,
    WindowStatsFeatures,
    fit_always_positive,
    fit_feature_probe,
    fit_kmeans,
    fit_knn,
    fit_level_shift,
    fit_logistic,
    fit_pca,
    fit_persistence,
    fit_random,
    fit_ts2vec,
    raw_feature_probe,
    window_stats,
)
from training.evaluate.events import EventCounts, threshold_at_budget
from training.evaluate.metrics import (
    METRICS,
    best_f1_threshold,
    bootstrap_ci,
    brier,
    metrics,
    reliability,
)
from training.evaluate.parallel import jobs_for
from training.evaluate.probe import (
    SCJEPA_PARTS,
    ProbeConfig,
    ProbeState,
    SavedProbe,
    feature_parts,
)
from training.evaluate.results import (
    Results,
    Row,
    RunInfo,
    SplitSummary,
    Stat,
    git_commit,
    served_any,
    write_results,
)
from training.evaluate.select import (
    OPERATING_BUDGETS,
    CVConfig,
    probe_points,
    quantile_threshold,
)
from training.evaluate.warning import (
    EventConfig,
    Stretch,
    add_cv_budget,
    event_config,
    pooled,
    score_events,
    stretches,
    val_counts,
)
from training.strict_json import json_num

if TYPE_CHECKING:  # torch and the model load in run(): `--help` stays light
    from model import SCJEPA
    from training.evaluate.detectors import ProbeInputs
    from training.evaluate.encode import CodeFeatures
    from training.evaluate.finetune import TunedCandidate

FitFn = Callable[[FitContext, int], Scorer]
Methods = dict[str, FitFn] | Callable[[int], dict[str, FitFn]]
SUBSETS = ("all", "onset", "continuation")


@dataclass
class Fitted:
    """One method fitted with one seed (on one fold), thresholded on validation."""

    seed: int
    scorer: Scorer
    threshold: float
    val: dict[str, float]  # validation metrics at ``threshold``
    info: ProbeState | None = None  # the probe's state, for probe rows
    fold: int = 0
    budget_threshold: float = float("inf")  # meets the false-alarm budget on val
    val_counts: EventCounts | None = None  # validation event counts at the budget
    val_risk: np.ndarray | None = None  # its risks on the dense validation windows
    # validation's budget threshold at each operating point (false alarms per 1,000
    # windows -> threshold; select.OPERATING_BUDGETS and the run's own budget) for a
    # served-model candidate, at the run's budget alone for any other row
    budget_thresholds: dict[float, float] = field(default_factory=dict)


@dataclass
class FoldData:
    """One fold's samples: the windows at hop = window (window metrics, thresholds),
    what the probes fit on, the dense validation and test windows (event metrics) with
    their stretches, and the label-free train windows."""

    fold: int
    splits: dict[str, Samples]
    train: Samples
    dense: dict[str, Samples]
    stretches: dict[str, list[Stretch]]
    normal: np.ndarray


@dataclass
class Evaluation:
    """What :func:`evaluate` returns: results.json's rows and summaries, and what only
    this process needs (the test split, its scores, the fitted methods)."""

    dataset: str
    splits: dict[str, SplitSummary]
    seeds: list[int]
    rows: dict[str, Row]
    wall_time_s: float
    scores: dict[str, np.ndarray]  # method -> test scores (seeds, N), hop = window
    test: Samples  # the test windows (hop = window), pooled over folds
    # method -> every Fitted, fold by fold, seeds in order within a fold
    fitted: dict[str, list[Fitted]]
    extra: dict[str, Any] = field(default_factory=dict)  # results.json's event keys
    dense_scores: dict[str, np.ndarray] = field(default_factory=dict)
    dense_test: Samples | None = None
    test_sizes: list[int] = field(default_factory=list)  # test windows, fold by fold

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
            res["checkpoint_sha256"] = run["checkpoint_sha256"]
            res["config"] = run["config"]
            res["git_commit"] = run["git_commit"]
            res["command"] = run["command"]
            res["created"] = run["created"]
        res.update(self.extra)  # type: ignore[typeddict-item]
        return res


def normal_windows(
    ds: Dataset, window: int = WINDOW, fold: int | None = None
) -> np.ndarray:
    """Official TRAIN windows (masked channels) of the entities ``fold`` may fit on,
    for label-free fits (every entity for a split in time)."""
    return np.concatenate(
        [
            cut_windows(ds.entities[i].train[:, ds.mask], window)
            for i in fit_entities(ds, fold if ds.folds else None)
        ]
    )


def prepare_folds(
    ds: Dataset,
    events: EventConfig,
    window: int = WINDOW,
    fit_stride: int | None = None,
) -> list[FoldData]:
    """Every fold's samples (evaluation.md items 2 and 10)."""
    return [prepare_fold(ds, k, events, window, fit_stride) for k in range(n_folds(ds))]


def prepare_fold(
    ds: Dataset,
    k: int,
    events: EventConfig,
    window: int = WINDOW,
    fit_stride: int | None = None,
) -> FoldData:
    """Fold ``k``'s samples: its splits, the probe's train samples (a window every
    ``fit_stride`` steps), the dense windows and stretches the events count."""
    splits = downstream_splits(ds, window, fold=k)
    fit = fit_stride or window
    train = (
        splits["train"]
        if fit == window
        else downstream_splits(ds, window, fit, fold=k)["train"]
    )
    return _fold(ds, k, splits, train, events, window)


def test_stretches(folds: list[FoldData]) -> list[Stretch]:
    """Every fold's test stretches, indexing the folds' dense test windows pooled in
    fold order (how evaluate pools the scores)."""
    offsets = np.cumsum([0] + [len(fd.dense["test"]) for fd in folds])
    return pooled([s for fd in folds for s in fd.stretches["test"]], offsets)


def _fold(
    ds: Dataset,
    k: int,
    splits: dict[str, Samples],
    train: Samples,
    events: EventConfig,
    window: int,
) -> FoldData:
    dense = downstream_splits(ds, window, events.stride, fold=k)
    dense = {s: dense[s] for s in ("val", "test")}
    ranges = split_segments(ds, window, k)
    return FoldData(
        fold=k,
        splits=splits,
        train=train,
        dense=dense,
        stretches={s: stretches(ds, dense[s], ranges[s], k) for s in dense},
        normal=normal_windows(ds, window, k if ds.folds else None),
    )


TS2VEC_ROW = "TS2Vec + same probe"


def baseline_methods(
    normal: np.ndarray, ts2vec: TS2VecConfig | None = None, trees: bool = False
) -> dict[str, FitFn]:
    """The baseline rows; TS2Vec (a peer representation learner) when ``ts2vec``; the
    raw-feature probe's trees twin with ``trees``."""
    methods: dict[str, FitFn] = {
        "always-positive": fit_always_positive,
        "random": fit_random,
        "persistence (IForest)": fit_persistence,
        "kNN to train windows": fit_knn,
        "PCA reconstruction": fit_pca,
        "logistic, pooled stats": fit_logistic,
        RAW_ROW: raw_feature_probe(normal),
        "level / variance shift (training-free)": fit_level_shift,
        "k-means distance": fit_kmeans,
    }
    if trees:
        methods[RAW_TREES_ROW] = raw_feature_probe(normal, kind="trees")
    if ts2vec is not None:
        methods[TS2VEC_ROW] = fit_ts2vec(ts2vec)
    return methods


def _say(msg: str, progress: bool) -> None:
    if progress:
        sys.stderr.write(f"evaluate: {msg}\n")
        sys.stderr.flush()


def fit_methods(
    ctx: FitContext,
    methods: dict[str, FitFn],
    seeds: list[int],
    fold: int = 0,
    progress: bool = False,
    prefix: str = "",
) -> dict[str, list[Fitted]]:
    """Step 1: fit and threshold every method on train/val. Never sees the test split."""
    fitted: dict[str, list[Fitted]] = {}
    for j, (name, fit) in enumerate(methods.items()):
        t0 = time.time()
        fitted[name] = []
        for seed in seeds:
            scorer = fit(ctx, seed)
            s_val = scorer(ctx.val.x)
            thr = best_f1_threshold(ctx.val.y, s_val)
            info = scorer.probe.state() if isinstance(scorer, ProbeScorer) else None
            fitted[name].append(
                Fitted(seed, scorer, thr, metrics(ctx.val.y, s_val, thr), info, fold)
            )
        _say(
            f"{prefix}[{j + 1}/{len(methods)}] {name}: fitted {len(seeds)} seed(s) "
            f"in {time.time() - t0:.1f} s",
            progress,
        )
    return fitted


def _subset(s: Samples, name: str) -> np.ndarray:
    return {
        "all": np.ones(len(s), bool),
        "onset": s.cur == 0,
        "continuation": s.cur == 1,
    }[name]


def _summary(rows: list[dict[str, float]]) -> dict[str, Stat]:
    """Mean and std over seeds; NaN (n/a) where no seed has the figure, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # every seed NaN
        return {
            m: {
                "mean": float(np.nanmean([r[m] for r in rows])),
                "std": float(np.nanstd([r[m] for r in rows])),
            }
            for m in METRICS
        }


def window_row(
    test: Samples,
    s_test: list[np.ndarray],
    thr: list[Any],
    runs: list[Fitted],
    n_boot: int,
) -> Row:
    """The window metrics of one method (items 5-6): per subset, seed mean/std, the
    i.i.d. bootstrap interval of the seed mean (``ci95``, as in earlier results files);
    ``thr`` holds one threshold per seed, a float or one per window (folds)."""
    subsets: dict[str, dict[str, Any]] = {}
    for sub in SUBSETS:
        m = _subset(test, sub)
        per_seed = [
            metrics(test.y[m], s[m], t[m] if np.ndim(t) else t)
            for s, t in zip(s_test, thr, strict=True)
        ]
        subsets[sub] = {
            **_summary(per_seed),
            "n": int(m.sum()),
            "positives": int(test.y[m].sum()),
        }
    row: Row = {
        "thresholds": _by_seed(runs, "threshold"),
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
    return row


def _by_seed(runs: list[Fitted], attr: str) -> list[Any]:
    """Per seed: the value of each fold (folds), or the value itself (one fold)."""
    seeds = list(dict.fromkeys(f.seed for f in runs))
    folds = sorted({f.fold for f in runs})
    table = {(f.seed, f.fold): getattr(f, attr) for f in runs}
    if folds == [0]:
        return [table[(s, 0)] for s in seeds]
    return [[table[(s, k)] for k in folds] for s in seeds]


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
    methods: Methods,
    seeds: list[int],
    probe: ProbeConfig,
    n_boot: int = 1000,
    splits: dict[str, Samples] | None = None,
    normal: np.ndarray | None = None,
    events: EventConfig | None = None,
    fit_stride: int | None = None,
    folds: list[FoldData] | None = None,
    progress: bool = False,
) -> Evaluation:
    """The whole protocol on one data set.

    ``methods``: the rows, or a function fold -> rows (a fold's SC-JEPA rows read that
    fold's checkpoint). ``splits`` and ``normal`` (one fold's hop-window samples and
    label-free train windows) default to :func:`prepare_folds`'s; ``events`` (dense
    stride, look-back, false-alarm budget) to the data set's defaults.
    """
    t0 = time.time()
    events = events or event_config(ds)
    if folds is None:
        if splits is not None:
            if n_folds(ds) != 1:
                raise ValueError("splits= is for data sets with one fold")
            fd = _fold(ds, 0, splits, splits["train"], events, WINDOW)
            if normal is not None:
                fd.normal = normal
            folds = [fd]
        else:
            folds = prepare_folds(ds, events, fit_stride=fit_stride)
            if normal is not None and len(folds) == 1:
                folds[0].normal = normal
    fitted: dict[str, list[Fitted]] = {}
    per_fold: list[dict[str, list[Fitted]]] = []
    for fd in folds:
        ctx = FitContext(fd.train, fd.splits["val"], fd.normal, probe)
        fold_methods = methods(fd.fold) if callable(methods) else methods
        prefix = f"fold {fd.fold + 1}/{len(folds)} " if len(folds) > 1 else ""
        got = fit_methods(ctx, fold_methods, seeds, fd.fold, progress, prefix)
        per_fold.append(got)
        for name, runs in got.items():
            fitted.setdefault(name, []).extend(runs)
    names = list(fitted)
    # Step 2: the test windows (hop = window), then the dense windows: validation for
    # the budget thresholds (a function of validation data only), then test. (The
    # order keeps a stateful scorer's test draws where earlier results had them.)
    if len(folds) == 1:  # the fold's own arrays: encoders cache per array
        test, dense_test = folds[0].splits["test"], folds[0].dense["test"]
    else:
        test = Samples.concat([fd.splits["test"] for fd in folds])
        dense_test = Samples.concat([fd.dense["test"] for fd in folds])
    test_sizes = [len(fd.splits["test"]) for fd in folds]
    scores: dict[str, np.ndarray] = {}
    dense_scores: dict[str, np.ndarray] = {}
    for j, name in enumerate(names):
        t1 = time.time()
        hop, dense = [], []
        for fd, got in zip(folds, per_fold, strict=True):
            runs = got.get(name, [])
            hop.append(np.stack([f.scorer(fd.splits["test"].x) for f in runs]))
            for f in runs:
                budget_on_val(f, name, fd, events)
            dense.append(np.stack([f.scorer(fd.dense["test"].x) for f in runs]))
        scores[name] = np.concatenate(hop, axis=1)  # (seeds, N)
        dense_scores[name] = np.concatenate(dense, axis=1)
        _say(
            f"scoring the test split: [{j + 1}/{len(names)}] {name} "
            f"({time.time() - t1:.1f} s)",
            progress,
        )
    rows: dict[str, Row] = {}
    for name in names:
        runs = fitted[name]
        thr = _thresholds_per_window(runs, folds, seeds)
        rows[name] = window_row(test, list(scores[name]), thr, runs, n_boot)
    _say("events, block bootstrap and paired differences ...", progress)
    extra = score_events(
        ds=ds,
        rows=rows,
        fitted=fitted,
        seeds=seeds,
        test=test,
        scores=scores,
        dense_scores=dense_scores,
        test_stretches=test_stretches(folds),
        val_dense=[fd.dense["val"] for fd in folds],
        events=events,
        n_boot=n_boot,
        test_sizes=test_sizes,
    )
    summary = _pooled_summary(folds)
    return Evaluation(
        dataset=ds.name,
        splits=summary,
        seeds=seeds,
        rows=rows,
        wall_time_s=time.time() - t0,
        scores=scores,
        test=test,
        fitted=fitted,
        extra=extra,
        dense_scores=dense_scores,
        dense_test=dense_test,
        test_sizes=test_sizes,
    )


def budget_on_val(f: Fitted, name: str, fd: FoldData, events: EventConfig) -> None:
    """``f``'s thresholds keeping the false-alarm budget on the fold's dense
    validation windows: a served-model candidate's at every operating point (the
    run's budget among them), with its validation risks (the served threshold's
    quantile reads them); any other row's at the run's budget."""
    val_scores = f.scorer(fd.dense["val"].x)
    budgets = operating_budgets(events) if name in CANDIDATES else [events.budget]
    f.budget_thresholds = {
        b: _budget(fd.stretches["val"], val_scores, events.lookback, b) for b in budgets
    }
    f.budget_threshold = f.budget_thresholds[events.budget]
    if name in CANDIDATES:
        f.val_risk = val_scores
    f.val_counts = val_counts(
        fd.stretches["val"], val_scores, f.budget_threshold, events.lookback
    )


def _budget(
    val: list[Stretch], scores: np.ndarray, lookback: int, budget: float
) -> float:
    """The lowest threshold keeping validation false alarms within ``budget``."""
    segs = [s.segment(scores) for s in val]
    if not segs or not sum(len(s.ends) for s in segs):
        return float("inf")
    return threshold_at_budget(segs, lookback, budget)


def operating_budgets(events: EventConfig) -> list[float]:
    """The served model's operating points: select.OPERATING_BUDGETS and the run's
    own budget (``--fa-budget``), false alarms per 1,000 windows."""
    return sorted({*OPERATING_BUDGETS, float(events.budget)})


def _thresholds_per_window(
    runs: list[Fitted], folds: list[FoldData], seeds: list[int]
) -> list[Any]:
    """Per seed: its threshold (one fold), or each test window's fold's threshold."""
    if len(folds) == 1:
        return [f.threshold for f in runs]
    out = []
    for seed in seeds:
        parts = []
        for fd in folds:
            f = next(r for r in runs if r.seed == seed and r.fold == fd.fold)
            parts.append(np.full(len(fd.splits["test"]), f.threshold))
        out.append(np.concatenate(parts))
    return out


def _pooled_summary(folds: list[FoldData]) -> dict[str, SplitSummary]:
    """Split sizes: the fold's own (one fold); test pooled over folds and train / val
    summed over folds (several)."""
    if len(folds) == 1:
        return split_summary(folds[0].splits)
    return split_summary(
        {
            s: Samples.concat([fd.splits[s] for fd in folds])
            for s in ("train", "val", "test")
        }
    )


# -- command line --------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    from training.data import DATASETS

    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--root", type=Path, help="data folder (default $SCJEPA_DATA)")
    p.add_argument(
        "--checkpoint",
        help="pre-trained SC-JEPA checkpoint; without it only baselines run. For a "
        "data set split by entity, one per fold: a path with {fold} in it, e.g. "
        "'runs/skab@{fold}/best.pt' (pre-trained with --dataset skab@K), or one "
        "pre-trained without any of its entities (e.g. on other data sets), which "
        "serves every fold; a checkpoint pre-trained on an entity that a fold "
        "validates or tests on is refused",
    )
    p.add_argument(
        "--serve-checkpoint",
        type=Path,
        help="a data set split by entity: the files to serve hold the model fitted on "
        "every entity but fold 0's validation ones, reading this checkpoint (pre-trained "
        "with --dataset NAME@serve), instead of fold 0's model; the figures stay the "
        "folds'",
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
        "--stride",
        type=int,
        help="steps between the dense windows the event metrics score (default: the "
        "data set's, e.g. 5)",
    )
    p.add_argument(
        "--lookback",
        type=int,
        help="steps before an onset in which an alert warns it (default: the data "
        "set's, e.g. one window)",
    )
    p.add_argument(
        "--fa-budget",
        type=float,
        default=1.0,
        help="false-alarm budget, per 1,000 scored windows, of the event tables and "
        "the served threshold (default 1); every served-model candidate's thresholds "
        "are also set at "
        + ", ".join(f"{b:g}" for b in OPERATING_BUDGETS)
        + " (operating points: scjepa export --fa-budget)",
    )
    p.add_argument(
        "--fit-stride",
        type=int,
        help="stride of the windows the probes train on (default: the window, "
        "non-overlapping)",
    )
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="probe setting, e.g. --probe hidden=128 (see ProbeConfig)",
    )
    p.add_argument(
        "--tree-probes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also fit every served-model candidate and the raw-feature probe with "
        "gradient-boosted trees (the '(trees)' rows, candidates to serve too; on by "
        "default since they raised the held-out warned rate on the four data sets: "
        "docs/notebook/results-notes.md, 2026-11-27, sixth session); "
        "--no-tree-probes fits the MLP probes only (on Daphnet about half the wall time)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="cores to use: the threads of every pool (torch's, and the BLAS and "
        "OpenMP pools of numpy, scipy and scikit-learn) and the worker processes, "
        "of one thread each, of the cross-validation that chooses the served model "
        "(0 = all cores)",
    )
    p.add_argument(
        "--fine-tune",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also fit the fine-tuned candidate, '"
        + TUNED_ROW
        + "' (SC-JEPA's encoder and codebook trained further with a probe on the "
        "next window's label, then read by the trees; beside it its floor, the same "
        "from the untrained model; needs --tree-probes): "
        "docs/notebook/results-notes.md, 2026-11-29, seventeenth session. "
        "--no-fine-tune leaves both out: most of the wall time on large tables (SMD-19: "
        "about 40 min less on 2 CPUs; a SWaT-sized table: about 70 of 105 min)",
    )
    p.add_argument(
        "--cv-blocks",
        type=int,
        default=CVConfig.blocks,
        help="blocks of the train + validation portion for choosing the served model "
        "by cross-validation (training/evaluate/select.py; 0 = choose on the "
        f"validation split alone; default {CVConfig.blocks})",
    )
    p.add_argument(
        "--cv-seeds",
        type=int,
        default=CVConfig.seeds,
        help=f"probe seeds per held-out block (default {CVConfig.seeds})",
    )
    from training.data.cli import add_table_arguments

    add_table_arguments(p)


def _cross_validate(
    ds: Dataset,
    folds: list[FoldData],
    inputs: dict[int, dict[str, ProbeInputs | TunedCandidate]],
    rows: dict[str, Row],
    probe: ProbeConfig,
    events: EventConfig,
    cv: CVConfig,
    out: Path,
) -> dict[str, Any] | None:
    """The served-model choice on every fold's train + validation portion
    (training/evaluate/select.py); None when a fold has fewer than 3 blocks with
    windows or no candidate (then the leaderboard ranks on validation alone). The
    out-of-fold risks go to ``out``/cv_scores.npz
    (:func:`~training.evaluate.select.read_out_of_fold`), so the choice can be
    audited and other rules compared without refitting."""
    from training.evaluate.finetune import TunedCandidate
    from training.evaluate.select import (
        HeldOut,
        OutOfFold,
        choose,
        cv_blocks,
        operating_points,
        out_of_fold,
        write_out_of_fold,
    )

    names = [
        n
        for n in CANDIDATES
        if n in rows and all(n in inputs.get(fd.fold, {}) for fd in folds)
    ]
    blocks = [cv_blocks(ds, fd.fold, cv.blocks, events.stride) for fd in folds]
    if not names or any(len(b) < 3 for b in blocks):
        sys.stderr.write(
            "evaluate: too little train + validation data for "
            f"{cv.blocks} blocks: the served model is chosen on validation alone\n"
        )
        return None
    t0 = time.time()

    def cross_fit(n: str, fold: int, b: list[HeldOut]) -> OutOfFold:
        f = inputs[fold][n]
        if isinstance(f, TunedCandidate):  # fine-tuned anew for every fit
            return f.out_of_fold(b, probe, range(cv.seeds), cv.jobs)
        kind = probe_kind(n)
        return out_of_fold(b, f, replace(probe, kind=kind), range(cv.seeds), cv.jobs)

    _say(
        f"choosing the served model: {cv.blocks}-block cross-validation of "
        f"{len(names)} candidates on train + validation ...",
        True,
    )
    oof: dict[str, list[OutOfFold]] = {}
    for j, n in enumerate(names):
        t1 = time.time()
        oof[n] = []
        for fd, b in zip(folds, blocks, strict=True):
            t2 = time.time()
            oof[n].append(cross_fit(n, fd.fold, b))
            if len(folds) > 1:  # (a candidate can take many minutes on every fold)
                _say(
                    f"cross-validation: fold {fd.fold + 1}/{len(folds)} of "
                    f"[{j + 1}/{len(names)}] {n} ({time.time() - t2:.1f} s)",
                    True,
                )
        _say(
            f"cross-validation: [{j + 1}/{len(names)}] {n} ({time.time() - t1:.1f} s)",
            True,
        )
    choice = choose(blocks, oof, events.lookback, cv)
    # per candidate: its thresholds at each budget on the out-of-fold risks, per fold,
    # in risks and as a quantile within each block (select.operating_points): the
    # served threshold's and, at the other budgets, `scjepa export --fa-budget`'s
    choice["operating_points"] = {
        n: operating_points(blocks, oof[n], events.lookback, operating_budgets(events))
        for n in names
    }
    choice["budget"] = float(events.budget)
    write_out_of_fold(out / "cv_scores.npz", oof)
    _say(
        f"served model chosen by {cv.blocks}-block cross-validation "
        f"({len(names)} candidates, {cv.seeds} seed(s), {time.time() - t0:.0f} s): "
        f"{choice['winner']}",
        True,
    )
    return choice


def _probe_config(pairs: list[str]) -> ProbeConfig:
    cfg = ProbeConfig()
    for kv in pairs:
        key, _, value = kv.partition("=")
        if not hasattr(cfg, key):
            raise UserError(f"--probe {kv}: unknown probe setting {key!r}")
        if key == "kind":  # each row names its probe; a global kind would mislabel them
            raise UserError(
                f"--probe {kv}: the probe kind is each row's own (the '(trees)' rows "
                "are the trees; --no-tree-probes leaves them out)"
            )
        default = getattr(cfg, key)
        kind = type(default)
        if kind is bool:
            if value.lower() not in ("1", "true", "yes", "0", "false", "no"):
                raise UserError(f"--probe {kv}: {key} is true or false")
            setattr(cfg, key, value.lower() in ("1", "true", "yes"))
            continue
        try:
            v = kind(value)
        except ValueError:
            what = {int: "an integer", float: "a number"}.get(kind, "a value")
            raise UserError(f"--probe {kv}: {key} takes {what}") from None
        if kind is str and key in PROBE_CHOICES and v not in PROBE_CHOICES[key]:
            raise UserError(
                f"--probe {kv}: {key} is one of {', '.join(PROBE_CHOICES[key])}"
            )
        ok, want = PROBE_RANGES.get(key, (lambda _: True, ""))
        if kind in (int, float) and not (np.isfinite(v) and ok(v)):
            raise UserError(f"--probe {kv}: {key} must be {want}")
        setattr(cfg, key, v)
    return cfg


# --probe values: the text settings' choices, the numbers' ranges
PROBE_CHOICES = {
    "select_on": ("val_loss", "val_auc"),
    "calibration": ("platt", "none"),
    "tree_select_on": ("none", "val_loss", "val_auc"),
}
PROBE_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "hidden": (lambda v: v >= 1, ">= 1"),
    "dropout": (lambda v: 0 <= v < 1, ">= 0 and < 1"),
    "lr": (lambda v: v > 0, "> 0"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "max_epochs": (lambda v: v >= 1, ">= 1"),
    "patience": (lambda v: v >= 1, ">= 1"),
    "max_trees": (lambda v: v >= 1, ">= 1"),
    "tree_lr": (lambda v: v > 0, "> 0"),
    "max_leaves": (lambda v: v >= 2, ">= 2"),
    "max_features": (lambda v: 0 < v <= 1, "> 0 and <= 1"),
}


def _checkpoint(spec: str, fold: int, ds: Dataset) -> Path:
    """The checkpoint of ``fold``: ``spec`` with {fold} filled in. For a data set split
    by entity it may not have been pre-trained on an entity that the fold validates or
    tests on: one recording its corpus is checked (so one pre-trained on other data
    sets alone serves every fold, with no {fold}); one that does not (written before
    checkpoints did) must be the fold's own, a path with {fold}."""
    from training.pretrain.checkpoint import corpus_overlap

    path = Path(spec.replace("{fold}", str(fold)))
    if not path.is_file():
        raise UserError(f"{path}: checkpoint not found")
    if not ds.folds:
        return path
    f = ds.folds[fold]
    held = [ds.entities[i].name for i in sorted([*f["val"], *f["test"]])]
    seen = corpus_overlap(path, ds.name, held)
    per_fold = (
        f"pre-train each fold on its own train entities (--dataset {ds.name}@K) and "
        f"give a path with {{fold}}, e.g. 'runs/{ds.name}@{{fold}}/best.pt'"
    )
    if seen is None and "{fold}" not in spec:
        raise UserError(
            f"--checkpoint {spec}: {ds.name} is split by entity into {len(ds.folds)} "
            f"folds, and this checkpoint does not record what it was pre-trained on; "
            + per_fold
        )
    if seen:
        raise UserError(
            f"--checkpoint {path}: pre-trained on {ds.name} entities that fold {fold} "
            f"validates or tests on ({', '.join(seen)}); " + per_fold
        )
    return path


def limit_threads(n: int) -> Any:
    """Hold the process to ``n`` threads in torch and in the BLAS and OpenMP pools of
    numpy, scipy and scikit-learn (the PCA's SVD, the trees); returns the
    threadpoolctl limiter (``restore_original_limits()`` undoes it). With torch's
    alone, two runs side by side on two cores each ran two BLAS threads: the PCA
    row's SVD took 81-93 s against 23 s at one thread (docs/notebook/benchmarks.md,
    2026-11-29)."""
    import scipy.linalg  # noqa: F401  load the pools first: only loaded ones are limited
    import sklearn.ensemble  # noqa: F401
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(n)
    return threadpool_limits(n)


def run(args: argparse.Namespace) -> int:
    import shlex
    from dataclasses import asdict

    from training.data import load_dataset
    from training.data.cli import table_options
    from training.evaluate.detectors import DetectorScores, ProbeInputs
    from training.evaluate.encode import CodeFeatures, ReconstructionError
    from training.evaluate.finetune import TunedCandidate
    from training.pretrain.checkpoint import corpus_overlap, file_sha256

    started = time.time()
    # (before any work: a bad value is one line, not a traceback minutes later)
    if args.seeds < 1:
        raise UserError(f"--seeds {args.seeds}: must be >= 1")
    if args.n_boot < 0:
        raise UserError(f"--n-boot {args.n_boot}: must be >= 0 (0: no intervals)")
    if args.threads < 0:
        raise UserError(f"--threads {args.threads}: must be >= 0 (0 = all cores)")
    if not (np.isfinite(args.fa_budget) and args.fa_budget >= 0):
        raise UserError(
            f"--fa-budget {args.fa_budget:g}: false alarms per 1,000 windows, a "
            "number >= 0"
        )
    probe_cfg = _probe_config(args.probe)
    if args.threads:
        limit_threads(args.threads)
    ds = load_dataset(args.dataset, args.root, **table_options(args, args.dataset))
    if args.ts2vec_iters < 0:
        raise UserError(f"--ts2vec-iters {args.ts2vec_iters}: must be >= 0")
    for flag in ("stride", "lookback", "fit_stride"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')}: must be >= 1")
    events = event_config(ds, args.stride, args.lookback, args.fa_budget)
    if args.cv_blocks and args.cv_blocks < 3:
        raise UserError(f"--cv-blocks {args.cv_blocks}: 0 (off) or at least 3")
    if args.cv_seeds < 1:
        raise UserError(f"--cv-seeds {args.cv_seeds}: must be >= 1")
    cv = CVConfig(
        blocks=args.cv_blocks,
        seeds=args.cv_seeds,
        n_boot=args.n_boot,
        jobs=jobs_for(args.threads),
    )
    ts2vec = TS2VecConfig(iters=args.ts2vec_iters) if args.ts2vec_iters else None
    checkpoints = (
        [_checkpoint(args.checkpoint, k, ds) for k in range(n_folds(ds))]
        if args.checkpoint
        else []
    )
    if not checkpoints and args.baselines == "none":
        raise UserError("nothing to evaluate: give --checkpoint or keep the baselines")
    if args.serve_checkpoint is not None:
        if not ds.folds:
            raise UserError(
                f"--serve-checkpoint: {ds.name} is split in time per entity; its "
                "served model is already fitted on every entity (give --checkpoint only)"
            )
        if not checkpoints:
            raise UserError("--serve-checkpoint needs --checkpoint (the folds' models)")
        if not args.serve_checkpoint.is_file():
            raise UserError(f"{args.serve_checkpoint}: checkpoint not found")
        view = serving_view(ds)
        held = [view.entities[i].name for i in sorted(view.folds[0]["val"])]
        seen = corpus_overlap(args.serve_checkpoint, ds.name, held)
        if seen:
            raise UserError(
                f"--serve-checkpoint {args.serve_checkpoint}: pre-trained on "
                f"{ds.name} entities that stop and threshold the served model "
                f"({', '.join(seen)}); pre-train it with --dataset {ds.name}@{SERVE}"
            )
    folds = prepare_folds(ds, events, fit_stride=args.fit_stride)
    encoders: dict[int, dict[str, CodeFeatures]] = {}
    # fold -> row -> what it reads
    inputs: dict[int, dict[str, ProbeInputs | TunedCandidate]] = {}
    model_config: dict[str, Any] | None = None

    def methods_for(fold: int) -> dict[str, FitFn]:
        nonlocal model_config
        normal = folds[fold].normal
        methods = (
            baseline_methods(normal, ts2vec, args.tree_probes)
            if args.baselines == "all"
            else {}
        )
        if checkpoints:
            trained, untrained, model_config = load_encoders(checkpoints[fold])
            enc = {
                "SC-JEPA probe, untrained encoder": CodeFeatures(untrained),
                "SC-JEPA probe": CodeFeatures(trained),
            }
            encoders[fold] = enc
            methods |= {name: fit_feature_probe(f) for name, f in enc.items()}
            # Diagnostic: does the level/scale information that RevIN removes from the
            # encoder's input add to the codes? Same probe, same pooled window
            # statistics as the raw-feature probe, concatenated to the code features.
            # Saved as probe-stats.pt too: `scjepa export --probe probe-stats.pt`.
            stats = window_stats(normal)
            methods[STATS_ROW] = fit_feature_probe(
                with_window_stats(enc["SC-JEPA probe"], stats)
            )
            # Label-free: the model's own reconstruction error of the current window,
            # beside the PCA row (same kind of detector, pre-training as its only fit)
            # ... and its floor, the same score from the untrained model.
            recon, recon0 = ReconstructionError(trained), ReconstructionError(untrained)
            methods[RECON_ROW] = lambda ctx, seed: recon
            methods[RECON_UNTRAINED_ROW] = lambda ctx, seed: recon0
            # The served-model candidates beyond the two above (issue 20): the probe
            # also reads label-free detector scores computed in the graph, and their
            # refits without SC-JEPA's inputs (what SC-JEPA contributes).
            codes = enc["SC-JEPA probe"]
            dets = DetectorScores(normal, folds[fold].train.x, codes)
            for name, features in (CANDIDATES | ABLATIONS).items():
                if name in methods or name in (RAW_ROW, RAW_TREES_ROW, TUNED_ROW):
                    continue
                if probe_kind(name) == "trees" and not args.tree_probes:
                    continue
                own = {"surprise", "recon"} & set(feature_parts(features))
                if own and not codes.has_codes:  # the codebook-free ablation
                    continue
                f = ProbeInputs(features, codes, stats, dets)
                inputs.setdefault(fold, {})[name] = f
                methods[name] = fit_feature_probe(f, probe_kind(name))
            if codes.has_codes:  # the detector probe's floor: the untrained model's
                # surprise and reconstruction error (kNN and PCA are the same)
                codes0 = enc["SC-JEPA probe, untrained encoder"]
                dets0 = DetectorScores(
                    normal, folds[fold].train.x, codes0, params=dets.params
                )
                f0 = ProbeInputs(CANDIDATES[DET_ONLY_ROW], codes0, None, dets0)
                methods[DET_ONLY_UNTRAINED_ROW] = fit_feature_probe(f0)
            if codes.has_codes and args.tree_probes and args.fine_tune:
                # fine-tuned with the probe, then read by the trees; its floor: the
                # untrained twin fine-tuned the same way (not a candidate)
                tuned = TunedCandidate(trained, stats)
                inputs.setdefault(fold, {})[TUNED_ROW] = tuned
                methods[TUNED_ROW] = tuned.fit
                methods[TUNED_UNTRAINED_ROW] = TunedCandidate(untrained, stats).fit
            for raw in (RAW_ROW, RAW_TREES_ROW):
                if raw in methods:
                    inputs.setdefault(fold, {})[raw] = ProbeInputs(
                        "stats", None, stats, None
                    )
            inputs[fold]["SC-JEPA probe"] = ProbeInputs("codes", codes, None, None)
            inputs[fold][STATS_ROW] = ProbeInputs("codes+stats", codes, stats, None)
        return methods

    ev = evaluate(
        ds,
        methods_for,
        list(range(args.seeds)),
        probe_cfg,
        args.n_boot,
        events=events,
        folds=folds,
        progress=True,
    )
    choice = (
        _cross_validate(ds, folds, inputs, ev.rows, probe_cfg, events, cv, args.out)
        if cv.blocks
        else None
    )
    if choice:
        add_cv_budget(
            ev.rows,
            choice["operating_points"],
            fitted=ev.fitted,
            seeds=ev.seeds,
            test=ev.test,
            dense_scores=ev.dense_scores,
            test_stretches=test_stretches(folds),
            events=events,
            n_boot=args.n_boot,
            test_sizes=ev.test_sizes,
        )
    board = leaderboard(ev.rows, choice)
    if board["rows"]:
        ev.extra["leaderboard"] = board
    ev.wall_time_s = time.time() - started  # the whole run, cross-validation included
    run_info: RunInfo = {
        "checkpoint": str(args.checkpoint) if args.checkpoint else None,
        "checkpoint_sha256": [file_sha256(c) for c in checkpoints],
        "config": {
            "probe": asdict(probe_cfg),
            "model": model_config,
            "window": WINDOW,
            "events": asdict(events),
            "fit_stride": args.fit_stride or WINDOW,
        },
        "git_commit": git_commit(),
        "command": "scjepa evaluate " + shlex.join(sys.argv[2:]),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    single = len(folds) == 1
    # (the served graph reads code probabilities: a codebook-free ablation model
    # is evaluated, not exported; a data set split by entity serves fold 0's
    # model, pre-trained on its checkpoint and fitted on its train entities)
    serve = (
        0 in encoders
        and "SC-JEPA probe" in ev.fitted
        and encoders[0]["SC-JEPA probe"].has_codes
    )
    serving = serve and args.serve_checkpoint is not None
    if serve and not single:
        ev.extra["served_fold"] = SERVE if serving else 0
    if serving:
        ev.extra["serve_checkpoint"] = {
            "path": str(args.serve_checkpoint),
            "sha256": file_sha256(args.serve_checkpoint),
        }
    path = write_results(
        args.out,
        ev.results(run_info),
        ev.scores,
        ev.test,
        ev.dense_scores,
        ev.dense_test,
    )
    if serve:
        ckpt = checkpoints[0]
        got = inputs[0]
        sha = run_info["checkpoint_sha256"][0]
        fits: dict[str, list[Fitted]] | None = None  # (None: fold 0's, in ev)
        if serving:  # the served files' candidates fitted on the serving split
            ckpt = args.serve_checkpoint
            sha = ev.extra["serve_checkpoint"]["sha256"]
            sfd = prepare_fold(serving_view(ds), 0, events, fit_stride=args.fit_stride)
            sfd.fold = len(folds)  # methods_for's index of it
            folds.append(sfd)
            checkpoints.append(ckpt)
            rows = methods_for(sfd.fold)
            keep = {"SC-JEPA probe", STATS_ROW, *CANDIDATES}
            fits = fit_methods(
                FitContext(sfd.train, sfd.splits["val"], sfd.normal, probe_cfg),
                {n: fit for n, fit in rows.items() if n in keep and n in ev.fitted},
                list(range(args.seeds)),
                sfd.fold,
                progress=True,
                prefix="serving split: ",
            )
            for name, runs in fits.items():
                for f in runs:
                    budget_on_val(f, name, sfd, events)
            got = inputs[sfd.fold]

        novelty = served_novelty(ds.name, folds[-1] if serving else folds[0])

        def save(name: str, file: Path, **kw: Any) -> None:
            probe = served_probe(
                ev,
                name,
                ckpt,
                ds,
                sha=sha,
                fits=None if fits is None else fits[name],
                **kw,
            )
            probe.novelty = novelty
            probe.save(file)

        save("SC-JEPA probe", args.out / "probe.pt")
        save(STATS_ROW, args.out / "probe-stats.pt", stats=got[STATS_ROW].stats)
        # the winner on validation: what `scjepa export --probe RESULTS_DIR` serves
        winner = board["winner"]
        save(winner, args.out / SERVED_PROBE, inputs=got[winner], board=board)
        sys.stderr.write(f"evaluate: served model: {winner} ({board['chosen_on']})\n")
        if not single:
            which = (
                "the model fitted on every entity but fold 0's validation ones"
                if serving
                else "fold 0's model (--serve-checkpoint: one fitted on every entity "
                "but fold 0's validation ones)"
            )
            sys.stderr.write(
                f"evaluate: {ds.name} is split by entity into {len(ds.folds)} folds: "
                f"the files to serve hold {which} (export it with --checkpoint "
                f"{ckpt}); the figures pool every fold's model on its own test "
                "entities\n"
            )
        for name in CANDIDATES:  # each candidate, to serve or compare explicitly
            if name in got and name in ev.fitted:
                file = candidate_file(name, got[name].features)
                save(name, args.out / "candidates" / file, inputs=got[name])
    _figures(args.out, ds, ev, encoders.get(0, {}) if single else {})
    sys.stdout.write((args.out / "results.md").read_text())
    sys.stdout.write(f"\nwrote {path} and figures in {args.out}\n")
    return 0


STATS_ROW = "SC-JEPA probe + window stats (diagnostic)"
RAW_ROW = "raw-feature probe (MLP)"
RAW_TREES_ROW = "raw-feature probe (trees)"
DET_ROW = "SC-JEPA probe + stats + detectors"
DET_ONLY_ROW = "SC-JEPA probe on detector scores"
DET_ONLY_UNTRAINED_ROW = "SC-JEPA probe on detector scores, untrained model"
NO_SCJEPA = "(no SC-JEPA)"  # suffix of the ablation rows: not baselines to beat
SERVED_PROBE = "probe-served.pt"
# The served-model candidates (issue 20) and what each probe reads; the winner is
# served. Each reads its inputs with the spec's probe (MLP, BCE, Platt) and, unless
# `--no-tree-probes`, with gradient-boosted trees too (their own stopping and class
# weights, the same calibration; training/evaluate/probe.py), the "(trees)" rows.
_MLP_CANDIDATES = {
    "SC-JEPA probe": "codes",
    STATS_ROW: "codes+stats",
    DET_ROW: "codes+stats+knn+pca+surprise+recon",
    DET_ONLY_ROW: "knn+pca+surprise+recon",
    RAW_ROW: "stats",
}
_TREE_CANDIDATES = {
    (RAW_TREES_ROW if n == RAW_ROW else f"{n} (trees)"): f
    for n, f in _MLP_CANDIDATES.items()
}
# SC-JEPA's encoder and codebook fine-tuned with an MLP head on the next window's
# label, its features (code probabilities, max over channels, and the statistics) read
# by the trees (training/evaluate/finetune.py); `scjepa export` serves the fine-tuned
# weights. Its floor, the untrained twin fine-tuned the same way, is a row, not a
# candidate; its refit without SC-JEPA is the statistics' trees (RAW_TREES_ROW).
TUNED_ROW = "SC-JEPA fine-tuned + stats (trees)"
TUNED_UNTRAINED_ROW = "SC-JEPA fine-tuned + stats, untrained model (trees)"
CANDIDATES = _MLP_CANDIDATES | _TREE_CANDIDATES | {TUNED_ROW: "codes+stats"}
# Each candidate refitted without SC-JEPA's inputs (codes, surprise, recon), where
# that leaves a probe that is not already a row ("codes+stats" -> "stats" is RAW_ROW).
_TREE_ABLATIONS = {
    f"trees on stats + kNN + PCA {NO_SCJEPA}": "stats+knn+pca",
    f"trees on kNN + PCA {NO_SCJEPA}": "knn+pca",
}
ABLATIONS = {
    f"probe on stats + kNN + PCA {NO_SCJEPA}": "stats+knn+pca",
    f"probe on kNN + PCA {NO_SCJEPA}": "knn+pca",
} | _TREE_ABLATIONS


def probe_kind(name: str) -> str:
    """The probe a candidate or ablation row fits: "trees" or "mlp"."""
    trees = {TUNED_ROW, TUNED_UNTRAINED_ROW, *_TREE_CANDIDATES, *_TREE_ABLATIONS}
    return "trees" if name in trees else "mlp"


def candidate_file(name: str, features: str) -> str:
    """Its probe's file under candidates/: "stats.pt", "stats-trees.pt", ...,
    "finetuned-codes+stats-trees.pt" (the fine-tuned weights in it)."""
    tuned = "finetuned-" if name == TUNED_ROW else ""
    kind = "-trees" if probe_kind(name) == "trees" else ""
    return f"{tuned}{features}{kind}.pt"


CHOSEN_ON_VAL = (
    "validation only: warned-event rate at the false-alarm budget (mean over seeds), "
    "then PR AUC"
)
CHOSEN_ON = (
    "train + validation only, time-blocked cross-validation: out-of-fold warned-event "
    "rate averaged over 1, 2, 5 and 10 false alarms per 1,000 windows, then PR AUC, "
    "each within one bootstrap SD of the best; of those, the fewest probe inputs"
)


def without_scjepa(features: str) -> str | None:
    """``features`` less SC-JEPA's inputs (codes, surprise, recon); None if nothing
    is left."""
    rest = [p for p in feature_parts(features) if p not in SCJEPA_PARTS]
    return "+".join(rest) or None


def leaderboard(
    rows: dict[str, Row], choice: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The candidates present in ``rows`` with their validation figures; with
    ``choice`` (:func:`training.evaluate.select.choose`, on train + validation only)
    its figures too, its winner first and the rest by its keys; without, ranked by
    validation warned rate at the false-alarm budget, then PR AUC. Names the winner
    and the row that is the winner without SC-JEPA's inputs."""
    cv = {e["row"]: e for e in choice["rows"]} if choice else {}
    # per candidate, its operating points (select.operating_points); the budget's
    # per fold, out of fold, in risks and in quantiles, under cv_budget_*
    points = (choice or {}).get("operating_points", {})
    budget = (choice or {}).get("budget")
    at = {
        n: next(p for p in ps if p["false_alarms_per_1000"] == budget)
        for n, ps in points.items()
    }
    board = []
    for name, features in CANDIDATES.items():
        if name not in rows or (choice and name not in cv):
            continue
        r = rows[name]
        ve = r.get("val_events", {})
        board.append(
            {
                "row": name,
                "features": features,
                "val_warned_rate": ve.get("warned_rate", {}).get("mean", float("nan")),
                "val_false_alarms_per_1000": ve.get(
                    "false_alarms_per_1000_windows", {}
                ).get("mean", float("nan")),
                "val_pr_auc": r["val"]["pr_auc"]["mean"],
                "val_roc_auc": r["val"]["roc_auc"]["mean"],
            }
            | {k: v for k, v in cv.get(name, {}).items() if k != "row"}
            | (
                {
                    "cv_budget_thresholds": at[name]["cv_budget_thresholds"],
                    "cv_budget_quantiles": at[name]["cv_budget_quantiles"],
                    "operating_points": points[name],
                }
                if name in at
                else {}
            )
        )

    def num(v: float | None) -> float:
        return v if v is not None and np.isfinite(v) else -1.0

    if choice:
        board.sort(
            key=lambda e: (
                e["row"] == choice["winner"],
                num(e["cv_warned_rate"]),
                num(e["cv_pr_auc"]),
            ),
            reverse=True,
        )
    else:
        board.sort(
            key=lambda e: (num(e["val_warned_rate"]), num(e["val_pr_auc"])),
            reverse=True,
        )
    winner = board[0]["row"] if board else None
    ablation = None
    if winner is not None:
        rest = without_scjepa(CANDIDATES[winner])
        by_inputs = {
            (f, probe_kind(n)): n
            for n, f in (CANDIDATES | ABLATIONS).items()
            if n != TUNED_ROW  # (its refit without SC-JEPA: the statistics' trees)
        }
        # (a winner reading no SC-JEPA input has no such refit: it is its own)
        ablation = (
            by_inputs.get((rest, probe_kind(winner)))
            if rest and rest != CANDIDATES[winner]
            else None
        )
        if ablation not in rows:
            ablation = None
    out = {
        "chosen_on": CHOSEN_ON if choice else CHOSEN_ON_VAL,
        "rows": board,
        "winner": winner,
        "winner_without_scjepa": ablation,
    }
    if choice:
        out["cv"] = choice["cv"]
    return out


RECON_ROW = "SC-JEPA reconstruction error (label-free)"
RECON_UNTRAINED_ROW = "SC-JEPA reconstruction error, untrained model (label-free)"


def with_window_stats(
    codes: CodeFeatures, stats: WindowStatsFeatures
) -> Callable[[np.ndarray], np.ndarray]:
    """Features = [code features, the raw-feature probe's window statistics]."""
    return lambda x: np.concatenate([codes(x), stats(x)], axis=1)


def served_novelty(name: str, fd: FoldData) -> dict[str, Any] | None:
    """The input-drift monitor of the files to serve (SavedProbe.novelty), fitted once
    on the data the served probe was fitted and checked on (``fd``: fold 0, or the
    serving split): the normal windows of its train split (the detectors' reference,
    hop 100) and of its validation split (the calibration windows, every stride steps,
    as the service scores), so that a served window unlike them is one the probe and
    its threshold were not fitted or checked on. On data sets split in time these are
    the official test series' first 80 %, not the official train month the label-free
    detectors read: on SMD-19 the later month's normal windows are unlike that one
    (results-notes.md, 2026-12-01, thirty-second session). The same record for every
    probe file, as it reads the raw window whatever the probe reads. None, with a
    note, where the normal windows are too few or too alike to rank a window among."""
    from training.calibrate import novelty_record
    from training.evaluate.detectors import DetectorScores

    ref = fd.splits["train"].x[fd.splits["train"].cur == 0]
    cal = fd.dense["val"].x[fd.dense["val"].cur == 0]
    why = f"{name}: {len(ref)} normal train and {len(cal)} normal validation windows"
    if len(ref) >= 2 and len(cal) >= 2:
        try:
            return novelty_record(DetectorScores(ref, cal), cal, len(ref), name)
        except UserError as e:  # too alike to rank a window among
            why = str(e)
    sys.stderr.write(f"evaluate: the files to serve have no drift monitor: {why}\n")
    return None


def served_probe(
    ev: Evaluation,
    name: str,
    checkpoint: Path | None,
    ds: Dataset,
    stats: WindowStatsFeatures | None = None,
    inputs: ProbeInputs | TunedCandidate | None = None,
    board: dict[str, Any] | None = None,
    sha: str | None = None,
    fits: list[Fitted] | None = None,
) -> SavedProbe:
    """The probe `scjepa export` will serve from row ``name``: the seed with the best
    validation PR AUC (``board``: the leaderboard it won, recorded with it), among
    ``fits`` (a data set split by entity: the row's fits on the serving split,
    which has no test split of its own) or else fold 0's fits.

    Its ``features`` say what it reads: "codes" (the spec's probe, P * K inputs) or,
    with ``stats``, "codes+stats" (also the 18 pooled window statistics, with their
    train-set scaling); with ``inputs`` whatever that featurizer reads (detector
    scores too, their constants stored in the probe); a fine-tuned row's probe
    carries the fine-tuned model's weights (``encoder_state``). ``sha``: the
    checkpoint's SHA-256 where the caller has it (computed otherwise).
    """
    from training.evaluate.finetune import TunedScorer
    from training.pretrain.checkpoint import file_sha256

    # fold 0's fits (seeds in order) unless ``fits``: on a data set split by entity
    # fold 0's model is pre-trained and fitted on its train entities, its test figures
    # those of its own test entities (the first windows of the pooled test split);
    # the serving split's has no test figures of its own
    runs = fits or [f for f in ev.fitted[name] if f.fold == 0]
    n_test = 0 if fits else ev.test_sizes[0]

    # on validation only; by PR AUC, not by the warned count (a fraction of one event)
    i = max(range(len(runs)), key=lambda j: runs[j].val["pr_auc"])
    chosen = runs[i]
    features = (
        inputs.features
        if inputs is not None
        else ("codes" if stats is None else "codes+stats")
    )
    if inputs is not None:
        stats = inputs.stats if "stats" in feature_parts(features) else None
    detectors = (
        inputs.detectors.saved(inputs.detector_names)
        if inputs is not None and inputs.detectors is not None and inputs.detector_names
        else None
    )
    if not isinstance(chosen.scorer, ProbeScorer):
        raise TypeError(f"{name!r} is not a probe row")
    probe = chosen.scorer.probe
    tuned = chosen.scorer.net.model if isinstance(chosen.scorer, TunedScorer) else None
    cv_board = ev.extra.get("leaderboard")  # the cross-fitted thresholds (fold 0)
    u = _cv_value(cv_board, name, "cv_budget_quantiles")
    return SavedProbe(
        state_dict=probe.net.state_dict(),
        n_features=probe.n_features,
        probe=probe.state(),
        threshold=chosen.threshold,
        checkpoint=str(checkpoint) if checkpoint else None,
        checkpoint_sha256=(sha or file_sha256(checkpoint)) if checkpoint else None,
        dataset=ev.dataset,
        channels=ds.channels,
        mask=ds.mask.tolist(),
        data_fingerprint=ds.fingerprint(),
        features=features,
        encoder_state=None if tuned is None else tuned.state_dict(),
        stats_scale=None
        if stats is None
        else {"mean": stats.scale.mean.tolist(), "std": stats.scale.std.tolist()},
        detectors=detectors,
        metrics={
            "val": chosen.val,
            **(
                {
                    "test": metrics(
                        ev.test.y[:n_test],
                        ev.scores[name][i][:n_test],
                        chosen.threshold,
                    )
                }
                if n_test
                else {}
            ),
            # (several folds: every fold's model on its own test entities, pooled)
            "test_mean_over_seeds": {
                k: ev.rows[name]["all"][k]["mean"] for k in METRICS
            },
        }
        | (
            {"fold": _served_fold(ds, serving=bool(fits), checkpoint=checkpoint)}
            if ds.folds
            else {"entities": _time_split_entities(ds)}
        )
        | ({"row": name, "leaderboard": board} if board is not None else {}),
        budget_threshold=float(chosen.budget_threshold),
        cv_budget_threshold=_cv_value(cv_board, name, "cv_budget_thresholds"),
        cv_quantile_threshold=None
        if u is None
        else quantile_threshold(chosen.val_risk, u),
        operating_points=_operating_points(
            cv_board,
            name,
            chosen,
            cast(dict[str, Any], ev.rows.get(name) or {})
            .get("events", {})
            .get("operating_points"),
        ),
        budget={
            "false_alarms_per_1000": float(events["budget_per_1000"]),
            "lookback": float(events["lookback"]),
            "stride": float(events["stride"]),
        }
        | (
            {"steps_per_day": float(events["steps_per_day"])}
            if events.get("steps_per_day")
            else {}
        )
        if (events := ev.extra.get("events"))
        else None,
    )


def _operating_points(
    board: dict[str, Any] | None,
    name: str,
    chosen: Fitted,
    test: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]] | None:
    """The probe's thresholds at each of its row's operating points in the leaderboard
    (fold 0): validation's, the out-of-fold one and the quantile carried to its
    validation risks (inf where none held the budget), each with what the test split
    says it costs and buys (``test``: the row's test figures at each point,
    warning.add_cv_budget; :func:`point_figures`). None where there are no points."""
    rows: list[dict[str, Any]] = (board or {}).get("rows", [])
    row = next((e for e in rows if e["row"] == name), {})
    points = row.get("operating_points")
    if not points:
        return None
    own = probe_points(points, 0, chosen.budget_thresholds, chosen.val_risk)
    at = {t["false_alarms_per_1000"]: t for t in test or []}
    out = []
    for p in own:
        t = at.get(p["false_alarms_per_1000"])
        fig = point_figures(t) if t else None
        out.append(p | ({"test": fig} if fig else {}))
    return out


def _served_fold(
    ds: Dataset, serving: bool = False, checkpoint: Path | None = None
) -> dict[str, Any]:
    """What a served model of a data set split by entity was fitted and tested on
    (entity names): fold 0's entities, or (``serving``) the serving split's, every
    entity but fold 0's validation ones, tested on none; of how many folds. Its
    encoder was pre-trained on the fit entities, or, where ``checkpoint`` records its
    corpus, on that corpus's entities of this data set and on the other data sets
    it names (``pretrained_also_on``)."""
    from training.pretrain.checkpoint import checkpoint_corpus

    view = serving_view(ds) if serving else ds

    def names(split: str) -> list[str]:
        return [view.entities[i].name for i in sorted(view.folds[0][split])]

    corpus = checkpoint_corpus(checkpoint) if checkpoint else None
    pretrained = (
        {"pretrained_on": [view.entities[i].name for i in fit_entities(view, 0)]}
        if corpus is None
        else {
            "pretrained_on": corpus.get(ds.name, []),
            "pretrained_also_on": sorted(n for n in corpus if n != ds.name),
        }
    )
    return {
        "fold": SERVE if serving else 0,
        "of": len(ds.folds),
        **pretrained,
        "fitted_on": names("train"),
        "validated_on": names("val"),
        "tested_on": names("test"),
    }


def _time_split_entities(ds: Dataset) -> dict[str, Any]:
    """What a served model of a data set split in time within each entity was fitted,
    validated and tested on (entity names, those with a window in the split): the
    same machines or channels, each one's earlier stretch fitted and its latest
    tested. Its figures are of these entities, not of others (on SMD-19 machines
    never fitted on the served recipe warned of fewer incidents out of fold:
    docs/notebook/results-notes.md, thirty-sixth session)."""
    splits = downstream_splits(ds, WINDOW)

    def names(split: str) -> list[str]:
        return [ds.entities[i].name for i in np.unique(splits[split].entity)]

    return {
        "split": "time",
        "fitted_on": names("train"),
        "validated_on": names("val"),
        "tested_on": names("test"),
    }


def point_figures(t: dict[str, Any]) -> dict[str, Any] | None:
    """The test split's event figures at one operating point (warning.add_cv_budget's
    dict), as a manifest lists them: means over seeds (and folds), 95 % intervals by
    block bootstrap over events, the chance p of the warned count; None where no
    threshold was served there."""
    if not served_any(t):
        return None

    def ci(key: str) -> list[float | None] | None:
        """A 95 % interval as JSON keeps it (a list; None for NaN), so the manifest
        returned equals the one written."""
        v = t.get("ci95", {}).get(key)
        return None if v is None else [json_num(x) for x in v]

    out = {
        "events": t["events"],
        "windows": t["windows"],
        "warned_rate": json_num(t["warned_rate"]["mean"]),
        "warned_rate_ci95": ci("warned_rate"),
        "late_rate": json_num(t["late"]["mean"] / t["events"]) if t["events"] else None,
        "false_alarms_per_1000": json_num(t["false_alarms_per_1000_windows"]["mean"]),
        "false_alarms_per_1000_ci95": ci("false_alarms_per_1000_windows"),
        "false_pages_per_1000": json_num(
            (t.get("false_pages_per_1000_windows") or {}).get("mean")
        ),
        "false_pages_per_1000_ci95": ci("false_pages_per_1000_windows"),
        "lead_quartiles_steps": t.get("lead_quartiles"),
        "chance_p": json_num(t.get("chance", {}).get("p")),
    }
    if "false_pages_per_day" in t:
        out["false_pages_per_day"] = json_num(t["false_pages_per_day"]["mean"])
        out["false_pages_per_day_ci95"] = ci("false_pages_per_day")
    return out


def _cv_value(board: dict[str, Any] | None, name: str, key: str) -> float | None:
    """Row ``name``'s cross-fitted ``key`` (fold 0; None in JSON is inf: no threshold
    kept the budget) from the leaderboard; None where the row has none."""
    for e in (board or {}).get("rows", []):
        if e["row"] == name and key in e:
            t = e[key][0]
            return float("inf") if t is None else float(t)
    return None


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
    if any("curve" in r for r in rows.values()):
        plots.warning_curves(out / "warning_curve.png", ds.name, rows, ev.extra)
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
