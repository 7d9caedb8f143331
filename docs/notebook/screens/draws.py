"""Screen, nested over the served model's CV blocks: does the selection warn of more
incidents held out when it chooses among two pre-training draws' candidates than on one
draw? (results-notes.md, 2026-12-03, fortieth session; criterion there.)

    python docs/notebook/screens/draws.py DATASET RUN_1 RUN_2 [DATASET RUN_1 RUN_2 ...]

RUN_1 and RUN_2 are `scjepa evaluate` runs of one data set with cv_scores.npz whose
checkpoints were pre-trained with different seeds (`--set run.seed=N`); the blocks and
labels are the data set's, so the same in both. For each block j the served rule
(rules.py) chooses on the other blocks among RUN_1's candidates, among RUN_2's, and
among both (RUN_2's renamed "... [draw 2]"); each choice is scored on block j. Among
both, a candidate and its other draw tie on the fewest inputs; the tie goes to the one
of higher out-of-fold PR AUC (the served rule's order otherwise). --leave-out NAME drops
a candidate from either run where it has it (the last quarter of the thirty-seventh
session's runs). Then the draws' ensemble: each candidate's out-of-fold risks averaged
over the two draws (seed by seed, as rules.py's means), the served rule choosing among
the eleven ensembles. No refit, no test window.
"""

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import rules

from training.evaluate.select import read_out_of_fold, write_out_of_fold

DRAW_2 = " [draw 2]"
SERVED = "served: warned, then PR AUC, fewest inputs"


def fewest(names, keys, order):
    """The served rule's last step; a candidate's two draws tie on it and the one of
    higher out-of-fold PR AUC is taken."""
    first = [n.removesuffix(DRAW_2) for n in order]
    return min(
        names,
        key=lambda n: (
            keys.n_inputs[n],
            first.index(n.removesuffix(DRAW_2)),
            -keys.pr_auc[n],
        ),
    )


rules.fewest = fewest


def names_of(run: Path) -> list[str]:
    """The candidates of a run, without reading their risks."""
    with np.load(run / "cv_scores.npz") as z:
        return [str(n) for n in z["candidates"]]


def oof_of(run: Path, leave_out: list[str]):
    oof = read_out_of_fold(run / "cv_scores.npz")
    return {n: o for n, o in oof.items() if n not in leave_out}


def ensemble_run(r1: Path, r2: Path, leave_out: list[str], tmp: Path) -> Path:
    """A run folder whose candidates are r1's and r2's common ones, each the mean of
    its two draws' out-of-fold risks (r1's results.json: the event settings)."""
    a, b = oof_of(r1, leave_out), oof_of(r2, leave_out)
    mean = {n: rules.mean_of({"1": a[n], "2": b[n]}, ["1", "2"]) for n in a if n in b}
    out = tmp / r1.name
    out.mkdir()
    shutil.copy(r1 / "results.json", out / "results.json")
    write_out_of_fold(out / "cv_scores.npz", mean)
    return out


def served(res: dict, label: str) -> tuple[float, float, list[str]]:
    got = res[label][SERVED]
    return (
        float(np.nanmean([g[1] for g in got])),
        float(np.mean([g[2] for g in got])),
        [g[0] for g in got],
    )


def main(argv: list[str]) -> None:
    leave_out = []
    while "--leave-out" in argv:
        i = argv.index("--leave-out")
        leave_out.append(argv[i + 1])
        del argv[i : i + 2]
    rows = []
    for name, r1, r2 in zip(argv[::3], argv[1::3], argv[2::3], strict=True):
        r1, r2 = Path(r1), Path(r2)
        rules.LEFT_OUT[:] = [n for n in leave_out if n in names_of(r1)]
        second = {n + DRAW_2: o for n, o in oof_of(r2, leave_out).items()}
        both = rules.nested(name, r1, second)
        rules.LEFT_OUT[:] = [n for n in leave_out if n in names_of(r2)]
        alone_2 = rules.nested(name, r2)
        rules.LEFT_OUT[:] = []
        with tempfile.TemporaryDirectory() as tmp:
            mean = rules.nested(name, ensemble_run(r1, r2, leave_out, Path(tmp)))
        d1 = served(both, "every candidate")
        d2 = served(alone_2, "every candidate")
        db = served(both, f"every candidate + {len(second)}")
        de = served(mean, "every candidate")
        rows.append((name, d1, d2, db, de))
        print(f"\n## {name}: held-out warned / PR AUC of the served rule, per block")
        labels = ("draw 1", "draw 2", "both draws", "the draws' ensemble")
        for label, (w, p, picks) in zip(labels, (d1, d2, db, de), strict=True):
            print(f"| {label} | {w:.3f} | {p:.3f} | {', '.join(picks)} |")
    for k, variant in ((3, "both draws' candidates"), (4, "the draws' ensemble")):
        print(f"\n## the criterion: {variant} against the mean of the two single draws")
        print(
            "| data set | one draw (mean) | variant | difference | PR AUC one / variant |"
        )
        diffs, pr = [], []
        for row in rows:
            name, d1, d2, dv = row[0], row[1], row[2], row[k]
            one_w, one_p = (d1[0] + d2[0]) / 2, (d1[1] + d2[1]) / 2
            diffs.append(dv[0] - one_w)
            pr.append(dv[1] - one_p)
            print(f"| {name} | {one_w:.3f} | {dv[0]:.3f} | {dv[0] - one_w:+.3f} | "
                  f"{one_p:.3f} / {dv[1]:.3f} |")  # fmt: skip
        print(f"| mean | | | {np.mean(diffs):+.3f} | PR AUC {np.mean(pr):+.3f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
