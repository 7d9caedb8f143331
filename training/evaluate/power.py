"""Power (docs/evaluation.md, item 11): intervals that respect how the test data hang
together, and paired comparisons that say whether a gap between two rows is real.

- *Block bootstrap.* The test split is cut into blocks: per scored stretch of an entity,
  one block per event with its look-back and the normal time after it, and the normal
  time before its first event (:func:`training.evaluate.events.split_segment`). A
  resample draws as many blocks as there are, with replacement, and recomputes every
  metric on the union of the drawn blocks' windows (window metrics) or sums their event
  counts (event metrics: counts are exact sums over blocks). Windows of one event never
  pretend to be independent samples.
- *Seed variance.* Each resample also draws one seed per row, so the interval holds the
  spread of a single training run, not only the data's.
- *Paired differences.* Two rows are compared on the same drawn blocks (each with its
  own seed draw): the interval of ``metric(row) - metric(baseline)`` says whether the
  gap survives the data's and the seeds' variance.
- *Too few positives.* A metric resting on fewer than :data:`MIN_POSITIVES` positives
  (windows or events) is reported as "n too small", never as a number with a std.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from training.evaluate.metrics import METRICS, metrics, roc_auc

MIN_POSITIVES = 10
ALPHA = 0.05


def draw_blocks(n_blocks: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """(n_boot, n_blocks) block indices, drawn with replacement; shared by all rows."""
    return np.random.default_rng(seed).integers(0, n_blocks, (n_boot, n_blocks))


def draw_seeds(n_seeds: int, n_boot: int, n_rows: int, seed: int = 1) -> np.ndarray:
    """(n_boot, n_rows): which seed of each row a resample reads."""
    return np.random.default_rng(seed).integers(0, n_seeds, (n_boot, n_rows))


def interval(samples: np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates (NaN replicates left out)."""
    v = np.asarray(samples, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return (float("nan"), float("nan"))
    lo, hi = np.percentile(v, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return (float(lo), float(hi))


def window_replicates(
    y: np.ndarray,
    scores: np.ndarray,
    thresholds: Sequence[float | np.ndarray],
    members: Sequence[np.ndarray],
    draws: np.ndarray,
    seed_draw: np.ndarray,
    names: Sequence[str] = METRICS,
) -> dict[str, np.ndarray]:
    """Window metrics on each resample: the drawn blocks' windows (``members[b]``,
    indices into ``y``), scored by the drawn seed (``scores[seed]`` (seeds, N) with its
    threshold: a float, or one per window when folds chose their own)."""
    out = {m: np.empty(len(draws)) for m in names}
    for r, (blocks, k) in enumerate(zip(draws, seed_draw, strict=True)):
        idx = np.concatenate([members[b] for b in blocks])
        yy, ss = y[idx], scores[k][idx]
        if list(names) == ["roc_auc"]:
            out["roc_auc"][r] = roc_auc(yy, ss)
            continue
        thr = thresholds[k]
        m = metrics(yy, ss, thr[idx] if np.ndim(thr) else thr)
        for name in names:
            out[name][r] = m[name]
    return out


def count_replicates(
    block_counts: np.ndarray, draws: np.ndarray, seed_draw: np.ndarray
) -> np.ndarray:
    """Summed counts on each resample: ``block_counts`` (seeds, blocks, F) -> (n_boot, F)."""
    n_boot, n_blocks = draws.shape
    weights = np.zeros((n_boot, n_blocks))
    for r in range(n_boot):
        weights[r] = np.bincount(draws[r], minlength=n_blocks)
    return np.einsum("rb,rbf->rf", weights, block_counts[seed_draw])
