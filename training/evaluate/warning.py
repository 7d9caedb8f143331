"""Early warning per row (evaluation.md items 9-11): the dense stretches a split
scores, event counts at each row's two thresholds, block-bootstrap intervals, the
chance level, the paired comparison with the best baseline, and the metrics other
benchmarks publish (SKAB, Daphnet).

A *stretch* is one entity's part of a split, scored by the dense windows: its labels
start at the last step of its first window (an anomaly already running there could
not have been predicted: it is censored, training.evaluate.events) and run to the end
of the split's range; every window ends inside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from training.data import WINDOW, Dataset, Samples
from training.evaluate import external
from training.evaluate.events import (
    EventCounts,
    Segment,
    event_counts,
    quartiles,
    segment_counts,
    shifted_warned,
    split_segment,
    summary,
    warning_curve,
)
from training.evaluate.power import (
    MIN_POSITIVES,
    count_replicates,
    draw_blocks,
    draw_seeds,
    interval,
    window_replicates,
)
from training.evaluate.results import CV_KIND

if TYPE_CHECKING:
    from training.evaluate.protocol import Fitted
    from training.evaluate.results import Row

# (dense stride, look-back) in steps: one window of look-back (the horizon the model
# is trained for: the next 100 steps), scored every 5 steps; Daphnet (64 Hz): every 8
# steps (0.125 s), a look-back of 128 steps (2 s). The stride is also the served hop
# (`scjepa export`); half the earlier 10 (16) warned more incidents out of fold at the
# same share of windows in false alert (notebook, entry of 2026-11-27, eighth session).
EVENT_DEFAULT = (5, WINDOW)
EVENT_DEFAULTS: dict[str, tuple[int, int]] = {"daphnet": (8, 128)}  # the exceptions
KINDS = ("val_threshold", "budget")
FIELDS = (
    "events",
    "censored",
    "warned",
    "late",
    "missed",
    "false_alarms",
    "false_pages",
    "windows",
    "steps",
)
FLOORS = ("always-positive", "random")  # floors, not baselines to beat
# rotations of the chance null: the smallest p they can give, 1 / 2001, is below the
# Bonferroni threshold 0.05 / rows of a run with up to 100 rows
N_SHIFTS = 2000


@dataclass
class EventConfig:
    stride: int  # steps between dense windows
    lookback: int  # steps before an onset in which an alert warns it
    budget: float = 1.0  # false alarms per 1,000 windows, on validation
    steps_per_day: float | None = None


def event_config(
    ds: Dataset,
    stride: int | None = None,
    lookback: int | None = None,
    budget: float = 1.0,
) -> EventConfig:
    d_stride, d_look = EVENT_DEFAULTS.get(ds.name, EVENT_DEFAULT)
    return EventConfig(stride or d_stride, lookback or d_look, budget, ds.steps_per_day)


@dataclass
class Stretch:
    fold: int
    entity: int
    start: int  # step of labels[0] in the entity's test series
    labels: np.ndarray
    ends: np.ndarray  # window ends relative to ``start``, increasing
    idx: np.ndarray  # the windows' indices in the split's dense samples

    def segment(self, scores: np.ndarray) -> Segment:
        """The stretch scored by ``scores`` (one per dense sample of the split)."""
        return Segment(self.labels, self.ends, np.asarray(scores)[self.idx])


def stretches(
    ds: Dataset, dense: Samples, ranges: list[tuple[int, int, int]], fold: int
) -> list[Stretch]:
    out = []
    for i, _lo, hi in ranges:
        idx = np.flatnonzero(dense.entity == i)
        if not len(idx):
            continue
        idx = idx[np.argsort(dense.end[idx], kind="stable")]
        s0 = int(dense.end[idx[0]]) - 1
        labels = ds.entities[i].labels
        assert labels is not None
        out.append(
            Stretch(fold, i, s0, np.asarray(labels[s0:hi]), dense.end[idx] - s0, idx)
        )
    return out


@dataclass
class Block:
    fold: int
    entity: int
    start: int
    labels: np.ndarray
    ends: np.ndarray
    gidx: np.ndarray  # indices into the pooled dense test scores


def pooled(test_stretches: Sequence[Stretch], offsets: np.ndarray) -> list[Stretch]:
    """The folds' stretches indexing the pooled dense scores (fold k's windows start
    at ``offsets[k]``), not their own fold's."""
    return [
        dataclasses.replace(st, idx=offsets[st.fold] + st.idx) for st in test_stretches
    ]


def make_blocks(test_stretches: Sequence[Stretch], lookback: int) -> list[Block]:
    """The bootstrap blocks of :func:`pooled` stretches."""
    blocks = []
    for st in test_stretches:
        dummy = Segment(st.labels, st.ends, np.zeros(len(st.ends)))
        for lo, seg, sub in split_segment(dummy, lookback):
            blocks.append(
                Block(
                    st.fold,
                    st.entity,
                    st.start + lo,
                    np.asarray(seg.labels),
                    np.asarray(seg.ends),
                    st.idx[sub],
                )
            )
    return blocks


def window_members(
    test: Samples, fold_of: np.ndarray, blocks: list[Block]
) -> list[np.ndarray]:
    """Per block, the test windows (hop = window) whose last step it holds; a window
    of an entity without a block gets a block of its own (no event counts)."""
    members: dict[int, list[int]] = {b: [] for b in range(len(blocks))}
    by_key: dict[tuple[int, int], list[int]] = {}
    for b, blk in enumerate(blocks):
        by_key.setdefault((blk.fold, blk.entity), []).append(b)
    extra: dict[tuple[int, int], list[int]] = {}
    for n in range(len(test)):
        key = (int(fold_of[n]), int(test.entity[n]))
        ids = by_key.get(key)
        if not ids:
            extra.setdefault(key, []).append(n)
            continue
        starts = np.array([blocks[b].start for b in ids])
        j = max(int(np.searchsorted(starts, test.end[n], side="left")) - 1, 0)
        members[ids[j]].append(n)
    out = [np.asarray(members[b], dtype=np.int64) for b in range(len(blocks))]
    out += [np.asarray(v, dtype=np.int64) for v in extra.values()]
    return out


def count_vector(c: EventCounts) -> list[float]:
    """``c``'s counts in the order of :data:`FIELDS`."""
    return [float(getattr(c, f)) for f in FIELDS]


def _rates(v: np.ndarray, steps_per_day: float | None) -> dict[str, np.ndarray]:
    """Rates from summed count vectors (..., F)."""
    f = {name: v[..., k] for k, name in enumerate(FIELDS)}
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {
            "warned_rate": f["warned"] / f["events"],
            "false_alarms_per_1000_windows": 1000 * f["false_alarms"] / f["windows"],
            "false_pages_per_1000_windows": 1000 * f["false_pages"] / f["windows"],
        }
        if steps_per_day:
            out["false_alarms_per_day"] = f["false_alarms"] * steps_per_day / f["steps"]
            out["false_pages_per_day"] = f["false_pages"] * steps_per_day / f["steps"]
    return out


def _stat(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    if not np.isfinite(v).any():
        return {"mean": float("nan"), "std": float("nan")}
    return {"mean": float(np.nanmean(v)), "std": float(np.nanstd(v))}


def val_counts(
    val: Sequence[Stretch], scores: np.ndarray, thr: float, lookback: int
) -> EventCounts:
    """Event counts of one fold's validation stretches at ``thr``."""
    return event_counts([s.segment(scores) for s in val], thr, lookback)


def score_events(
    *,
    ds: Dataset,
    rows: dict[str, Row],
    fitted: dict[str, list[Fitted]],
    seeds: list[int],
    test: Samples,
    scores: dict[str, np.ndarray],
    dense_scores: dict[str, np.ndarray],
    test_stretches: list[Stretch],
    val_dense: list[Samples],
    events: EventConfig,
    n_boot: int,
    test_sizes: list[int],
) -> dict[str, Any]:
    """Adds each row's event metrics, block intervals and paired differences (in
    place); returns results.json's top-level event keys. ``test_stretches`` index the
    pooled scores (:func:`pooled`)."""
    L = events.lookback
    names = list(rows)
    n_folds = len(test_sizes)
    blocks, fold_of, members, draws, seed_draw = _test_resamples(
        test, test_stretches, test_sizes, L, n_boot, len(seeds), len(names)
    )
    n_blocks = len(members)  # make_blocks' blocks, then any windows outside them
    win_reps: dict[str, dict[str, np.ndarray]] = {}
    ev_reps: dict[str, dict[str, np.ndarray]] = {}
    for r, name in enumerate(names):
        runs = fitted[name]
        row = rows[name]
        # -- thresholds per seed and fold
        thr = {kind: np.zeros((len(seeds), n_folds)) for kind in KINDS}
        for f in runs:
            si = seeds.index(f.seed)
            thr["val_threshold"][si, f.fold] = f.threshold
            thr["budget"][si, f.fold] = f.budget_threshold
        # -- validation: warned rate at the budget (chooses rows on validation)
        per_seed_val = np.zeros((len(seeds), len(FIELDS)))
        for f in runs:
            per_seed_val[seeds.index(f.seed)] += count_vector(
                f.val_counts or EventCounts()
            )
        vr = _rates(per_seed_val, events.steps_per_day)
        row["val_events"] = {
            "warned_rate": _stat(vr["warned_rate"]),
            "false_alarms_per_1000_windows": _stat(vr["false_alarms_per_1000_windows"]),
            "events": int(per_seed_val[0, 0]),
        }
        # -- test: counts per block, per seed and threshold kind
        out: dict[str, Any] = {}
        ev_reps[name] = {}
        for kind in KINDS:
            out[kind], rep_rates = _kind_events(
                dense_scores[name],
                thr[kind],
                blocks,
                n_blocks,
                draws,
                seed_draw[:, r],
                test_stretches,
                events,
            )
            ev_reps[name][kind] = rep_rates["warned_rate"]
            ev_reps[name][kind + "_fa"] = rep_rates["false_alarms_per_1000_windows"]
        row["events"] = out
        # -- the warned-rate / false-alarm curve of the seed-mean score
        mean_score = dense_scores[name].mean(0)
        curve = warning_curve([st.segment(mean_score) for st in test_stretches], L)
        row["curve"] = {
            k: [round(float(x), 5) for x in curve[k]]
            for k in ("warned_rate", "false_alarms_per_1000_windows")
        }
        # -- window metrics: block-bootstrap interval with seed variance
        thr_w = _window_thresholds(row, runs, seeds, test, fold_of, n_folds)
        win_reps[name] = window_replicates(
            test.y, scores[name], thr_w, members, draws, seed_draw[:, r]
        )
        row["block_ci95"] = {m: interval(v) for m, v in win_reps[name].items()}
        ext = _external(ds, test_stretches, dense_scores[name], thr, events, len(seeds))
        if ext:
            row["external"] = ext
    best = best_baselines(rows)
    for name in names:
        paired: dict[str, Any] = {}
        base = best["window"]
        if base and name != base:
            paired["window"] = {"vs": base} | {
                m: {
                    "diff": rows[name]["all"][m]["mean"] - rows[base]["all"][m]["mean"],
                    "ci95": interval(win_reps[name][m] - win_reps[base][m]),
                }
                for m in ("f1", "roc_auc", "pr_auc")
            }
        base = best["events"]
        if base and name != base:
            ev_n, ev_b = rows[name]["events"]["budget"], rows[base]["events"]["budget"]
            paired["events"] = {
                "vs": base,
                "warned_rate": {
                    "diff": ev_n["warned_rate"]["mean"] - ev_b["warned_rate"]["mean"],
                    "ci95": interval(ev_reps[name]["budget"] - ev_reps[base]["budget"]),
                },
                "false_alarms_per_1000_windows": {
                    "diff": ev_n["false_alarms_per_1000_windows"]["mean"]
                    - ev_b["false_alarms_per_1000_windows"]["mean"],
                    "ci95": interval(
                        ev_reps[name]["budget_fa"] - ev_reps[base]["budget_fa"]
                    ),
                },
            }
        rows[name]["paired"] = paired  # empty when there is no baseline row
    n_ev = sum(int(np.any(blk.labels)) for blk in blocks)  # blocks holding an event
    first = rows[names[0]]["events"]["budget"] if names else {}
    val_events = rows[names[0]]["val_events"]["events"] if names else 0
    return {
        "folds": n_folds,
        "events": {
            "stride": events.stride,
            "lookback": L,
            "budget_per_1000": events.budget,
            "steps_per_day": events.steps_per_day,
            "test": {
                "events": first.get("events", 0),
                "censored_events": first.get("censored_events", 0),
                "windows": int(sum(len(st.ends) for st in test_stretches)),
                "steps": int(sum(len(st.labels) for st in test_stretches)),
                "blocks": n_blocks,
                "blocks_with_events": n_ev,
            },
            "val": {
                "events": val_events,
                "windows": int(sum(len(v) for v in val_dense)),
            },
        },
        "bootstrap": {
            "n_boot": n_boot,
            "blocks": n_blocks,
            "scheme": "block bootstrap: blocks = per entity stretch, one per event with "
            "its look-back and the normal time after it (and the time before the "
            "first); one seed drawn per resample and row",
            "min_positives": MIN_POSITIVES,
        },
        "best_baseline": best
        | {
            "chosen_on": "validation: PR AUC (window metrics); warned rate at the "
            "false-alarm budget, then fewer false alarms (event metrics)"
        },
    }


def _window_thresholds(
    row: Row,
    runs: list[Fitted],
    seeds: list[int],
    test: Samples,
    fold_of: np.ndarray,
    n_folds: int,
) -> list[Any]:
    if n_folds == 1:
        by_seed = {f.seed: f.threshold for f in runs}
        return [by_seed[s] for s in seeds]
    table = {(f.seed, f.fold): f.threshold for f in runs}
    return [np.array([table[(s, int(k))] for k in fold_of]) for s in seeds]


def add_cv_budget(
    rows: dict[str, Row],
    points: dict[str, list[dict[str, Any]]],
    *,
    fitted: dict[str, list[Fitted]],
    seeds: list[int],
    test: Samples,
    dense_scores: dict[str, np.ndarray],
    test_stretches: list[Stretch],
    events: EventConfig,
    n_boot: int,
    test_sizes: list[int],
) -> None:
    """Adds, for each row of ``points`` (the served-model candidates' operating
    points: per budget and fold, training.evaluate.select.operating_points), its test
    event figures at the threshold `scjepa export` serves at each budget, per seed and
    fold select.served_thresholds of the probe's validation budget thresholds, the
    out-of-fold ones and the quantiles carried to its validation risks, with the
    blocks, resamples and chance null of :func:`score_events`:
    ``rows[name]["events"]["operating_points"]``, one dict per budget
    ("false_alarms_per_1000" the budget), and the run's own budget's as
    ``["events"][CV_KIND]``. Every candidate has them, so a probe file exported in
    the served model's place lists what each of its points measured too."""
    # (select imports this module)
    from training.evaluate.select import probe_points, served_at

    names = list(rows)
    blocks, _, members, draws, seed_draw = _test_resamples(
        test,
        test_stretches,
        test_sizes,
        events.lookback,
        n_boot,
        len(seeds),
        len(names),
    )
    for name, pts in points.items():
        if name not in rows:
            continue
        budgets = [p["false_alarms_per_1000"] for p in pts]
        thr = np.full((len(budgets), len(seeds), len(test_sizes)), np.inf)
        for f in fitted[name]:
            at = served_at(probe_points(pts, f.fold, f.budget_thresholds, f.val_risk))
            for i, b in enumerate(budgets):
                thr[i, seeds.index(f.seed), f.fold] = at[b]
        at_each = [
            {"false_alarms_per_1000": b}
            | _kind_events(
                dense_scores[name],
                thr[i],
                blocks,
                len(members),
                draws,
                seed_draw[:, names.index(name)],
                test_stretches,
                events,
            )[0]
            for i, b in enumerate(budgets)
        ]
        rows[name]["events"]["operating_points"] = at_each
        own = at_each[budgets.index(events.budget)]
        rows[name]["events"][CV_KIND] = {
            k: v for k, v in own.items() if k != "false_alarms_per_1000"
        }


def _kind_events(
    scores: np.ndarray,
    thr: np.ndarray,
    blocks: Sequence[Any],
    n_blocks: int,
    draws: np.ndarray,
    seed_col: np.ndarray,
    test_stretches: Sequence[Stretch],
    events: EventConfig,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One row's test event figures at one kind of threshold (``thr`` (seeds, folds);
    ``scores`` (seeds, dense windows) pooled), and the bootstrap replicates of its
    rates."""
    L, n_seeds, n_folds = events.lookback, len(scores), thr.shape[1]
    per_block = np.zeros((n_seeds, n_blocks, len(FIELDS)))
    totals: list[EventCounts] = []
    for si in range(n_seeds):
        s = scores[si]
        total = EventCounts()
        for b, blk in enumerate(blocks):
            c = segment_counts(
                Segment(blk.labels, blk.ends, s[blk.gidx]), thr[si, blk.fold], L
            )
            per_block[si, b] = count_vector(c)
            total.add(c)
        totals.append(total)
    summaries = [summary(t, events.steps_per_day) for t in totals]
    seed_rates = _rates(per_block.sum(1), events.steps_per_day)
    reps = count_replicates(per_block, draws, seed_col)
    rep_rates = _rates(reps, events.steps_per_day)
    null = rotation_null(test_stretches, scores, thr, L)
    observed = float(np.mean([t.warned for t in totals]))
    n_events = totals[0].events
    out = {
        "thresholds": thr.tolist() if n_folds > 1 else thr[:, 0].tolist(),
        "events": n_events,
        "censored_events": totals[0].censored,
        "windows": totals[0].windows,
        "warned": _stat([t.warned for t in totals]),
        "late": _stat([t.late for t in totals]),
        "missed": _stat([t.missed for t in totals]),
        "false_alarms": _stat([t.false_alarms for t in totals]),
        "lead_quartiles": quartiles([v for t in totals for v in t.leads]),
        "delay_quartiles": quartiles([v for t in totals for v in t.delays]),
        **{k: _stat(v) for k, v in seed_rates.items()},
        "ci95": {k: interval(v) for k, v in rep_rates.items()},
        "chance": {
            "warned_rate": float(null.mean() / n_events) if n_events else float("nan"),
            "p": float((1 + np.sum(null >= observed)) / (1 + len(null))),
            "rotations": len(null),
        },
        "per_seed": summaries,
    }
    return out, rep_rates


def _test_resamples(
    test: Samples,
    test_stretches: Sequence[Stretch],
    test_sizes: list[int],
    lookback: int,
    n_boot: int,
    n_seeds: int,
    n_rows: int,
) -> tuple[list[Any], np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """The test split's bootstrap blocks and resamples, the same for every row and
    threshold kind: (blocks, each test window's fold, the windows of each block,
    block draws (n_boot, blocks), seed draws (n_boot, rows))."""
    blocks = make_blocks(test_stretches, lookback)
    fold_of = np.repeat(np.arange(len(test_sizes)), test_sizes)
    members = window_members(test, fold_of, blocks)
    draws = draw_blocks(len(members), n_boot)
    return blocks, fold_of, members, draws, draw_seeds(n_seeds, n_boot, n_rows)


def rotation_null(
    test_stretches: Sequence[Stretch],
    scores: np.ndarray,
    thresholds: np.ndarray,
    lookback: int,
    n_shifts: int = N_SHIFTS,
) -> np.ndarray:
    """(n_shifts,): the seeds' mean warned count when their alerts are rotated in time
    (``scores`` (seeds, windows) pooled, ``thresholds`` (seeds, folds)). Each fold's
    offsets come from its own seed and every probe seed is rotated alike, so this is
    the null of the seeds' mean (rotating seeds independently would shrink its spread
    and the p with it)."""
    by_fold: dict[int, list[Stretch]] = {}
    for st in test_stretches:
        by_fold.setdefault(st.fold, []).append(st)
    total = np.zeros(n_shifts)
    for s, thr in zip(scores, thresholds, strict=True):
        for k, sts in sorted(by_fold.items()):
            segs = [st.segment(s) for st in sts]
            total += shifted_warned(segs, float(thr[k]), lookback, n_shifts, k)
    return total / len(scores)


def best_baselines(rows: dict[str, Any]) -> dict[str, str | None]:
    """The best baseline row, chosen on validation: highest validation PR AUC (window
    metrics; none where no row has one); highest validation warned rate at the
    budget, then fewest validation false alarms (event metrics). The candidates are
    evaluation.md item 7's rows to beat: the label-free detectors, the probes on
    window features, and SC-JEPA's untrained twins (the same probe or score from a
    randomly initialised model). Not candidates: the floors, the trained SC-JEPA
    rows, and the rows measuring what SC-JEPA adds (suffix "(no SC-JEPA)": refits of
    served-model candidates)."""
    cands = [
        n
        for n in rows
        if n not in FLOORS
        and (not n.startswith("SC-JEPA") or "untrained" in n)
        and not n.endswith("(no SC-JEPA)")
    ]
    # (a validation split without a positive window has no PR AUC: no best baseline,
    # not the first row listed)
    ranked = [n for n in cands if np.isfinite(rows[n]["val"]["pr_auc"]["mean"])]
    window = max(ranked, key=lambda n: rows[n]["val"]["pr_auc"]["mean"], default=None)

    def ev_key(n: str) -> tuple[float, float]:
        v = rows[n].get("val_events", {})
        w = v.get("warned_rate", {}).get("mean", float("nan"))
        fa = v.get("false_alarms_per_1000_windows", {}).get("mean", float("nan"))
        return (w if np.isfinite(w) else -1.0, -fa if np.isfinite(fa) else -1e9)

    events = max(cands, key=ev_key, default=None)
    return {"window": window, "events": events}


def _external(
    ds: Dataset,
    test_stretches: Sequence[Stretch],
    dense: np.ndarray,
    thr: dict[str, np.ndarray],
    events: EventConfig,
    n_seeds: int,
) -> dict[str, Any] | None:
    """SKAB's leaderboard metrics / Daphnet's pre-freeze figures, per threshold kind."""
    if ds.name not in ("skab", "daphnet"):
        return None
    out: dict[str, Any] = {}
    for kind in KINDS:
        per_seed = []
        for si in range(n_seeds):
            labels, ends, alerts, preds, cps, times = [], [], [], [], [], []
            for st in test_stretches:
                e = ds.entities[st.entity]
                assert e.labels is not None
                a = dense[si][st.idx] >= thr[kind][si, st.fold]
                abs_ends = st.ends + st.start
                labels.append(e.labels)
                ends.append(abs_ends)
                alerts.append(a)
                if ds.name == "skab":
                    preds.append(external.point_predictions(len(e.labels), abs_ends, a))
                    cps.append(e.aux["changepoint"])
                    times.append(e.aux["time_s"])
            if ds.name == "skab":
                m = external.skab_binary(labels, preds)
                nab = external.skab_nab(cps, preds, times)
                m |= {f"nab_{k.lower()}": v for k, v in nab.items()}
            else:
                m = external.prefreeze(labels, ends, alerts, WINDOW, events.lookback)
            per_seed.append(m)
        out[kind] = {k: _stat([m[k] for m in per_seed]) for k in per_seed[0]}
    return out
