"""Screen, on held-out CV blocks: would scoring twice as often (a window every 5 steps,
8 on Daphnet) warn of more incidents at the same share of windows in false alert?
(results-notes.md, 2026-11-27, eighth session)

    python docs/notebook/screens/stride.py msl skab smd daphnet   # $SCJEPA_DATA

paging.py found a window every 10 steps warning far more than one every 100. Here the
served raw-feature trees (pooled statistics, the served recipe; SMD-19's served model)
are fitted on the served model's CV blocks (fold 0, K = 4: two blocks to fit, the next
to stop on, the held-out one scored; no test window) and score dense windows at half
the evaluated stride. Two paging rules, each held to 1-10 false alarms per 1,000 of the
windows it scores (paging.py): every window at half the stride, and every second one
(the evaluated stride). Keys: select.cv_keys. The decision rule was written before the
run.
"""

import json
import sys
from pathlib import Path

import _screen as screen
import numpy as np
import torch
from paging import BUDGETS, QUIET, page

from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import CVConfig, OutOfFold, cv_blocks, cv_keys

torch.set_num_threads(1)

for name in sys.argv[1:]:
    ds = screen.name_ds(name)
    run = Path("docs/results") / (
        "skab-trees" if name == "skab" else f"{name}-trees200"
    )
    ev = json.loads((run / "results.json").read_text())["config"]["events"]
    stride, lookback = ev["stride"] // 2, ev["lookback"]
    blocks = cv_blocks(ds, 0, 4, stride)
    stats = WindowStatsFeatures(normal_windows(ds, 100, 0 if ds.folds else None))
    f_hop = [stats(b.hop.x) for b in blocks]
    k = len(blocks)
    hop, dense = [], []
    for j in range(k):
        v = (j + 1) % k
        fit = [i for i in range(k) if i not in (j, v)]
        probe = Probe(f_hop[0].shape[1], ProbeConfig(kind="trees"), 0)
        probe.fit(
            np.concatenate([f_hop[i] for i in fit]),
            np.concatenate([blocks[i].hop.y for i in fit]),
            f_hop[v],
            blocks[v].hop.y,
        )
        hop.append(np.stack([probe.predict(f_hop[j])] * 3))  # deterministic trees
        dense.append(np.stack([probe.predict(stats(blocks[j].dense.x))] * 3))
    rules = {f"every window ({stride} steps)": 1, f"every second ({2 * stride})": 2}
    cands = {}
    for label, every in rules.items():
        paged = []
        for b, risk in zip(blocks, dense, strict=True):
            out = np.full_like(risk, QUIET)
            for st in b.stretches:
                for s in range(risk.shape[0]):
                    out[s, st.idx] = page(risk[s, st.idx], every, 1)
            paged.append(out)
        cands[label] = [OutOfFold(hop, paged, f_hop[0].shape[1])]
    # per 1,000 of each rule's own windows; the same bootstrap draws in both calls
    keys = [
        cv_keys([blocks], cands, lookback, CVConfig(n_boot=1000, budgets=b))
        for b in (BUDGETS, tuple(x / 2 for x in BUDGETS))
    ]
    (fine, k1), (coarse, k2) = zip(rules, keys, strict=True)
    diff = k1.warned_reps[fine] - k2.warned_reps[coarse]
    print(
        f"| {name} ({k1.cv['events']} events) | {k1.warned[fine]:.3f} | "
        f"{k2.warned[coarse]:.3f} | {k1.warned[fine] - k2.warned[coarse]:+.4f} "
        f"({np.std(diff):.3f}) | {k1.warned_one[fine]:.3f} / {k2.warned_one[coarse]:.3f} |",
        flush=True,
    )
