"""The block bootstrap of training/evaluate/power.py: its coverage on synthetic scores
with a known AUC (where resampling windows as if independent fails), and the
resampling arithmetic against brute force."""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from training.evaluate.metrics import metrics
from training.evaluate.power import (
    count_replicates,
    draw_blocks,
    draw_seeds,
    interval,
    window_replicates,
)

A, SD_BLOCK, SD_WINDOW = 1.0, 1.0, 1.0
# positives and negatives never share a block, so the population AUC is exactly
# P(A + u - u' + e - e' > 0) with u ~ N(0, SD_BLOCK), e ~ N(0, SD_WINDOW)
TRUE_AUC = float(norm.cdf(A / np.sqrt(2 * (SD_BLOCK**2 + SD_WINDOW**2))))


def blocky_scores(rng: np.random.Generator, n_blocks: int, m: int):
    """Blocks of m windows, like events: a block is all positive (an event) or all
    negative, and shares one random level u, so its windows are not independent."""
    event = rng.random(n_blocks) < 0.3
    event[:3], event[3:6] = True, False
    y = np.repeat(event, m).astype(np.int8)
    s = A * y + np.repeat(rng.normal(0, SD_BLOCK, n_blocks), m)
    s = s + rng.normal(0, SD_WINDOW, n_blocks * m)
    members = [np.arange(b * m, (b + 1) * m) for b in range(n_blocks)]
    return y, s, members


def covers(rng, n_blocks, m, n_boot, per_window: bool) -> bool:
    y, s, members = blocky_scores(rng, n_blocks, m)
    if per_window:
        members = [np.array([i]) for i in range(len(y))]
    draws = draw_blocks(len(members), n_boot, int(rng.integers(2**31)))
    seed_draw = np.zeros(n_boot, dtype=np.int64)
    reps = window_replicates(y, s[None], [0.0], members, draws, seed_draw, ["roc_auc"])
    lo, hi = interval(reps["roc_auc"])
    return lo <= TRUE_AUC <= hi


def test_block_bootstrap_covers_a_known_auc() -> None:
    """95 % intervals over 120 synthetic test splits of 60 blocks: the block bootstrap
    holds the true AUC about 95 % of the time; resampling windows as if independent
    (what the i.i.d. ``ci95`` does) holds it far less often."""
    rng = np.random.default_rng(0)
    n = 120
    block = np.mean([covers(rng, 60, 10, 100, False) for _ in range(n)])
    iid = np.mean([covers(rng, 60, 10, 100, True) for _ in range(n)])
    assert 0.85 <= block <= 1.0, block
    assert iid < 0.8 and iid < block - 0.15, (iid, block)


def test_window_replicates_match_a_direct_resample(rng) -> None:
    y, s, members = blocky_scores(rng, 12, 5)
    scores = np.stack([s, s + rng.normal(0, 0.5, len(s))])  # two seeds
    thr = [0.3, np.full(len(s), 0.6)]  # a float, and one threshold per window (folds)
    draws = draw_blocks(len(members), 7, 3)
    seed_draw = draw_seeds(2, 7, 1)[:, 0]
    reps = window_replicates(y, scores, thr, members, draws, seed_draw)
    for r in range(7):
        idx = np.concatenate([members[b] for b in draws[r]])
        k = seed_draw[r]
        t = thr[k][idx] if np.ndim(thr[k]) else thr[k]
        want = metrics(y[idx], scores[k][idx], t)
        for name, v in want.items():
            assert reps[name][r] == v or (np.isnan(v) and np.isnan(reps[name][r]))


def test_count_replicates_sum_the_drawn_blocks(rng) -> None:
    counts = rng.integers(0, 9, size=(3, 5, 4)).astype(float)  # (seeds, blocks, fields)
    draws = draw_blocks(5, 6, 1)
    seed_draw = draw_seeds(3, 6, 1)[:, 0]
    got = count_replicates(counts, draws, seed_draw)
    for r in range(6):
        want = sum(counts[seed_draw[r], b] for b in draws[r])
        np.testing.assert_array_equal(got[r], want)


def test_interval_ignores_undefined_resamples() -> None:
    lo, hi = interval(np.r_[np.linspace(0, 1, 101), np.nan, np.nan])
    assert (lo, hi) == (0.025, 0.975)
    assert all(np.isnan(interval(np.array([np.nan]))))
