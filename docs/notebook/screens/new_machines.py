"""Screen, out of fold on train + validation: how does the served recipe do on machines
it was never fitted on, and does each machine's own recent normal, as the reference
of its statistics, help there? (results-notes.md, 2026-12-02, thirty-sixth session;
criterion there.)

    python docs/notebook/screens/new_machines.py msl smd   # $SCJEPA_DATA

MSL and SMD-19 are split in time within each entity, so the served model's
cross-validation (and its test split) holds the same machines it was fitted on. Here
the blocks are whole entities (select.cv_blocks ``by_entity``): fitted on two blocks'
machines, stopped and calibrated on a third's, scoring a fourth's. Rows: the served
statistics trees; the same beside the statistics z-scored on the machine's own last
1,440 steps of its official train split (a day at SMD's one reading a minute: what a
service could learn from a new stream's first day); the same on its whole train split
(a bound). The served trees' time-blocked figures are printed first, for comparison.
"""

import sys

import _screen as screen
import numpy as np
from entity_scale import entity_scale

DAY = 1440


def main(name: str) -> None:
    ds = screen.name_ds(name)
    feats = screen.statistics(ds, 0)
    screen.cv_table(
        name, {"statistics, time blocks": feats}, [("trees", "every window")]
    )
    day, whole = entity_scale(ds, DAY), entity_scale(ds)
    screen.cv_table(
        name,
        {
            "statistics, machine blocks": feats,
            "+ own last day": lambda s: np.c_[feats(s), day(s)],
            "+ own train split (bound)": lambda s: np.c_[feats(s), whole(s)],
        },
        [("trees", "every window")],
        by_entity=True,
    )


for name in sys.argv[1:]:
    main(name)
