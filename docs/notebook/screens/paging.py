"""Screen, on held-out CV blocks: how should the service page, so that the event
figures count what an operator is paged on? (results-notes.md, 2026-11-27, eighth
session)

    python docs/notebook/screens/paging.py [--dense-budgets | --pages] DATASET RUN_DIR [...]

The figures count every dense window (every ``stride`` steps) at or above the
threshold; the service scored a window every manifest ``hop`` (then 100 steps) and
alerted after SCJEPA_ALERT_WINDOWS (then 3) consecutive windows at or above it. A
paging rule (hop, k) keeps a window every ``hop`` steps of each stretch and lets it
alert when it and the k - 1 kept before it are all at or above the threshold; the
windows it does not keep never alert. Each rule is held to 1-10 false alarms per
1,000 of the windows IT scores (the protocol's budget: the share of its windows, so of
time, in false alert). ``--dense-budgets``: the first table run, which held every rule
to false alarms per 1,000 dense windows (a rule scoring every 10th window could spend
10 times as long in false alert). ``--pages``: a diagnostic counting false pages (runs
of alerting windows) instead, found degenerate (one long run in alert is one page).

RUN_DIR is a `scjepa evaluate` run with cv_scores.npz: its served candidate's
out-of-fold risks are read (no refit, no test window) and scored by the selection
rule's keys (select.cv_keys: warned rate at 1-10 false alarms per 1,000 windows, its
bootstrap replicates; pooled held-out blocks of every fold).
"""

import json
import sys
from pathlib import Path

import numpy as np

from training.data import load_dataset
from training.evaluate.select import (
    CVConfig,
    OutOfFold,
    cv_blocks,
    cv_keys,
    read_out_of_fold,
)

QUIET = -1e9  # the score of a window the rule does not let alert
BUDGETS = (1.0, 2.0, 5.0, 10.0)
DENSE_BUDGETS = False  # True: the first table (every rule per 1,000 dense windows)


def page(risk: np.ndarray, every: int, k: int) -> np.ndarray:
    """One stretch's dense risks (in time order) under the rule: keep every
    ``every``-th window, alert on the minimum of the last k kept."""
    out = np.full(len(risk), QUIET)
    kept = np.arange(0, len(risk), every)
    r = risk[kept]
    if len(r) >= k:
        run = np.lib.stride_tricks.sliding_window_view(r, k).min(1)
        out[kept[k - 1 :]] = run
    return out


def paged(folds: list, oof: list[OutOfFold], every: int, k: int) -> list[OutOfFold]:
    """``oof`` (one per fold of ``folds``) with every held-out stretch's dense risks
    under the rule (every, k) of :func:`page`."""
    out = []
    for blocks, o in zip(folds, oof, strict=True):
        dense = []
        for b, risk in zip(blocks, o.dense, strict=True):
            r = np.full_like(risk, QUIET)
            for st in b.stretches:
                for s in range(risk.shape[0]):
                    r[s, st.idx] = page(risk[s, st.idx], every, k)
            dense.append(r)
        out.append(OutOfFold(o.hop, dense, o.n_inputs))
    return out


def screen(name: str, run: Path) -> None:
    ds = load_dataset(name)
    res = json.loads((run / "results.json").read_text())
    ev = res["config"]["events"]
    stride, lookback = ev["stride"], ev["lookback"]
    served = res["leaderboard"]["winner"]
    oof = read_out_of_fold(run / "cv_scores.npz")[served]
    folds = [cv_blocks(ds, f, 4, stride) for f in range(len(oof))]
    hop100 = round(100 / stride)
    rules = {
        f"({stride}, 1): as the figures count": (1, 1),
        f"({stride}, 2)": (1, 2),
        f"({stride}, 3)": (1, 3),
        f"({stride * hop100}, 1)": (hop100, 1),
        f"({stride * hop100}, 2)": (hop100, 2),
        f"({stride * hop100}, 3): the service's defaults": (hop100, 3),
    }
    cands = {label: paged(folds, oof, every, k) for label, (every, k) in rules.items()}
    # budgets per 1,000 windows the rule scores: a rule scoring every `every`-th
    # dense window is held to 1/every of each budget per 1,000 dense windows (the same
    # share of its windows in false alert). cv_keys draws the same bootstrap resamples
    # for the same candidates, so the two calls' replicates pair.
    per_dense = cv_keys(folds, cands, lookback, CVConfig(n_boot=1000))
    scaled = cv_keys(
        folds,
        cands,
        lookback,
        CVConfig(n_boot=1000, budgets=tuple(b / hop100 for b in BUDGETS)),
    )
    dense_rule = {label: rules[label][0] == 1 for label in cands}
    keys = per_dense if DENSE_BUDGETS else scaled
    for label in cands:
        if not DENSE_BUDGETS and dense_rule[label]:
            keys.warned[label] = per_dense.warned[label]
            keys.warned_one[label] = per_dense.warned_one[label]
            keys.warned_reps[label] = per_dense.warned_reps[label]
    ref = next(iter(cands))
    unit = "dense" if DENSE_BUDGETS else "scored"
    print(
        f"\n## {name}: served {served!r}; {keys.cv['events']} events, "
        f"{keys.cv['windows']} dense windows, look-back {lookback}; budgets per "
        f"1,000 {unit} windows\n"
        "| rule (hop, k) | warned at 1-10 (SD) | against the first (SD) | warned at 1 |"
    )
    for label in cands:
        d = keys.warned_reps[label] - keys.warned_reps[ref]
        print(
            f"| {label} | {keys.warned[label]:.3f} "
            f"({np.std(keys.warned_reps[label]):.3f}) | "
            f"{keys.warned[label] - keys.warned[ref]:+.3f} ({np.std(d):.3f}) | "
            f"{keys.warned_one[label]:.3f} |",
            flush=True,
        )


def pages(name: str, run: Path, budgets=(1.0, 2.0, 5.0, 10.0)) -> None:
    """Diagnostic, added after the decision's table was read: the same rules held to
    false PAGES per 10,000 steps (a page: the first window of a run of consecutive
    alerting windows, counted false as segment_counts counts a false alarm), the
    operator's cost, instead of false alerting windows. Warned rate at the best
    threshold within each budget (pooled held-out blocks, mean over seeds and
    budgets; no bootstrap)."""
    from training.evaluate.events import events as runs_of

    ds = load_dataset(name)
    res = json.loads((run / "results.json").read_text())
    ev = res["config"]["events"]
    stride, lookback = ev["stride"], ev["lookback"]
    oof = read_out_of_fold(run / "cv_scores.npz")[res["leaderboard"]["winner"]]
    folds = [cv_blocks(ds, f, 4, stride) for f in range(len(oof))]
    hop100 = round(100 / stride)
    print(f"\n{name}, pages: | rule | warned rate at 1-10 false pages / 10,000 steps |")
    for every, k in ((1, 1), (1, 3), (hop100, 1), (hop100, 3)):
        rates = []
        n_seeds = oof[0].dense[0].shape[0]
        for s in range(n_seeds):
            st_scores = []  # (labels, ends, paged scores of the kept windows)
            for blocks, o in zip(folds, oof, strict=True):
                for b, risk in zip(blocks, o.dense, strict=True):
                    for st in b.stretches:
                        kept = np.arange(0, len(st.idx), every)
                        sc = page(risk[s, st.idx], every, k)[kept]
                        st_scores.append((st.labels.astype(bool), st.ends[kept], sc))
            steps = sum(len(lab) for lab, _, _ in st_scores)
            allsc = np.concatenate([sc for _, _, sc in st_scores])
            grid = np.unique(
                np.quantile(allsc[allsc > QUIET], np.linspace(0.5, 1, 400))
            )
            onsets = []
            for lab, _, _ in st_scores:
                r = runs_of(lab)
                onsets.append(r[r[:, 0] > 0, 0])
            n_ev = sum(len(o) for o in onsets)
            curve = []
            for thr in grid:
                warned = false = 0
                for (lab, ends, sc), on in zip(st_scores, onsets, strict=True):
                    a = sc >= thr
                    if not a.any():
                        continue
                    ae = ends[a]
                    lo = np.searchsorted(ae, on - lookback, "left")
                    hi = np.searchsorted(ae, on, "right")
                    warned += int((hi > lo).sum())
                    first = a & ~np.r_[False, a[:-1]]
                    fe = ends[first]
                    nxt = np.searchsorted(on, fe, "left")
                    pad = np.r_[on, 10**12]
                    false += int(np.sum((pad[nxt] - fe > lookback) & ~lab[fe - 1]))
                curve.append((false * 1e4 / steps, warned / n_ev))
            curve_a = np.array(curve)
            rates.append(
                np.mean(
                    [curve_a[curve_a[:, 0] <= b, 1].max(initial=0) for b in budgets]
                )
            )
        print(f"| ({stride * every}, {k}) | {np.mean(rates):.3f} |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[0] == "--dense-budgets":
        DENSE_BUDGETS, args = True, args[1:]
    if args[0] == "--pages":
        for name, run in zip(args[1::2], args[2::2], strict=True):
            pages(name, Path(run))
        sys.exit()
    for name, run in zip(args[::2], args[1::2], strict=True):
        screen(name, Path(run))
