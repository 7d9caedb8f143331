"""How often the input-drift monitor calls the benchmarks' own later data unlike the
training data (results-notes.md, 2026-12-01, thirty-second session).

    python docs/notebook/screens/drift_monitor.py msl smd skab daphnet   # $SCJEPA_DATA

The monitor every exported graph carries (model/export.py NoveltyMonitor) is fitted as
`scjepa evaluate` fits it for the served model (protocol.served_novelty: the normal
windows of fold 0's train split its reference, of its validation split its
calibration). Here it scores the dense windows of fold 0's test split (later in time
on MSL and SMD-19; other runs and subjects on SKAB and Daphnet), the normal ones (the
window and the next normal) apart from those inside or before an incident, and prints
their mean novelty (0.5 on the calibration windows, by construction) and their share
at or above the level against the expected share. No model or label choice is made
here.
"""

import sys

import numpy as np
import torch
from _screen import served_monitor

from training.calibrate import novelty_of

torch.set_num_threads(1)
for name in sys.argv[1:]:
    _, fold, record = served_monitor(name)
    print(
        f"\n{name}: level {record['level']}, expected share "
        f"{record['expected_share']:.4f} ({record['calibration_windows']} calibration, "
        f"{record['reference_windows']} reference windows)"
    )
    for split in ("val", "test"):
        s = fold.dense[split]
        nov = novelty_of(record, s.x)
        normal = (s.cur == 0) & (s.y == 0)
        for label, m in (("normal", normal), ("in or before an incident", ~normal)):
            if not m.any():
                continue
            share = float(np.mean(nov[m] >= record["level"]))
            print(
                f"  {split}, {label}: {m.sum()} windows, mean novelty "
                f"{nov[m].mean():.3f}, share unlike training {share:.4f} = "
                f"{share / max(record['expected_share'], 1e-9):.1f}x expected"
            )
