"""`scjepa skab-protocol`: SKAB's own outlier-detection protocol, for its leaderboard.

    scjepa skab-protocol --root DATA --checkpoint runs/pooled/best.pt --out docs/results/skab-own

waico/SKAB's notebooks fit a detector on each run's first 400 rows alone
(``train_test_split(train_size=400, shuffle=False)``), flag rows 400 onward, and pool
the points of the 34 runs into F1 / FAR / MAR (``chp_score(metric="binary")``,
training.evaluate.external.skab_binary). ``scjepa evaluate`` measures something else
(the next window's risk, from models fitted on other runs); this command measures
what SKAB's leaderboard does, with the same honesty rules: nothing is chosen on the
runs it is scored on.

Detectors, each fitted per run on its reference (the first ``--train-rows`` rows,
every channel z-scored on them), a score for the window ending at each row:

- always-positive: the floor (F1 = 2p / (1 + p) at anomaly share p);
- T²+Q: Hotelling's T² and the Q (squared prediction error) of a PCA of the reference
  rows (85 % of the variance), each a rolling mean over ``smooth`` rows (SKAB's
  "T-squared+Q" row); a row is flagged when either exceeds its limit;
- kNN, raw windows: mean distance of the last ``w`` rows to the 5 nearest reference
  windows; kNN, window statistics: the same over per-channel mean, std, last value,
  slope;
- with ``--checkpoint``: SC-JEPA's code probabilities of the window (the model's
  length; kNN as above), the codes beside the window statistics (each block scaled to
  count alike), the model's surprise and its reconstruction error; each also from the
  untrained model of the same shape, its floor.

A row is flagged when the score exceeds UCL = quantile_q(reference scores) x factor,
and with ``persist`` > 1 only once that many rows in a row exceed it (SKAB's Conv-AE
row uses q = 0.999, factor 4/3 and a persistence of its window). The grid (detector
window or smoothing; q in 0.95, 0.99, 1; factor 1, 4/3, 2; persist 1, 5) is chosen per
fold on the other folds' runs by their pooled F1 (training.data.skab's 5 folds) and
applied to the fold's own runs; "best baseline" and "best of all" also choose the
detector that way, the best baseline among the detectors without SC-JEPA and SC-JEPA's
untrained twins (evaluation.md item 7). Intervals: bootstrap over runs.

Early warning (evaluation.md items 9-10, what an operator buys): the same per-run
detectors as risk scores of dense windows (one every 10 rows after the reference,
each score divided by the run's largest reference score, so one threshold fits every
run), with events, look-back (100 rows), false alarms and the rotation null of
training.evaluate.events. Per fold, the detector setting with the best warned rate
averaged over 1, 2, 5 and 10 false alarms per 1,000 windows on the other folds' runs,
and the threshold keeping those runs within 1 false alarm per 1,000 windows; the
fold's own runs are then counted. An event that began inside the reference (other/2)
is censored.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from training import strict_json
from training.data import load_dataset
from training.data.types import Entity
from training.errors import UserError
from training.evaluate.events import (
    Segment,
    event_counts,
    shifted_warned,
    threshold_at_budget,
)
from training.evaluate.external import SKAB_PUBLISHED, skab_binary
from training.evaluate.results import git_commit

KIND = "skab-protocol"  # results.json's mark, for `scjepa report`
TRAIN_ROWS = 400  # SKAB's notebooks: train_test_split(train_size=400, shuffle=False)
K = 5
STRIDE, LOOKBACK = 10, 100  # evaluate's dense windows and look-back on SKAB
BUDGETS = (1.0, 2.0, 5.0, 10.0)  # false alarms per 1,000 windows (select.py's key)
BUDGET = 1.0  # the threshold's
N_SHIFTS = 1000
GRID = list(itertools.product((0.95, 0.99, 1.0), (1.0, 4 / 3, 2.0), (1, 5)))
BASELINES = ("T²+Q (PCA)", "kNN, raw windows", "kNN, window statistics")
UNTRAINED = ", untrained model"  # the SC-JEPA rows' untrained twins end so
# kNN, window statistics reads windows of up to 100 rows: two of them in the reference
MIN_TRAIN_ROWS = 101

# (reference scores (n_ref, c), all rows' scores (n_rows, c)) of one run, NaN where
# no window ends yet; a row is flagged when any column exceeds its limit
Scores = tuple[np.ndarray, np.ndarray]


def is_baseline(name: str) -> bool:
    """A row the best baseline is chosen among: the detectors without SC-JEPA and
    SC-JEPA's untrained twins (evaluation.md item 7: a pre-training method must beat
    its untrained encoder), as training.evaluate.warning.best_baselines chooses."""
    return name in BASELINES or name.endswith(UNTRAINED)


def _windows(z: np.ndarray, w: int) -> np.ndarray:
    """(T, V) -> (T - w + 1, w, V): the window ending at each row from row w - 1."""
    return sliding_window_view(z, (w, z.shape[1]))[:, 0]


def _knn(f: np.ndarray, m: int, k: int = K) -> np.ndarray:
    """Mean Euclidean distance of each row of ``f`` to its k nearest among the first
    ``m`` rows (the reference windows); a reference window leaves itself out."""
    ref = f[:m]
    d2 = (f * f).sum(1)[:, None] - 2 * f @ ref.T + (ref * ref).sum(1)[None]
    d2[np.arange(m), np.arange(m)] = np.inf
    k = min(k, m - 1)
    d = np.sqrt(np.clip(np.partition(d2, k - 1, axis=1)[:, :k], 0, None))
    return d.mean(1)


def _stats(W: np.ndarray) -> np.ndarray:
    """Per channel mean, std, last value and slope of each window, (n, 4 V)."""
    t = np.arange(W.shape[1]) - (W.shape[1] - 1) / 2
    slope = (W * t[None, :, None]).sum(1) / (t**2).sum()
    return np.concatenate([W.mean(1), W.std(1), W[:, -1], slope], 1)


def _placed(s: np.ndarray, w: int, n_rows: int, n_ref: int) -> Scores:
    """Window scores (one per window ending at row w - 1 ...) as per-row columns."""
    full = np.full(n_rows, np.nan)
    full[w - 1 :] = s
    return full[w - 1 : n_ref, None], full[:, None]


def t2q(z: np.ndarray, n_ref: int, smooth: int) -> Scores:
    ref = z[:n_ref]
    mean = ref.mean(0)
    _, s, vt = np.linalg.svd(ref - mean, full_matrices=False)
    var = s**2 / (n_ref - 1)
    k = int(np.searchsorted(np.cumsum(var) / var.sum(), 0.85)) + 1
    c = z - mean
    t = c @ vt[:k].T
    stat = np.stack(
        [(t**2 / np.maximum(var[:k], 1e-12)).sum(1), ((c - t @ vt[:k]) ** 2).sum(1)], 1
    )
    kernel = np.ones(smooth) / smooth  # rolling mean, min_periods 1 (SKAB's T2)
    sm = np.stack([np.convolve(col, kernel)[: len(col)] for col in stat.T], 1)
    sm[: smooth - 1] = np.cumsum(stat, 0)[: smooth - 1] / np.arange(1, smooth)[:, None]
    return sm[:n_ref], sm


def knn_raw(z: np.ndarray, n_ref: int, w: int) -> Scores:
    f = _windows(z, w).reshape(len(z) - w + 1, -1)
    return _placed(_knn(f, n_ref - w + 1), w, len(z), n_ref)


def knn_stats(z: np.ndarray, n_ref: int, w: int) -> Scores:
    f = _stats(_windows(z, w))
    return _placed(_knn(f, n_ref - w + 1), w, len(z), n_ref)


@dataclass
class Run:
    name: str
    z: np.ndarray  # (T, V) z-scored on the reference rows
    labels: np.ndarray  # (T,)
    fold: int


def flags(scores: Scores, q: float, factor: float, persist: int) -> np.ndarray:
    """0/1 per row: a score above quantile_q(reference) x factor, ``persist`` rows in a
    row (NaN, before the first window, never flags)."""
    ref, rows = scores
    ucl = np.nanquantile(ref, q, axis=0) * factor
    with np.errstate(invalid="ignore"):
        over = (rows > ucl[None]).any(1)
    if persist > 1:
        c = np.r_[0, np.cumsum(over)]
        run = np.zeros_like(over)
        run[persist - 1 :] = (c[persist:] - c[:-persist]) == persist
        over = run
    return np.asarray(over, dtype=np.int8)


Candidates = dict[tuple[Any, ...], list[np.ndarray]]  # setting -> per-run test flags


def candidates(name: str, scores: dict[Any, list[Scores]], n_ref: int) -> Candidates:
    """Every setting of a detector (its parameter x GRID) with its test rows' flags,
    from the per-run scores of each parameter."""
    out: Candidates = {}
    for p, per_run in scores.items():
        for q, factor, persist in GRID:
            out[(name, p, q, round(factor, 3), persist)] = [
                flags(s, q, factor, persist)[n_ref:] for s in per_run
            ]
    return out


def nested(
    cands: Candidates, runs: list[Run], n_ref: int
) -> tuple[list[np.ndarray], list[tuple[Any, ...]]]:
    """Per fold: the setting with the best pooled F1 on the other folds' runs, applied
    to the fold's runs (ties: the first in the grid's order)."""
    labels = [r.labels[n_ref:] for r in runs]
    out: list[np.ndarray] = [np.empty(0)] * len(runs)
    chosen = []
    for k in sorted({r.fold for r in runs}):
        fit = [i for i, r in enumerate(runs) if r.fold != k]
        best = max(
            cands,
            key=lambda c: skab_binary(
                [labels[i] for i in fit], [cands[c][i] for i in fit]
            )["f1"],
        )
        chosen.append(best)
        for i, r in enumerate(runs):
            if r.fold == k:
                out[i] = cands[best][i]
    return out, chosen


def bootstrap(
    labels: list[np.ndarray],
    rows: dict[str, list[np.ndarray]],
    ref: str,
    n_boot: int,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """F1 95 % interval per row and its paired difference with ``ref``, resampling runs."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    draws = {name: [] for name in rows}  # type: dict[str, list[float]]
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        ys = [labels[i] for i in idx]
        for name, preds in rows.items():
            draws[name].append(skab_binary(ys, [preds[i] for i in idx])["f1"])
    out = {}
    for name, d in draws.items():
        a, b = np.asarray(d), np.asarray(draws[ref])
        out[name] = {
            "f1_ci": [float(np.percentile(a, 2.5)), float(np.percentile(a, 97.5))],
            "delta_ci": [
                float(np.percentile(a - b, 2.5)),
                float(np.percentile(a - b, 97.5)),
            ],
        }
    return out


def segment(run: Run, scores: Scores, n_ref: int) -> Segment:
    """A run's dense windows after its reference as an event segment: a window every
    STRIDE rows, its score the largest over the detector's columns of score / the
    column's largest reference score (a run-free scale)."""
    ref, rows = scores
    top = np.nanmax(ref, axis=0)
    scale = np.where(np.isfinite(top) & (top > 0), top, 1.0)
    ends = np.arange(n_ref + STRIDE, len(run.z) + 1, STRIDE)  # one past the last row
    s = np.nanmax(rows[ends - 1] / scale[None], axis=1)
    return Segment(run.labels[n_ref:], ends - n_ref, np.nan_to_num(s, nan=-np.inf))


def _warn_key(segs: list[Segment]) -> float:
    """Warned rate averaged over BUDGETS, thresholds set on ``segs`` themselves."""
    rates = []
    for b in BUDGETS:
        t = threshold_at_budget(segs, LOOKBACK, b)
        rates.append(event_counts(segs, t, LOOKBACK).warned_rate)
    return float(np.nanmean(rates))


def early_warning(
    cands: dict[tuple[Any, ...], list[Segment]], runs: list[Run], seed: int = 0
) -> dict[str, Any]:
    """Per fold: the candidate with the best :func:`_warn_key` on the other folds'
    runs and its threshold at BUDGET there, counted on the fold's runs; pooled."""
    warned = events_n = late = missed = fa = windows = 0
    leads: list[int] = []
    null = np.zeros(N_SHIFTS, dtype=np.int64)
    chosen = []
    for k in sorted({r.fold for r in runs}):
        fit = [i for i, r in enumerate(runs) if r.fold != k]
        test = [i for i, r in enumerate(runs) if r.fold == k]
        best = max(cands, key=lambda c: _warn_key([cands[c][i] for i in fit]))
        t = threshold_at_budget([cands[best][i] for i in fit], LOOKBACK, BUDGET)
        segs = [cands[best][i] for i in test]
        c = event_counts(segs, t, LOOKBACK)
        warned, events_n, late, missed = (
            warned + c.warned,
            events_n + c.events,
            late + c.late,
            missed + c.missed,
        )
        fa, windows = fa + c.false_alarms, windows + c.windows
        leads += c.leads
        null += shifted_warned(segs, t, LOOKBACK, N_SHIFTS, seed * 101 + k)
        chosen.append([_plain(v) for v in best] + [t])
    return {
        "warned": warned,
        "events": events_n,
        "late": late,
        "missed": missed,
        "false_alarms_per_1000_windows": 1000 * fa / windows if windows else None,
        "lead_median": float(np.median(leads)) if leads else None,
        "chance_warned": float(null.mean()),
        "chance_p": float((null >= warned).mean()),
        "chosen": chosen,
    }


def scjepa_scorers(
    checkpoint: str, mask: np.ndarray, n_ref: int, untrained: bool
) -> dict[str, tuple[Callable[[Run, Any], Scores], list[Any]]]:
    """The SC-JEPA detectors of one checkpoint (or its untrained twin)."""
    import torch

    from model import SCJEPA
    from training.pretrain.checkpoint import load_model

    model = load_model(checkpoint)
    if untrained:
        torch.manual_seed(0)
        model = SCJEPA(model.cfg)
    model.eval()
    w = model.cfg.seq_len
    if n_ref <= w:
        raise UserError(
            f"--train-rows {n_ref}: the checkpoint's window is {w} rows; the reference "
            "needs more"
        )
    cache: dict[str, tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]] = {}

    @torch.no_grad()
    def encode(r: Run) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        if r.name not in cache:
            W = np.ascontiguousarray(_windows(r.z[:, mask], w), dtype=np.float32)
            feats, own = [], {"surprise": [], "recon": []}  # type: ignore[var-annotated]
            for i in range(0, len(W), 256):
                xb = torch.from_numpy(W[i : i + 256])
                p = model.probe_inputs(xb)  # (B, V, P, K)
                feats.append(p.flatten(1).numpy())
                for key, v in model.window_scores(xb, p).items():
                    own[key].append(v.numpy())
            scores = {key: np.concatenate(v) for key, v in own.items()}
            cache[r.name] = (np.concatenate(feats), scores, _stats(W))
        return cache[r.name]

    m = n_ref - w + 1

    def codes(r: Run, _: Any) -> Scores:
        f = encode(r)[0]
        return _placed(_knn(f, m), w, len(r.z), n_ref)

    def codes_stats(r: Run, _: Any) -> Scores:
        f, _, s = encode(r)
        both = np.concatenate([f / np.sqrt(f.shape[1]), s / np.sqrt(s.shape[1])], 1)
        return _placed(_knn(both, m), w, len(r.z), n_ref)

    def own(key: str) -> Callable[[Run, Any], Scores]:
        return lambda r, _: _placed(encode(r)[1][key], w, len(r.z), n_ref)

    tag = UNTRAINED if untrained else ""
    return {
        f"SC-JEPA codes (kNN){tag}": (codes, [w]),
        f"SC-JEPA codes + window statistics (kNN){tag}": (codes_stats, [w]),
        f"SC-JEPA surprise{tag}": (own("surprise"), [w]),
        f"SC-JEPA reconstruction error{tag}": (own("recon"), [w]),
    }


def evaluate(
    root: Path | None,
    checkpoint: str | None,
    n_ref: int = TRAIN_ROWS,
    n_boot: int = 1000,
) -> dict[str, Any]:
    ds = load_dataset("skab", root)
    fold_of = {i: k for k, f in enumerate(ds.folds) for i in f["test"]}
    runs = []
    for i, e in enumerate(ds.entities):
        if e.labels is None:
            continue
        x = _checked(e, n_ref).astype(np.float64)
        mean, std = x[:n_ref].mean(0), x[:n_ref].std(0)
        z = (x - mean) / np.where(std > 1e-9, std, 1.0)
        runs.append(Run(e.name, z, e.labels.astype(np.int8), fold_of[i]))
    labels = [r.labels[n_ref:] for r in runs]
    detectors: dict[str, tuple[Callable[[Run, Any], Scores], list[Any]]] = {
        "T²+Q (PCA)": (lambda r, s: t2q(r.z, n_ref, s), [1, 5, 10]),
        "kNN, raw windows": (lambda r, w: knn_raw(r.z, n_ref, w), [10, 30, 60]),
        "kNN, window statistics": (
            lambda r, w: knn_stats(r.z, n_ref, w),
            [10, 30, 60, 100],
        ),
    }
    if checkpoint:
        for untrained in (False, True):
            detectors |= scjepa_scorers(checkpoint, ds.mask, n_ref, untrained)
    rows: dict[str, list[np.ndarray]] = {
        "always-positive": [np.ones_like(y) for y in labels]
    }
    chosen: dict[str, list[Any]] = {}
    every: Candidates = {}
    warn_cands: dict[str, dict[tuple[Any, ...], list[Segment]]] = {}
    for name, (scorer, params) in detectors.items():
        scores = {p: [scorer(r, p) for r in runs] for p in params}  # once per setting
        cands = candidates(name, scores, n_ref)
        every |= cands
        rows[name], chosen[name] = nested(cands, runs, n_ref)
        warn_cands[name] = {
            (name, p): [
                segment(r, sc, n_ref) for r, sc in zip(runs, per_run, strict=True)
            ]
            for p, per_run in scores.items()
        }
    warning = {name: early_warning(c, runs) for name, c in warn_cands.items()}
    warning["best baseline (chosen per fold)"] = early_warning(
        {k: v for n in warn_cands if is_baseline(n) for k, v in warn_cands[n].items()},
        runs,
    )
    base = {c: v for c, v in every.items() if is_baseline(c[0])}
    (
        rows["best baseline (chosen per fold)"],
        chosen["best baseline (chosen per fold)"],
    ) = nested(base, runs, n_ref)
    if checkpoint:
        (
            rows["best of all (chosen per fold)"],
            chosen["best of all (chosen per fold)"],
        ) = nested(every, runs, n_ref)
    ci = bootstrap(labels, rows, "best baseline (chosen per fold)", n_boot)
    table = {}
    for name, preds in rows.items():
        m = skab_binary(labels, preds)
        table[name] = {
            **m,
            **ci[name],
            "chosen": [list(map(_plain, c)) for c in chosen.get(name, [])],
        }
    positive = float(np.concatenate(labels).mean())
    return {
        "kind": KIND,
        "protocol": f"SKAB's: first {n_ref} rows of each run its train part, rows "
        f"{n_ref}+ scored point-wise, F1 / FAR / MAR pooled over runs",
        "runs": len(runs),
        "points": int(sum(len(y) for y in labels)),
        "anomaly_share": positive,
        "checkpoint": checkpoint,
        "n_boot": n_boot,
        "published": SKAB_PUBLISHED["outlier"],
        "best_baseline_among": [n for n in detectors if is_baseline(n)],
        "rows": table,
        "early_warning": {
            "stride": STRIDE,
            "lookback": LOOKBACK,
            "budget_per_1000": BUDGET,
            "rows": warning,
        },
    }


def _writable_folder(out: Path) -> None:
    """Make ``--out`` (and its parents) and check it can take the results; one line
    naming the option when not."""
    import os

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {out}: cannot make it ({e.strerror or e})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: not writable")


def _among(res: dict[str, Any]) -> str:
    """The rows the best baseline was chosen among; files written before the
    untrained twins were candidates (2026-12-01) chose among the baselines alone."""
    return "; ".join(res.get("best_baseline_among", BASELINES))  # names hold commas


def _plain(v: Any) -> Any:
    return float(v) if isinstance(v, (float, np.floating)) else v


def _checked(e: Entity, n_ref: int) -> np.ndarray:
    """A labelled run's rows, refused when the reference would leave none to score."""
    assert e.test is not None
    if len(e.test) <= n_ref:
        raise UserError(
            f"SKAB run {e.name}: {len(e.test)} rows, not more than --train-rows {n_ref}"
        )
    return e.test


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"SKAB's own protocol ({res['protocol']}): {res['runs']} runs, "
        f"{res['points']:,} scored points, {res['anomaly_share']:.1%} anomalous. "
        f"Each row's settings (and for the last rows its detector) are chosen per fold "
        f"on the other folds' runs; 95 % intervals: bootstrap over runs "
        f"({res['n_boot']}); Δ = paired difference with the best baseline, chosen "
        f"among: {_among(res)}. "
        f"Published (SKAB README, its test rows): {res['published']}."
        + (f" SC-JEPA rows: `{res['checkpoint']}`." if res.get("checkpoint") else ""),
        "",
        "| detector | F1 | F1 95 % CI | Δ F1 vs best baseline | FAR, % | MAR, % |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in res["rows"].items():
        lo, hi = r["delta_ci"]
        delta = (
            "-"
            if name == "best baseline (chosen per fold)"
            else f"[{lo:+.3f}, {hi:+.3f}]" + (" *" if lo > 0 or hi < 0 else "")
        )
        lines.append(
            f"| {name} | {r['f1']:.3f} | [{r['f1_ci'][0]:.3f}, {r['f1_ci'][1]:.3f}] "
            f"| {delta} | {r['far']:.1f} | {r['mar']:.1f} |"
        )
    ew = res.get("early_warning")
    if ew:
        lines += [
            "",
            f"Early warning with the same per-run detectors: a window every "
            f"{ew['stride']} rows after the reference, look-back {ew['lookback']} rows; "
            f"per fold the setting with the best warned rate (averaged over 1-10 false "
            f"alarms per 1,000 windows) and the threshold within {ew['budget_per_1000']:g} "
            f"per 1,000 on the other folds' runs; counts pooled over the folds' own "
            f"runs; chance = the same alerts rotated in time ({N_SHIFTS} rotations).",
            "",
            "| detector | warned / events | chance (p) | lead median | late | missed "
            "| false alarms / 1,000 windows |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in ew["rows"].items():
            lead = "-" if r["lead_median"] is None else f"{r['lead_median']:.0f}"
            fa = r["false_alarms_per_1000_windows"]
            lines.append(
                f"| {name} | {r['warned']} / {r['events']} | {r['chance_warned']:.1f} "
                f"({r['chance_p']:.3f}) | {lead} | {r['late']} | {r['missed']} "
                f"| {fa:.2f} |"
            )
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, help="data folder (default $SCJEPA_DATA)")
    p.add_argument(
        "--checkpoint",
        help="SC-JEPA checkpoint for its rows (pre-trained without SKAB's test runs, "
        "e.g. on other data sets); without it, the baselines only",
    )
    p.add_argument(
        "--train-rows",
        type=int,
        default=TRAIN_ROWS,
        help="each run's reference: its first rows (SKAB's notebooks: 400; at least "
        f"{MIN_TRAIN_ROWS}, the longest detector window + 1, and more than the "
        "checkpoint's window)",
    )
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--out", type=Path, required=True, help="results folder")


def run(args: argparse.Namespace) -> int:
    if args.train_rows < MIN_TRAIN_ROWS:
        raise UserError(
            f"--train-rows {args.train_rows}: at least {MIN_TRAIN_ROWS} (the longest "
            f"detector window, {MIN_TRAIN_ROWS - 1} rows, and one more)"
        )
    if args.n_boot < 1:
        raise UserError(f"--n-boot {args.n_boot}: at least 1")
    _writable_folder(args.out)  # before the evaluation, not after it
    t0 = time.time()
    res = evaluate(args.root, args.checkpoint, args.train_rows, args.n_boot)
    # evaluation.md item 8: a results file records its data set and code version too
    res["dataset"] = "skab"
    res["git_commit"] = git_commit()
    res["wall_s"] = round(time.time() - t0, 1)
    res["command"] = "scjepa skab-protocol " + " ".join(
        f"--{k.replace('_', '-')} {v}"
        for k, v in vars(args).items()
        if k in ("root", "checkpoint", "train_rows", "n_boot", "out") and v is not None
    )
    text = markdown(res)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(strict_json.dumps(res, indent=1) + "\n")
        (args.out / "table.md").write_text(text)
    except OSError as e:
        raise UserError(f"--out {args.out}: cannot write ({e.strerror or e})") from None
    print(text, end="")
    return 0
