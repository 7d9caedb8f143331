"""Screen, out of fold on train + validation: does the channels' correlation within a
window add to the window statistics the raw-feature candidates read? (results-notes.md,
2026-11-27, eighth session)

    python docs/notebook/screens/correlation.py msl smd skab daphnet   # $SCJEPA_DATA

Every input so far describes each channel on its own (its statistics, pooled over the
channels). A system drifting towards a fault often shows first in how its channels
move together: correlation-based detectors (MSCRED's signature matrices) rest on it.
Per channel: its mean absolute correlation with the other channels over the window,
its largest, and how far its row of the correlation matrix is from the same row of
the normal train windows' mean correlation matrix (divided by sqrt(V)); constant
channels read 0. Keys and protocol: _screen.cv_table. The decision rule was written
before the run.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.evaluate.protocol import normal_windows

torch.set_num_threads(1)

CHUNK = 4096


def correlations(x: np.ndarray) -> np.ndarray:
    """(N, T, V) -> (N, V, V) correlation matrices, 0 where a channel is constant."""
    out = np.empty((len(x), x.shape[2], x.shape[2]), np.float32)
    for a in range(0, len(x), CHUNK):
        c = x[a : a + CHUNK].astype(np.float64)
        c = c - c.mean(1, keepdims=True)
        sd = np.sqrt((c * c).mean(1, keepdims=True))
        z = np.where(sd > 1e-9, c / np.where(sd > 1e-9, sd, 1.0), 0.0)
        out[a : a + CHUNK] = np.einsum("ntv,ntw->nvw", z, z) / x.shape[1]
    return out


def features(reference: np.ndarray):
    def per_channel(x: np.ndarray) -> np.ndarray:
        """(N, T, V) -> (N, 3, V)."""
        r = correlations(x)
        v = r.shape[1]
        off = np.abs(r) * (1 - np.eye(v, dtype=np.float32))
        drift = np.linalg.norm(r - reference, axis=2) / np.sqrt(v)
        return np.stack([off.sum(2) / max(v - 1, 1), off.max(2), drift], axis=1)

    return per_channel


for name in sys.argv[1:]:
    ds = screen.name_ds(name)
    ref = correlations(normal_windows(ds, 100, 0 if ds.folds else None)).mean(0)
    screen.beside_statistics(name, "correlation", features(ref))
