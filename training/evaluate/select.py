"""Choosing the served model on the non-test data (issue 20): time-blocked
cross-validation over the probe's train + validation portion, and a rule that prefers
the simpler candidate unless the data can tell the candidates apart.

Why not the validation split alone: at one false alarm per 1,000 windows every
candidate warns 0-2 validation events (MSL, SMD-19, SKAB), so a ranking by that count
is decided by a fraction of one event. Here:

1. *Blocks.* Each fold's train + validation portion is cut into K blocks
   (:func:`cv_blocks`): per entity, K contiguous stretches of equal length for a data
   set split in time (windows and targets never straddle a cut); K groups of whole
   entities for a data set split by entity (its test is on unseen entities).
2. *Out-of-fold scores.* For held-out block j each candidate's probe is fitted with
   the same recipe (MLP, BCE, early stopping and Platt calibration on a validation
   block) on the blocks other than j and j + 1 (mod K), stopped and calibrated on
   block j + 1, and scores block j: every train + validation window gets one
   out-of-fold (calibrated) risk per seed, about 4x the events and positives the
   validation split alone has. No test window is read.
3. *Keys,* pooled over the held-out blocks (and the folds): the warned-event rate at
   the false-alarm budgets :data:`BUDGETS` per 1,000 windows, averaged (the low end of
   the warning curve: more warned events per key than the one budget, so less
   variance, at the cost of weighting budgets an operator might also use), and the
   window PR AUC; means over seeds.
4. *Rule.* The one-standard-error rule (Breiman et al. 1984; Hastie et al., ESL
   7.10) on paired differences: the candidates whose warned key is below the best's
   by no more than the bootstrap standard deviation of that paired difference (blocks
   of events resampled, one seed drawn per resample, as in the test intervals) stay;
   among them the same on PR AUC; of those the one with the fewest probe inputs
   wins (the simplest, a priori the least prone to fit validation noise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.data import WINDOW, Dataset, Samples, entity_samples, split_segments
from training.evaluate.events import (
    Segment,
    segment_counts,
    threshold_at_budget,
)
from training.evaluate.metrics import pr_auc
from training.evaluate.parallel import fork_map
from training.evaluate.power import (
    count_replicates,
    draw_blocks,
    draw_seeds,
    window_replicates,
)
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.warning import (
    FIELDS,
    Stretch,
    count_vector,
    make_blocks,
    pooled,
    stretches,
    window_members,
)
from training.strict_json import json_num

BUDGETS = (1.0, 2.0, 5.0, 10.0)  # false alarms per 1,000 windows, averaged
# the served model's operating points: budgets (false alarms per 1,000 windows) at
# which `scjepa evaluate` sets its thresholds and `scjepa export --fa-budget` serves
OPERATING_BUDGETS = (0.1, 0.3, 1.0, 3.0, 10.0)


@dataclass
class CVConfig:
    blocks: int = 4  # K held-out blocks per fold
    seeds: int = 3  # probe seeds per held-out block (0..seeds-1)
    budgets: tuple[float, ...] = BUDGETS
    n_boot: int = 1000
    jobs: int = 1  # worker processes for the fits (training/evaluate/parallel.py)


@dataclass
class HeldOut:
    """One block of one fold's train + validation portion."""

    fold: int
    block: int
    hop: Samples  # windows at hop = window: what the probes fit on
    dense: Samples  # dense windows: event counts
    stretches: list[Stretch]  # its entities' stretches over ``dense``

    def segments(self, scores: np.ndarray) -> list[Segment]:
        """The block's stretches scored by ``scores`` (one per dense window)."""
        return [st.segment(scores) for st in self.stretches]


@dataclass
class OutOfFold:
    """One candidate's out-of-fold risks: per held-out block, (seeds, windows)."""

    hop: list[np.ndarray]
    dense: list[np.ndarray]
    n_inputs: int
    # per held-out block j: the same fits' risks on the dense windows of block j + 1,
    # the block each was stopped and calibrated on (as the served probe is on
    # validation); empty in files older than 2026-11-28 (tenth session)
    cal: list[np.ndarray] = dataclasses.field(default_factory=list)


def cv_blocks(
    ds: Dataset,
    fold: int,
    k: int,
    stride: int,
    window: int = WINDOW,
    by_entity: bool | None = None,
) -> list[HeldOut]:
    """The K blocks of ``fold``'s train + validation portion (never its test split);
    blocks without a window are left out. A data set split by entity deals whole
    entities to the blocks, round-robin; one split in time cuts each entity's
    [train start, validation end) into K stretches, or with ``by_entity`` deals those
    whole too (held-out blocks of entities never fitted on: a screen's question)."""
    if k < 3:
        raise ValueError(f"{k} blocks: need 3 (fit, stop and calibrate, held out)")
    segs = split_segments(ds, window, fold)
    span: dict[int, tuple[int, int]] = {}
    for s in ("train", "val"):
        for i, lo, hi in segs[s]:
            a, b = span.get(i, (lo, hi))
            span[i] = (min(a, lo), max(b, hi))
    parts: list[list[tuple[int, int, int]]] = [[] for _ in range(k)]
    whole = bool(ds.folds) if by_entity is None else by_entity
    if whole:
        for n, (i, (lo, hi)) in enumerate(sorted(span.items())):
            parts[n % k].append((i, lo, hi))
    else:
        for i, (lo, hi) in sorted(span.items()):
            n = (hi - lo) // window
            cuts = [lo + (n * j // k) * window for j in range(k)] + [hi]
            for j in range(k):
                parts[j].append((i, cuts[j], cuts[j + 1]))
    out = []
    for j, ranges in enumerate(parts):
        hop = [entity_samples(ds, i, window, None, lo, hi) for i, lo, hi in ranges]
        dense = [entity_samples(ds, i, window, stride, lo, hi) for i, lo, hi in ranges]
        keep = [n for n, h in enumerate(hop) if len(h)]
        if not keep:
            continue
        d = Samples.concat([dense[n] for n in keep])
        r = [ranges[n] for n in keep]
        out.append(
            HeldOut(
                fold,
                j,
                Samples.concat([hop[n] for n in keep]),
                d,
                stretches(ds, d, r, fold),
            )
        )
    return out


# fit(fit blocks, stopping block, seed) -> risk(block, "hop" | "dense"): one
# candidate's probe fitted on the first, stopped and calibrated on the second, scoring
# a block's windows
CrossFit = Callable[[list[int], int, int], Callable[[int, str], np.ndarray]]


def cross_fit(
    blocks: Sequence[HeldOut],
    fit: CrossFit,
    seeds: Sequence[int],
    n_inputs: int,
    jobs: int = 1,
) -> OutOfFold:
    """One candidate fitted K times per seed (held out j, stopped and calibrated on
    j + 1 mod K, fitted on the rest), scoring its held-out block (and, for the
    operating points, its stopping block's dense windows); the K x seeds fits in
    ``jobs`` worker processes (training/evaluate/parallel.py)."""
    k = len(blocks)
    if k < 3:
        raise ValueError(f"{k} blocks with windows: need 3")
    fits = [(j, s) for j in range(k) for s in seeds]

    def one(t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        j, seed = fits[t]
        v = (j + 1) % k
        risk = fit([i for i in range(k) if i not in (j, v)], v, seed)
        return risk(j, "hop"), risk(j, "dense"), risk(v, "dense")

    got = fork_map(one, len(fits), jobs)
    per = len(seeds)
    hop, dense, cal = [], [], []
    for j in range(k):
        runs = got[j * per : (j + 1) * per]
        hop.append(np.stack([r[0] for r in runs]))
        dense.append(np.stack([r[1] for r in runs]))
        cal.append(np.stack([r[2] for r in runs]))
    return OutOfFold(hop, dense, n_inputs, cal)


def out_of_fold(
    blocks: Sequence[HeldOut],
    featurize: Callable[[np.ndarray], np.ndarray],
    cfg: ProbeConfig,
    seeds: Sequence[int],
    jobs: int = 1,
) -> OutOfFold:
    """:func:`cross_fit` of a probe reading ``featurize``'s features (each block's
    computed once, here, before the fits)."""
    f = {
        kind: [featurize(getattr(b, kind).x) for b in blocks]
        for kind in ("hop", "dense")
    }

    def fit(idx: list[int], v: int, seed: int) -> Callable[[int, str], np.ndarray]:
        probe = Probe(f["hop"][0].shape[1], cfg, seed).fit(
            np.concatenate([f["hop"][i] for i in idx]),
            np.concatenate([blocks[i].hop.y for i in idx]),
            f["hop"][v],
            blocks[v].hop.y,
        )
        return lambda i, kind: probe.predict(f[kind][i])

    return cross_fit(blocks, fit, seeds, int(f["hop"][0].shape[1]), jobs)


def cv_threshold(
    blocks: Sequence[HeldOut], oof: OutOfFold, lookback: int, budget: float
) -> float:
    """The cross-fitted budget threshold: the lowest one keeping the false alarms of
    the out-of-fold risks of every held-out block, every seed's pooled, within
    ``budget`` per 1,000 windows (inf if none does).

    The served probe is stopped and calibrated on the validation split, so a threshold
    set there is set on the risks it was fitted to: on held-out CV blocks such a
    one-block threshold let through 6.5 (SMD-19) to 126 (Daphnet) false alarms per
    1,000 windows against a budget of 1, and this pooled one 1.7 and 7.7
    (results-notes.md, 2026-11-28, tenth session)."""
    return _pooled_budget(blocks, oof, lookback, budget, lambda risk: risk)


def cv_quantile(
    blocks: Sequence[HeldOut], oof: OutOfFold, lookback: int, budget: float
) -> float:
    """The same budget set on the out-of-fold risks turned into their quantile within
    their block and seed (the share of that block's windows at or below): the lowest
    quantile u keeping the pooled false alarms within ``budget`` per 1,000 windows
    (inf if none does). :func:`quantile_threshold` carries it to a probe as that
    quantile of its own validation risks, so it holds across fits whose calibrated
    risks lie on different scales, where a threshold in risk units does not (MSL's
    fold models: one block's lowest risk above another's highest, results-notes.md,
    2026-11-28, tenth session)."""
    return _pooled_budget(blocks, oof, lookback, budget, ecdf)


def ecdf(risk: np.ndarray) -> np.ndarray:
    """Each risk's share of the risks at or below it."""
    return np.searchsorted(np.sort(risk), risk, side="right") / max(len(risk), 1)


def _segments(
    blocks: Sequence[HeldOut],
    oof: OutOfFold,
    score: Callable[[np.ndarray], np.ndarray],
) -> list[Segment]:
    """Every held-out block's stretches over each seed's out-of-fold ``score``."""
    return [
        g
        for b, dense in zip(blocks, oof.dense, strict=True)
        for risk in dense
        for g in b.segments(score(risk))
    ]


def _pooled_budget(
    blocks: Sequence[HeldOut],
    oof: OutOfFold,
    lookback: int,
    budget: float,
    score: Callable[[np.ndarray], np.ndarray],
) -> float:
    """The lowest threshold on ``score`` of each block's and seed's out-of-fold risks
    keeping their pooled false alarms within ``budget`` (inf if none does)."""
    segs = _segments(blocks, oof, score)
    if not sum(len(s.ends) for s in segs):
        return float("inf")
    return threshold_at_budget(segs, lookback, budget)


def operating_points(
    folds: Sequence[Sequence[HeldOut]],
    oof: Sequence[OutOfFold],
    lookback: int,
    budgets: Sequence[float] = OPERATING_BUDGETS,
) -> list[dict[str, Any]]:
    """One candidate's (``oof``: one per fold, its blocks in ``folds``' order) cross-
    fitted thresholds at each budget, per fold, in risks (:func:`cv_threshold`) and
    in quantiles (:func:`cv_quantile`). What a point costs and buys is the test
    split's to say (warning.add_cv_budget): neither the cross-validation's warning
    curve at these thresholds (set on the same risks) nor the served rule applied
    block by block held out tracked the test figures (results-notes.md, 2026-11-28,
    thirteenth session)."""
    return [
        {
            "false_alarms_per_1000": float(budget),
            "cv_budget_thresholds": [
                json_num(cv_threshold(b, o, lookback, budget))
                for b, o in zip(folds, oof, strict=True)
            ],
            "cv_budget_quantiles": [
                json_num(cv_quantile(b, o, lookback, budget))
                for b, o in zip(folds, oof, strict=True)
            ],
        }
        for budget in budgets
    ]


def quantile_threshold(val_risk: np.ndarray | None, u: float | None) -> float:
    """Quantile ``u`` (:func:`cv_quantile`) of a probe's validation risks: the risk
    at or above which the same share of its validation windows alert (inf where there
    is no u, or no validation risk)."""
    if u is None or not np.isfinite(u) or val_risk is None or not len(val_risk):
        return float("inf")
    return float(np.quantile(val_risk, min(u, 1.0), method="inverted_cdf"))


def cautious(*thresholds: float | None) -> float:
    """The highest finite threshold given (the fewest alerts; inf if none): what
    `scjepa export` serves by default is ``cautious(validation's budget threshold,
    cv_threshold, quantile_threshold)``. Each estimates where the budget lies and each
    fails its own way (validation is small, and the probe was stopped and calibrated
    on it; the out-of-fold risks come from other fits, whose calibrated scale can
    differ; a quantile carried from other blocks assumes alike shares of alerting
    windows), so the budget, a ceiling, takes the most cautious. On held-out CV blocks
    the three held a budget of 1, 3 and 10 false alarms per 1,000 windows closer than
    the first two alone on 3 of 4 data sets, and never let through more than the
    validation threshold (results-notes.md, 2026-11-28, eleventh session)."""
    finite = [float(t) for t in thresholds if t is not None and np.isfinite(t)]
    return max(finite, default=float("inf"))


def served_thresholds(
    points: Sequence[tuple[float, float | None, float | None, float | None]],
) -> dict[float, float]:
    """The served threshold at each operating point, from (budget, validation's
    budget threshold, :func:`cv_threshold`, :func:`quantile_threshold`) per budget:
    the most cautious of the three (:func:`cautious`), raised to any looser budget's
    (a tighter budget never alerts more), and inf where neither out-of-fold estimate
    held the budget: the cross-validation's pooled windows, several times
    validation's, are the largest sample there is, and a budget they cannot hold is
    not certified by validation holding it with none of its few windows in false
    alarm."""
    out: dict[float, float] = {}
    floor = -np.inf
    for budget, val, cv, q in sorted(points, key=lambda p: -p[0]):  # loosest first
        if not any(t is not None and np.isfinite(t) for t in (cv, q)):
            out[budget] = np.inf
            continue
        floor = max(cautious(val, cv, q), floor)
        out[budget] = float(floor)
    return out


def served_at(points: Sequence[Mapping[str, float]]) -> dict[float, float]:
    """:func:`served_thresholds` of one probe's operating points as dicts
    ("false_alarms_per_1000", "budget_threshold", "cv_budget_threshold",
    "cv_quantile_threshold"; :func:`probe_points`, ``SavedProbe.operating_points``)."""
    return served_thresholds(
        [
            (
                p["false_alarms_per_1000"],
                p["budget_threshold"],
                p["cv_budget_threshold"],
                p["cv_quantile_threshold"],
            )
            for p in points
        ]
    )


def probe_points(
    points: Sequence[Mapping[str, Any]],
    fold: int,
    val_thresholds: Mapping[float, float],
    val_risk: np.ndarray | None,
) -> list[dict[str, float]]:
    """One fitted probe's three thresholds at each of its candidate's operating
    points (:func:`operating_points`; the probe's fold ``fold``): its validation
    budget threshold there (``val_thresholds``), the fold's out-of-fold one and the
    fold's quantile carried to its validation risks (inf where none held it)."""

    def num(v: float | None) -> float:
        return float("inf") if v is None else float(v)

    return [
        {
            "false_alarms_per_1000": p["false_alarms_per_1000"],
            "budget_threshold": float(
                val_thresholds.get(p["false_alarms_per_1000"], float("inf"))
            ),
            "cv_budget_threshold": num(p["cv_budget_thresholds"][fold]),
            "cv_quantile_threshold": quantile_threshold(
                val_risk, p["cv_budget_quantiles"][fold]
            ),
        }
        for p in points
    ]


def write_out_of_fold(path: Path, oof: dict[str, list[OutOfFold]]) -> None:
    """``oof`` (candidates in their order, one :class:`OutOfFold` per fold) as one
    .npz: ``candidates``, and per candidate ``NAME//n_inputs`` and
    ``NAME//FOLD_INDEX/BLOCK_INDEX/hop|dense|cal`` (seeds, windows), the blocks in
    the order :func:`cv_blocks` returns them."""
    arrays: dict[str, Any] = {"candidates": np.array(list(oof), dtype=str)}
    for name, per_fold in oof.items():
        arrays[f"{name}//n_inputs"] = np.array(per_fold[0].n_inputs)
        for f, o in enumerate(per_fold):
            for j in range(len(o.hop)):
                arrays[f"{name}//{f}/{j}/hop"] = o.hop[j]
                arrays[f"{name}//{f}/{j}/dense"] = o.dense[j]
                if o.cal:
                    arrays[f"{name}//{f}/{j}/cal"] = o.cal[j]
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def read_out_of_fold(path: Path) -> dict[str, list[OutOfFold]]:
    """What :func:`write_out_of_fold` wrote, for :func:`choose`."""
    with np.load(path) as z:
        names = [str(n) for n in z["candidates"]]
        keys = set(z.files)
        out: dict[str, list[OutOfFold]] = {}
        for name in names:
            per_fold = []
            f = 0
            while f"{name}//{f}/0/hop" in keys:
                n = sum(
                    1
                    for k in keys
                    if k.startswith(f"{name}//{f}/") and k.endswith("/hop")
                )
                get = {
                    kind: [z[f"{name}//{f}/{j}/{kind}"] for j in range(n)]
                    for kind in ("hop", "dense", "cal")
                    if f"{name}//{f}/0/{kind}" in keys
                }
                per_fold.append(
                    OutOfFold(
                        get["hop"],
                        get["dense"],
                        int(z[f"{name}//n_inputs"]),
                        get.get("cal", []),
                    )
                )
                f += 1
            out[name] = per_fold
    return out


def _warned(v: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return v[..., FIELDS.index("warned")] / v[..., FIELDS.index("events")]


def one_se(
    keys: dict[str, float], reps: dict[str, np.ndarray], among: Sequence[str]
) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The candidates of ``among`` whose key is below the best's by no more than the
    bootstrap standard deviation of the paired difference (all of them when no key is
    finite); per candidate its gap to the best and that deviation."""
    finite = [c for c in among if np.isfinite(keys[c])]
    if not finite:
        nan = float("nan")
        return list(among), {c: {"gap": nan, "se": nan} for c in among}
    best = max(finite, key=lambda c: keys[c])
    keep, info = [], {}
    for c in among:
        d = reps[best] - reps[c]
        d = d[np.isfinite(d)]
        se = float(np.std(d)) if len(d) > 1 else 0.0
        gap = keys[best] - keys[c]
        info[c] = {"gap": float(gap), "se": se}
        if c == best or (np.isfinite(gap) and gap <= se):
            keep.append(c)
    return keep, info


@dataclass
class Keys:
    """The rule's keys per candidate, pooled over the held-out blocks: the warned rate
    averaged over the budgets (``warned``; at the first budget: ``warned_one``) and
    the window PR AUC (``pr_auc``), means over seeds, with their bootstrap replicates
    (``*_reps``, shared resamples, so paired differences are meaningful)."""

    warned: dict[str, float]
    warned_reps: dict[str, np.ndarray]
    warned_one: dict[str, float]
    pr_auc: dict[str, float]
    pr_auc_reps: dict[str, np.ndarray]
    n_inputs: dict[str, int]
    cv: dict[str, Any]  # what the keys rest on (results.json's leaderboard "cv")


def cv_keys(
    folds: Sequence[Sequence[HeldOut]],
    oof: dict[str, list[OutOfFold]],
    lookback: int,
    cfg: CVConfig,
) -> Keys:
    """The keys of every candidate (``oof[name]``: one per fold, its blocks in
    ``folds``' order) on the held-out blocks of ``folds``."""
    names = list(oof)
    held = [b for bl in folds for b in bl]
    # relabel each held-out block as a fold of its own: warning.make_blocks cuts its
    # stretches into bootstrap units (one per event with its look-back)
    sts = [
        dataclasses.replace(s, fold=g) for g, b in enumerate(held) for s in b.stretches
    ]
    offsets = np.cumsum([0] + [len(b.dense) for b in held])
    units = make_blocks(pooled(sts, offsets), lookback)
    hop = Samples.concat([b.hop for b in held])
    fold_of = np.repeat(np.arange(len(held)), [len(b.hop) for b in held])
    members = window_members(hop, fold_of, units)
    n_seeds = oof[names[0]][0].hop[0].shape[0]
    n_units = len(members)  # make_blocks' units, then any windows left outside them
    draws = draw_blocks(n_units, cfg.n_boot)
    seed_draw = draw_seeds(n_seeds, cfg.n_boot, len(names))
    k = Keys({}, {}, {}, {}, {}, {n: oof[n][0].n_inputs for n in names}, {})
    n_events = 0
    for c, name in enumerate(names):
        dense = np.concatenate([d for o in oof[name] for d in o.dense], axis=1)
        hops = np.concatenate([h for o in oof[name] for h in o.hop], axis=1)
        rates, reps = [], []
        for budget in cfg.budgets:
            per_unit = np.zeros((n_seeds, n_units, len(FIELDS)))
            for s in range(n_seeds):
                segs = [Segment(u.labels, u.ends, dense[s][u.gidx]) for u in units]
                thr = threshold_at_budget(segs, lookback, budget)
                for u, seg in enumerate(segs):
                    per_unit[s, u] = count_vector(segment_counts(seg, thr, lookback))
            n_events = int(per_unit[0, :, FIELDS.index("events")].sum())
            rates.append(_warned(per_unit.sum(1)))  # (seeds,)
            reps.append(_warned(count_replicates(per_unit, draws, seed_draw[:, c])))
        k.warned_one[name] = float(np.mean(rates[0]))
        k.warned[name] = float(np.mean(rates))
        k.warned_reps[name] = np.mean(reps, axis=0)
        k.pr_auc[name] = float(np.mean([pr_auc(hop.y, h) for h in hops]))
        k.pr_auc_reps[name] = window_replicates(
            hop.y,
            hops,
            [0.5] * n_seeds,
            members,
            draws,
            seed_draw[:, c],
            names=("pr_auc",),
        )["pr_auc"]
    k.cv = {
        "blocks": max((len(bl) for bl in folds), default=0),
        "folds": len(folds),
        "seeds": n_seeds,
        "budgets_per_1000": list(cfg.budgets),
        "events": n_events,
        "windows": int(sum(len(b.dense) for b in held)),
        "positives": int(hop.y.sum()),
        "bootstrap_units": len(units),
        "n_boot": cfg.n_boot,
    }
    return k


def choose(
    folds: Sequence[Sequence[HeldOut]],
    oof: dict[str, list[OutOfFold]],
    lookback: int,
    cfg: CVConfig,
) -> dict[str, Any]:
    """The rule of the module docstring on the out-of-fold risks of every candidate
    (``oof[name]``: one per fold, its blocks in ``folds``' order); candidates in
    ``oof``'s order break ties of the input count. Returns the winner and the per
    candidate figures (results.json's leaderboard)."""
    names = list(oof)
    k = cv_keys(folds, oof, lookback, cfg)
    stage1, gap_w = one_se(k.warned, k.warned_reps, names)
    stage2, gap_p = one_se(k.pr_auc, k.pr_auc_reps, stage1)
    winner = min(stage2, key=lambda n: (k.n_inputs[n], names.index(n)))
    rows = [
        {
            "row": n,
            "n_inputs": k.n_inputs[n],
            "cv_warned_rate": json_num(k.warned[n]),
            "cv_warned_rate_at_budget": json_num(k.warned_one[n]),
            "cv_pr_auc": json_num(k.pr_auc[n]),
            "cv_warned_gap": json_num(gap_w[n]["gap"]),
            "cv_warned_gap_sd": json_num(gap_w[n]["se"]),
            # (PR AUC is compared only among those kept on the warned rate)
            "cv_pr_auc_gap": json_num(gap_p.get(n, {}).get("gap")),
            "cv_pr_auc_gap_sd": json_num(gap_p.get(n, {}).get("se")),
            "cv_stage": 2 if n in stage2 else 1 if n in stage1 else 0,
        }
        for n in names
    ]
    return {"winner": winner, "rows": rows, "cv": k.cv}
