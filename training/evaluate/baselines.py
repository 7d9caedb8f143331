"""Baseline rows every results table carries (evaluation.md, protocol item 7).

Each ``fit_*`` takes the fitting context (downstream train/val samples and the official
train windows, never the test split) and a seed, and returns a scoring function
windows (N, T, V) -> scores (N,), higher = more likely that the next window is anomalous.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from training.data import Samples
from training.evaluate.features import (
    PerArrayCache,
    Standardizer,
    channel_stats,
    pooled_stats,
)
from training.evaluate.metrics import pr_auc
from training.evaluate.probe import Probe, ProbeConfig

# scikit-learn loads in the fits: `scjepa evaluate --help` stays light
if TYPE_CHECKING:
    from sklearn.linear_model import LogisticRegression

Scorer = Callable[[np.ndarray], np.ndarray]


@dataclass
class FitContext:
    train: Samples  # downstream train split (official test series, first 60 %)
    val: Samples  # downstream validation split
    # (N, T, V) official TRAIN windows: label-free detectors fit here
    normal: np.ndarray
    probe: ProbeConfig
    # fits that do not depend on the seed, made once per context (see fit_pca)
    shared: dict[str, Any] = field(default_factory=dict)


def fit_always_positive(ctx: FitContext, seed: int) -> Scorer:
    return lambda x: np.ones(len(x))


def fit_random(ctx: FitContext, seed: int) -> Scorer:
    rng = np.random.default_rng(seed)
    return lambda x: rng.random(len(x))


def _flat_stats(x: np.ndarray) -> np.ndarray:
    return channel_stats(x).reshape(len(x), -1)  # (N, 6 * V)


def fit_persistence(ctx: FitContext, seed: int) -> Scorer:
    """ "The next window is like this one": IsolationForest on the current window's stats."""
    from sklearn.ensemble import IsolationForest

    scale = Standardizer().fit(_flat_stats(ctx.normal))
    forest = IsolationForest(n_estimators=200, random_state=seed).fit(
        scale(_flat_stats(ctx.normal))
    )
    return lambda x: -forest.score_samples(scale(_flat_stats(x)))


def fit_knn(ctx: FitContext, seed: int, k: int = 5) -> Scorer:
    """Mean distance to the k nearest official-train windows (per-channel stats)."""
    from sklearn.neighbors import NearestNeighbors

    scale = Standardizer().fit(_flat_stats(ctx.normal))
    nn_ = NearestNeighbors(n_neighbors=min(k, len(ctx.normal))).fit(
        scale(_flat_stats(ctx.normal))
    )
    return lambda x: nn_.kneighbors(scale(_flat_stats(x)))[0].mean(1)


def fit_pca(ctx: FitContext, seed: int, variance: float = 0.9) -> Scorer:
    """Reconstruction error of the current window by a PCA of official-train windows.
    The full SVD does not depend on the seed, so the seeds share one fit (on a
    SWaT-sized train split, 4,950 windows of 47 channels, one fit takes 23 s on one
    thread)."""
    from sklearn.decomposition import PCA

    pca = ctx.shared.get(f"pca {variance}")
    if pca is None:
        flat = ctx.normal.reshape(len(ctx.normal), -1)
        pca = PCA(n_components=variance, svd_solver="full").fit(flat)
        ctx.shared[f"pca {variance}"] = pca

    def score(x: np.ndarray) -> np.ndarray:
        f = x.reshape(len(x), -1)
        return ((f - pca.inverse_transform(pca.transform(f))) ** 2).mean(1)

    return score


def _shift_scores(
    x: np.ndarray, recent: int, floor: np.ndarray, pool: str
) -> np.ndarray:
    """Per channel: |mean(last ``recent`` steps) - mean(the steps before)| in units of
    the earlier steps' std, plus |log| of the ratio of the two stds; pooled over
    channels (``pool``: mean or max). ``floor`` (V,) keeps flat channels finite."""
    past, now = x[:, :-recent], x[:, -recent:]
    sd_past = past.std(1) + floor  # (N, V)
    level = np.abs(now.mean(1) - past.mean(1)) / sd_past
    spread = np.abs(np.log((now.std(1) + floor) / sd_past))
    per_channel = level + spread  # (N, V)
    return per_channel.max(1) if pool == "max" else per_channel.mean(1)


def fit_level_shift(ctx: FitContext, seed: int) -> Scorer:
    """Training-free: a level-shift / variance-change score of the current window's
    most recent steps against its earlier steps (the recent past). Which recent span
    (10, 20 or 50 steps) and which channel pooling (mean, max) are chosen on
    validation PR AUC; the only fitted number is a per-channel floor (1e-3 of the
    channel's std on the official train windows) that keeps flat channels finite."""
    floor = 1e-3 * ctx.normal.reshape(-1, ctx.normal.shape[2]).std(0) + 1e-8
    best: tuple[float, Scorer] | None = None
    for recent in (10, 20, 50):
        if recent >= ctx.val.x.shape[1]:
            continue
        for pool in ("mean", "max"):
            scorer = partial(_shift_scores, recent=recent, floor=floor, pool=pool)
            val = pr_auc(ctx.val.y, scorer(ctx.val.x))
            if best is None or val > best[0]:
                best = (val, scorer)
    assert best is not None
    return best[1]


def _kmeans_features(x: np.ndarray, scale: Standardizer, patch: int) -> np.ndarray:
    """Windows z-scored per channel, averaged over ``patch`` steps, flattened."""
    n, t, v = x.shape
    z = scale(x.reshape(-1, v)).reshape(n, t, v)
    return (
        z[:, : t // patch * patch]
        .reshape(n, t // patch, patch, v)
        .mean(2)
        .reshape(n, -1)
    )


def fit_kmeans(
    ctx: FitContext, seed: int, k: int = 20, patch: int = 5, max_fit: int = 20_000
) -> Scorer:
    """Distance to the nearest of k = 20 k-means centroids of the official train
    windows (TSB-AD's KMeansAD idea, its default k): windows z-scored per channel on
    train, averaged over 5-step patches; training-free apart from the clustering."""
    from sklearn.cluster import KMeans

    v = ctx.normal.shape[2]
    scale = Standardizer().fit(ctx.normal.reshape(-1, v))
    rng = np.random.default_rng(seed)
    normal = ctx.normal
    if len(normal) > max_fit:
        normal = normal[np.sort(rng.choice(len(normal), max_fit, replace=False))]
    feats = _kmeans_features(normal, scale, patch)
    km = KMeans(n_clusters=min(k, len(feats)), n_init=3, random_state=seed).fit(feats)

    def score(x: np.ndarray) -> np.ndarray:
        d = km.transform(_kmeans_features(x, scale, patch))  # (N, k) distances
        return d.min(1)

    return score


def _predict_lr(
    lr: LogisticRegression, scale: Standardizer, pools: tuple[str, ...], x: np.ndarray
) -> np.ndarray:
    return lr.predict_proba(scale(pooled_stats(x, pools)))[:, 1]


def fit_logistic(ctx: FitContext, seed: int) -> Scorer:
    """Logistic regression on channel-pooled window statistics.

    The pooling (mean; mean/max/min) and the regularisation C are chosen on validation
    PR AUC, so the baseline is as strong as the protocol allows without the test split.
    """
    from sklearn.linear_model import LogisticRegression

    best: tuple[float, Scorer] | None = None
    for pools in (("mean",), ("mean", "max", "min")):
        scale = Standardizer().fit(pooled_stats(ctx.normal, pools))
        for c in (0.01, 0.1, 1.0):
            lr = LogisticRegression(C=c, max_iter=5000, random_state=seed)
            lr.fit(scale(pooled_stats(ctx.train.x, pools)), ctx.train.y)
            scorer = partial(_predict_lr, lr, scale, pools)
            val = pr_auc(ctx.val.y, scorer(ctx.val.x))
            if best is None or val > best[0]:
                best = (val, scorer)
    assert best is not None
    return best[1]


class ProbeScorer:
    """A Scorer that runs a fitted probe on a featurizer's output; keeps the probe
    (its state goes into the results, the chosen one to `scjepa export`)."""

    def __init__(
        self, probe: Probe, featurize: Callable[[np.ndarray], np.ndarray]
    ) -> None:
        self.probe, self.featurize = probe, featurize

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.probe.predict(self.featurize(x))


def fit_feature_probe(
    featurize: Callable[[np.ndarray], np.ndarray], kind: str | None = None
) -> Callable[[FitContext, int], Scorer]:
    """The SC-JEPA probe (MLP, BCE, calibrated on val) on any featurizer's output;
    ``kind`` ("mlp", "trees") overrides the protocol's probe kind."""

    def fit(ctx: FitContext, seed: int) -> Scorer:
        f_tr, f_va = featurize(ctx.train.x), featurize(ctx.val.x)
        cfg = ctx.probe if kind is None else replace(ctx.probe, kind=kind)
        probe = Probe(f_tr.shape[1], cfg, seed).fit(f_tr, ctx.train.y, f_va, ctx.val.y)
        return ProbeScorer(probe, featurize)

    return fit


class WindowStatsFeatures:
    """Featurizer: pooled window statistics, z-scored on the official train windows.

    ``scale`` (its mean and std) goes into a served graph that uses these features
    (model/stats.py computes the same statistics inside the graph).
    """

    def __init__(self, normal: np.ndarray) -> None:
        self.scale = Standardizer().fit(pooled_stats(normal))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.scale(pooled_stats(x))


def window_stats(normal: np.ndarray) -> WindowStatsFeatures:
    return WindowStatsFeatures(normal)


def raw_feature_probe(
    ctx_normal: np.ndarray, kind: str | None = None
) -> Callable[[FitContext, int], Scorer]:
    return fit_feature_probe(window_stats(ctx_normal), kind)


# -- TS2Vec: a peer representation learner, read by the same probe ---------------------


@dataclass
class TS2VecConfig:
    """TS2Vec (Yue et al., AAAI 2022) with its published defaults, via the `ts2vec`
    package (the official code). ``iters`` defaults to the official rule for a training
    set of more than 100,000 values (600; 200 below)."""

    iters: int = 600
    output_dims: int = 320
    hidden_dims: int = 64
    depth: int = 10
    batch_size: int = 16
    lr: float = 1e-3


class TS2VecFeatures:
    """Featurizer: a TS2Vec encoder trained, label-free, on the official train windows.

    Inputs are z-scored per channel with the train windows' statistics (TS2Vec has no
    instance normalisation); a window's feature is TS2Vec's full-series max-pooled
    representation, z-scored on the train windows for the probe. Encodings are cached per
    input array: the probe reads the same train/val/test arrays again.
    """

    def __init__(self, normal: np.ndarray, seed: int, cfg: TS2VecConfig) -> None:
        import torch

        try:
            from ts2vec import TS2Vec
        except ImportError:
            from training.errors import UserError

            raise UserError(
                "the TS2Vec row needs the `ts2vec` package: pip install -e '.[train]'"
            ) from None
        from tqdm.auto import tqdm

        self.inputs = Standardizer().fit(normal.reshape(-1, normal.shape[2]))
        device = "cuda" if torch.cuda.is_available() else "cpu"
        np_state = np.random.get_state()  # TS2Vec crops with NumPy's global RNG
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            np.random.seed(seed)
            bar = tqdm(total=cfg.iters, desc=f"TS2Vec seed {seed}", leave=False)
            self.losses: list[float] = []  # one per iteration

            def step(model: object, loss: float) -> None:
                self.losses.append(loss)
                bar.update(1)

            self.model = TS2Vec(
                input_dims=normal.shape[2],
                output_dims=cfg.output_dims,
                hidden_dims=cfg.hidden_dims,
                depth=cfg.depth,
                device=device,
                lr=cfg.lr,
                batch_size=cfg.batch_size,
                after_iter_callback=step,
            )
            self.model.fit(self.inputs(normal), n_iters=cfg.iters)
            bar.close()
        np.random.set_state(np_state)
        self.scale = Standardizer().fit(self._encode(normal))
        self._features = PerArrayCache(lambda x: self.scale(self._encode(x)))

    def _encode(self, x: np.ndarray) -> np.ndarray:
        z = self.model.encode(
            self.inputs(x), encoding_window="full_series", batch_size=256
        )
        return np.asarray(z, dtype=np.float32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._features(x)


def fit_ts2vec(cfg: TS2VecConfig) -> Callable[[FitContext, int], Scorer]:
    """TS2Vec trained per seed on the official train windows, then the SC-JEPA probe."""

    def fit(ctx: FitContext, seed: int) -> Scorer:
        return fit_feature_probe(TS2VecFeatures(ctx.normal, seed, cfg))(ctx, seed)

    return fit
