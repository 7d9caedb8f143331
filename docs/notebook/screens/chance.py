"""The rotation null of `scjepa evaluate` again, with more rotations, from a run's
saved test scores (scores.npz) and budget thresholds (results.json): for runs made
before the null's 2,000 rotations, whose p could not fall below 1/201.

    python docs/notebook/screens/chance.py DATASET RESULTS_DIR [ROTATIONS]

Prints, per row, the warned count at the budget threshold (mean over seeds), the
null's mean and p, and the Bonferroni threshold over the rows tested.
"""

import json
import sys
from pathlib import Path

import numpy as np

from training.data import load_dataset
from training.evaluate.protocol import prepare_folds, test_stretches
from training.evaluate.warning import EventConfig, rotation_null


def main(name: str, results: Path, rotations: int = 20000) -> None:
    res = json.loads((results / "results.json").read_text())
    ev = EventConfig(**res["config"]["events"])
    sts = test_stretches(prepare_folds(load_dataset(name), ev))
    with np.load(results / "scores.npz") as z:
        dense = {k[len("dense/score/") :]: z[k] for k in z.files if "dense/score/" in k}
    tested = [n for n in res["rows"] if "events" in res["rows"][n] and n != "random"]
    print(f"{len(tested)} rows tested: Bonferroni p < {0.05 / len(tested):.5f}; "
          f"{rotations} rotations (smallest p {1 / (rotations + 1):.5f})")  # fmt: skip
    for n in tested:
        b = res["rows"][n]["events"]["budget"]
        thr = np.array(b["thresholds"], dtype=float).reshape(len(dense[n]), -1)
        thr[np.isnan(thr)] = np.inf  # null: none kept the budget, never alerts
        null = rotation_null(sts, dense[n], thr, ev.lookback, rotations)
        observed = b["warned"]["mean"]
        p = (1 + np.sum(null >= observed)) / (1 + rotations)
        print(f"| {n} | {observed:.1f} / {b['events']} | {null.mean():.2f} | {p:.5f} |")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *(int(a) for a in sys.argv[3:]))
