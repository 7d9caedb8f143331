"""Screen, out of fold on train + validation: does the stream's own past, as a
reference for the current window, add to the window statistics the raw-feature
candidates read? (results-notes.md, 2026-11-28, fifteenth session; criterion there)

    python docs/notebook/screens/own_past.py msl smd skab daphnet   # $SCJEPA_DATA
    python docs/notebook/screens/own_past.py skab@1 daphnet@3 ...    # other folds

Every input so far compares a window with the pooled normal data of every entity (the
kNN bank, the PCA basis, the statistics' scaling). SKAB's own protocol, where each run's
first 400 rows are its reference, found that a run's own start tells its faults apart
far better than the other runs do (results-notes.md, 2026-11-27: kNN F1 0.786 against
0.698 for flagging every row), and the label-free screen of this session found the
pooled reference at chance on SKAB (window ROC AUC 0.51). Here, per entity and CV
block, the first 300 steps of its stretch are the reference (a stream's first readings
after the service starts would be); per channel, the window's six statistics against
their mean and std over the reference's dense windows (log1p of the absolute z; the std
floored at 0.1 times that of the official train windows), pooled over channels by mean
and max (12 features); 0 for windows that overlap the reference. A control row reads
the statistics and the steps since the stretch began: where runs start shortly before
their faults, a window's distance from the run's start also tells its age. Keys and
protocol: _screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.data import Samples
from training.data.windows import dense_windows
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.features import channel_stats
from training.evaluate.protocol import normal_windows

torch.set_num_threads(2)
REF = 300  # steps of the stream's own past that are its reference


def own_past(ds, fold: int):
    floor = 0.1 * channel_stats(
        normal_windows(ds, 100, fold if ds.folds else None)
    ).std(0)

    def featurize(s: Samples) -> np.ndarray:
        out = np.zeros((len(s), 12), np.float32)
        for i in np.unique(s.entity):
            m = np.flatnonzero(s.entity == i)
            lo = int(s.end[m].min()) - 100  # the entity's stretch in this block
            series = ds.entities[i].test[:, ds.mask].astype(np.float32)
            ref = channel_stats(
                np.ascontiguousarray(dense_windows(series[lo : lo + REF], 100, 5))
            )
            mu, sd = ref.mean(0), ref.std(0) + floor + 1e-6
            after = m[s.end[m] - 100 >= lo + REF]  # windows clear of the reference
            if not len(after) or not len(ref):
                continue
            z = np.log1p(np.abs(channel_stats(s.x[after]) - mu) / sd)  # (n, 6, V)
            out[after] = np.c_[z.mean(2), z.max(2)]
        return out

    return featurize


def age(s: Samples) -> np.ndarray:
    """(N, 1): steps from the start of each window's entity stretch in the block."""
    out = np.zeros((len(s), 1), np.float32)
    for i in np.unique(s.entity):
        m = s.entity == i
        out[m, 0] = s.end[m] - s.end[m].min()
    return out


def main(args: list[str]) -> None:
    for arg in args:
        name, _, f = arg.partition("@")
        fold = int(f or 0)
        ds = screen.name_ds(name)
        stats = WindowStatsFeatures(normal_windows(ds, 100, fold if ds.folds else None))
        past = own_past(ds, fold)
        screen.cv_table(
            name,
            {
                "pooled statistics (served)": lambda s, stats=stats: stats(s.x),
                "statistics + own past": lambda s, stats=stats, past=past: np.c_[
                    stats(s.x), past(s)
                ],
                # the control: a run's age alone (steps since its stretch began), what
                # the own past could stand in for where every run starts shortly
                # before its fault, as SKAB's experiments do
                "statistics + steps since the start": lambda s, stats=stats: np.c_[
                    stats(s.x), age(s)
                ],
                "statistics + steps since the start + own past": lambda s, stats=stats, past=past: (
                    np.c_[stats(s.x), age(s), past(s)]
                ),
            },
            [("trees", "every window")],
            fold=fold,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
