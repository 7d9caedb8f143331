"""Which selection rule picks the candidate that does best on data it did not see?
Nested over the served model's cross-validation blocks; no test window is read.

    python docs/notebook/screens/rules.py DATASET RESULTS_DIR [DATASET RESULTS_DIR ...]

RESULTS_DIR is a `scjepa evaluate` run with cv_scores.npz (every candidate's
out-of-fold risks per block). For each block index j, every rule chooses on the
other blocks' out-of-fold risks (in every fold) and the chosen candidate is scored on
block j (pooled over the folds): the warned rate at 1-10 false alarms per 1,000
windows (the threshold set on block j's own risks, as the rule's key sets it) and the
window PR AUC. The out-of-fold risks of the other blocks came from probes that were
fitted with block j among their training blocks, so block j's labels touch the choice
a little; the risks scored on block j never saw it.

With --ensembles, two more candidates built from the same out-of-fold risks (no refit):
the mean of the candidates' risks and the mean of the trees' (seed by seed), and a
third candidate set, every candidate and these two (results-notes.md, 2026-11-27, seventh
session).

Rules: the served one (warned rate, then PR AUC, each within one bootstrap SD of the
best, then the fewest inputs), two other last steps for it (the most warned of the
kept; the fine-tuned trees where kept: results-notes.md, 2026-12-03), the same with
the two keys swapped, PR AUC alone (within one SD, then the fewest inputs), and the
best on either key alone. Run on every candidate of the run (MLP and trees) and on
the MLP ones (--no-tree-probes). --leave-out NAME (repeatable) drops a candidate of
the run, as if it had not been offered.
"""

import json
import sys
from pathlib import Path

import numpy as np

from training.data import load_dataset
from training.evaluate.protocol import TUNED_ROW
from training.evaluate.select import (
    CVConfig,
    Keys,
    OutOfFold,
    cv_blocks,
    cv_keys,
    one_se,
    read_out_of_fold,
)
from training.evaluate.warning import EventConfig

MEAN_ALL, MEAN_TREES = "mean of every candidate", "mean of the trees"
ENSEMBLES = False  # --ensembles
LEFT_OUT: list[str] = []  # --leave-out NAME


def mean_of(oof: dict[str, list[OutOfFold]], names: list[str]) -> list[OutOfFold]:
    """An ensemble candidate: the mean of ``names``' calibrated out-of-fold risks (seed
    by seed), counted as reading every input its members read."""
    return [
        OutOfFold(
            [np.mean([oof[n][f].hop[j] for n in names], 0) for j in range(len(o.hop))],
            [
                np.mean([oof[n][f].dense[j] for n in names], 0)
                for j in range(len(o.hop))
            ],
            max(oof[n][f].n_inputs for n in names),
        )
        for f, o in enumerate(oof[names[0]])
    ]


def fewest(names: list[str], keys: Keys, order: list[str]) -> str:
    return min(names, key=lambda n: (keys.n_inputs[n], order.index(n)))


def rules(keys: Keys, names: list[str]) -> dict[str, str]:
    w, w_r, p, p_r = keys.warned, keys.warned_reps, keys.pr_auc, keys.pr_auc_reps
    s1, _ = one_se(w, w_r, names)
    s2, _ = one_se(p, p_r, s1)
    t1, _ = one_se(p, p_r, names)
    t2, _ = one_se(w, w_r, t1)
    return {
        "served: warned, then PR AUC, fewest inputs": fewest(s2, keys, names),
        "warned, then PR AUC, the most warned": max(s2, key=lambda n: (w[n], p[n])),
        "warned, then PR AUC, the fine-tuned trees": (
            TUNED_ROW if TUNED_ROW in s2 else fewest(s2, keys, names)
        ),
        "PR AUC, then warned, fewest inputs": fewest(t2, keys, names),
        "PR AUC, fewest inputs": fewest(t1, keys, names),
        "best warned": max(names, key=lambda n: (w[n], p[n])),
        "best PR AUC": max(names, key=lambda n: p[n]),
    }


def subset(oof: dict[str, list[OutOfFold]], names: list[str], js: list[int]):
    return {
        n: [
            OutOfFold([o.hop[j] for j in js], [o.dense[j] for j in js], o.n_inputs)
            for o in oof[n]
        ]
        for n in names
    }


def nested(name: str, results: Path, extra: dict[str, list[OutOfFold]] | None = None):
    """``extra``: more candidates' out-of-fold risks (every fold), offered beside the
    run's as one more candidate set."""
    ds = load_dataset(name)
    # the run's own event settings (Daphnet: a window every 16 steps, look-back 128)
    ev = EventConfig(
        **json.loads((results / "results.json").read_text())["config"]["events"]
    )
    lookback, stride = ev.lookback, ev.stride
    oof = read_out_of_fold(results / "cv_scores.npz")
    if missing := [n for n in LEFT_OUT if n not in oof]:
        sys.exit(f"{results / 'cv_scores.npz'}: no candidate {missing} to leave out")
    for n in LEFT_OUT:
        del oof[n]
    n_folds = len(next(iter(oof.values())))
    offered = list(oof)
    oof.update(extra or {})
    if ENSEMBLES:
        oof[MEAN_ALL] = mean_of(oof, offered)
        oof[MEAN_TREES] = mean_of(oof, [n for n in offered if n.endswith("(trees)")])
    blocks = [cv_blocks(ds, f, 4, stride) for f in range(n_folds)]
    k = len(blocks[0])
    assert all(len(b) == k for b in blocks), [len(b) for b in blocks]
    every = list(oof)
    sets = {
        "every candidate": offered,
        "the MLPs": [n for n in offered if not n.endswith("(trees)")],
    }
    if extra:
        sets[f"every candidate + {len(extra)}"] = offered + list(extra)
    if ENSEMBLES:
        sets["every candidate and the two means"] = every
    out = {}
    for j in range(k):
        rest = [i for i in range(k) if i != j]
        sel = cv_keys(
            [[b[i] for i in rest] for b in blocks],
            subset(oof, every, rest),
            lookback,
            CVConfig(),
        )
        held = cv_keys(
            [[b[j]] for b in blocks], subset(oof, every, [j]), lookback,
            CVConfig(n_boot=10),
        )  # fmt: skip
        for label, names in sets.items():
            for rule, chosen in rules(sel, names).items():
                out.setdefault(label, {}).setdefault(rule, []).append(
                    (chosen, held.warned[chosen], held.pr_auc[chosen])
                )
            for n in names:  # each candidate always, and the best in hindsight
                out[label].setdefault(f"always: {n}", []).append(
                    (n, held.warned[n], held.pr_auc[n])
                )
            top = max(names, key=lambda n: held.pr_auc[n])
            out[label].setdefault("hindsight: best PR AUC on block j", []).append(
                (top, held.warned[top], held.pr_auc[top])
            )
        print(f"{name} block {j}: {held.cv['events']} events, "
              f"{held.cv['positives']} positive windows", flush=True)  # fmt: skip
    return out


def main(argv: list[str], extra_for=None) -> None:
    """``extra_for(name, results)``: more candidates for :func:`nested`."""
    pooled: dict[str, dict[str, list]] = {}
    for name, d in zip(argv[::2], argv[1::2], strict=True):
        res = nested(name, Path(d), extra_for(name, Path(d)) if extra_for else None)
        for label, by_rule in res.items():
            print(f"\n## {name}, {label} candidates: held-out warned / PR AUC, mean "
                  "over blocks; the choice per block")  # fmt: skip
            for rule, got in by_rule.items():
                w = np.nanmean([g[1] for g in got])
                p = np.mean([g[2] for g in got])
                picks = ", ".join(g[0] for g in got) if not rule.startswith(
                    "always") else ""  # fmt: skip
                print(f"| {rule} | {w:.3f} | {p:.3f} | {picks} |")
                pooled.setdefault(label, {}).setdefault(rule, []).append((w, p))
    for label, by_rule in pooled.items():
        print(f"\n## every data set, {label}: mean of the data sets' means")
        for rule, got in by_rule.items():
            if rule.startswith("always") and len(got) < len(argv) // 2:
                continue
            w, p = np.mean(got, axis=0)
            print(f"| {rule} | {w:.3f} | {p:.3f} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--ensembles" in args:
        ENSEMBLES = True
        args.remove("--ensembles")
    while "--leave-out" in args:
        i = args.index("--leave-out")
        LEFT_OUT.append(args[i + 1])
        del args[i : i + 2]
    main(args)
