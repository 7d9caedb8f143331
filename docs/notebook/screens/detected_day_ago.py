"""Screen, out of fold on train + validation: what a detector of the current window saw
at this time of day one and two days earlier, beside the statistics trees
(results-notes.md, 2026-11-28, thirteenth session).

    python docs/notebook/screens/detected_day_ago.py smd   # $SCJEPA_DATA

day_ago.py read the label-free kNN / PCA scores of the window that followed the current
time a day earlier, and found nothing. A detector trained on labels sees more: on the
cross-validation blocks of train + validation, trees fitted to the current window's
label on two blocks rank the other blocks' onset windows at ROC 0.70 from their score
of yesterday's next window alone. Here, per held-out block j (the served model's
blocks: fold 0, K = 4; the probe fits on blocks a and b, stops and calibrates on
j + 1, scores j):

- stage 1, the detector: gradient-boosted trees (the screens' recipe) on the pooled
  statistics of the windows of the fit blocks (every 20 steps), target: the window
  itself is anomalous. For the probe's own fit windows it is cross-fitted (block a's
  windows read the detector fitted on block b, and the reverse), so the probe does not
  learn from scores on windows the detector was fitted to; blocks j and j + 1 read the
  one fitted on a and b together.
- stage 2, the probe: the served trees recipe on the statistics and the detector's
  scores of three past windows of the same stream: the ones that followed the current
  time 1 and 2 days earlier ([t - P, t - P + 100), P = 1440 steps on SMD-19's
  1-minute series, and 2P) and the one ending 1 day earlier, each with a flag for
  whether the stream has that history (scores set below every value where not).

Keys: select.cv_keys, as the served model's choice computes them, against the
statistics trees; then each row's warned rate and onset AUC held-out block by block.
The decision rule was written before the run.
"""

import sys

import _screen as screen
import numpy as np
import torch
from day_ago import day_ago_windows
from sklearn.ensemble import HistGradientBoostingClassifier

from training.data import Samples
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import CVConfig, OutOfFold, cv_blocks, cv_keys

torch.set_num_threads(1)

DAY = {"smd": 1440}
MISSING = -1.0  # the detector's probabilities lie in [0, 1]


def detector(x: np.ndarray, cur: np.ndarray):
    clf = HistGradientBoostingClassifier(
        max_iter=200, learning_rate=0.05, max_leaf_nodes=15, random_state=0
    ).fit(x, cur)
    return lambda f: clf.predict_proba(f)[:, 1]


def main(name: str) -> None:
    import json
    from pathlib import Path

    from training.evaluate.warning import EventConfig

    ds = screen.name_ds(name)
    period = DAY[name]
    stats = WindowStatsFeatures(normal_windows(ds, 100, None))
    res = json.loads(Path(f"docs/results/{name}-trees200/results.json").read_text())
    ev = EventConfig(**res["config"]["events"])
    blocks = cv_blocks(ds, 0, 4, ev.stride)
    k = len(blocks)
    lags = (("next, 1 day", period), ("next, 2 days", 2 * period), ("ending 1 day", period + 100))  # fmt: skip

    def past(s: Samples) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each past window's statistics and whether it exists."""
        out = []
        for _, lag in lags:
            x, ok = day_ago_windows(ds, s, lag)
            out.append((stats(x), ok))
        return out

    f = {kind: [stats(getattr(b, kind).x) for b in blocks] for kind in ("hop", "dense")}
    p = {kind: [past(getattr(b, kind)) for b in blocks] for kind in ("hop", "dense")}
    # the detector's fit windows: every 4th dense window (20 steps)
    d_x = [f["dense"][b][::4] for b in range(k)]
    d_y = [blocks[b].dense.cur[::4] for b in range(k)]

    def scored(det, kind: str, b: int) -> np.ndarray:
        cols = []
        for x, ok in p[kind][b]:
            cols += [np.where(ok, det(x), MISSING), ok]
        return np.c_[f[kind][b], np.array(cols).T].astype(np.float32)

    print(
        f"\n## {name}: {k} blocks, {sum(len(b.hop) for b in blocks)} hop windows; "
        f"past windows {[n for n, _ in lags]} (P = {period})",
        flush=True,
    )
    seeds = (0, 1, 2)
    rows: dict[str, list] = {"statistics (served), trees": [[], []]}
    rows["statistics + detected day-ago, trees"] = [[], []]
    for j in range(k):
        v = (j + 1) % k
        a, b = [i for i in range(k) if i not in (j, v)]
        det_ab = detector(np.r_[d_x[a], d_x[b]], np.r_[d_y[a], d_y[b]])
        det = {a: detector(d_x[b], d_y[b]), b: detector(d_x[a], d_y[a])}
        inputs = {
            "statistics (served), trees": lambda kind, i: f[kind][i],
            "statistics + detected day-ago, trees": lambda kind, i, det=det, det_ab=det_ab: (
                scored(det.get(i, det_ab) if kind == "hop" else det_ab, kind, i)
            ),
        }
        for n, feat in inputs.items():
            x_tr = np.r_[feat("hop", a), feat("hop", b)]
            y_tr = np.r_[blocks[a].hop.y, blocks[b].hop.y]
            probe = Probe(x_tr.shape[1], ProbeConfig(kind="trees"), 0)
            probe.fit(x_tr, y_tr, feat("hop", v), blocks[v].hop.y)
            h, d = probe.predict(feat("hop", j)), probe.predict(feat("dense", j))
            rows[n][0].append(np.stack([h] * len(seeds)))  # trees: deterministic
            rows[n][1].append(np.stack([d] * len(seeds)))
    oof = {n: [OutOfFold(h, d, 1)] for n, (h, d) in rows.items()}
    keys = cv_keys([blocks], oof, ev.lookback, CVConfig(n_boot=200))
    ref = next(iter(oof))
    print(f"{keys.cv['events']} events. | row | warned at 1-10 (SD) | against the statistics trees (SD) | warned at 1 | PR AUC |")  # fmt: skip
    for n in oof:
        print(
            f"| {n} | {keys.warned[n]:.3f} ({np.std(keys.warned_reps[n]):.3f}) | "
            f"{keys.warned[n] - keys.warned[ref]:+.3f} "
            f"({np.std(keys.warned_reps[n] - keys.warned_reps[ref]):.3f}) | "
            f"{keys.warned_one[n]:.3f} | {keys.pr_auc[n]:.3f} |",
            flush=True,
        )
    from day_ago import by_block

    by_block(blocks, oof, ev)


for name in sys.argv[1:]:
    main(name)
