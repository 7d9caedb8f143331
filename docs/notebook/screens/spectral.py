"""Screen, out of fold on train + validation: do band powers (the share of each
window's power in six octave bands of frequency, per channel, pooled over channels)
add to the window statistics the raw-feature candidates read? (results-notes.md,
2026-11-27, eighth session)

    python docs/notebook/screens/spectral.py msl smd skab daphnet   # $SCJEPA_DATA

No input so far describes how a window moves, only where it sits (mean, min, max,
last), how much it moves (std) and its trend (slope). Daphnet's freezes of gait are
known by their spectrum (power moves from the 0.5-3 Hz locomotion band to the 3-8 Hz
freeze band), and a server's load cycles or a valve's oscillation are spectral too.
Keys and protocol: _screen.cv_table. The decision rule was written before the run.
"""

import itertools
import sys

import _screen as screen
import numpy as np
import torch

torch.set_num_threads(1)

EDGES = (1, 2, 4, 8, 16, 32, 51)  # octave bands of rfft bins of a 100-step window


def band_shares(x: np.ndarray) -> np.ndarray:
    """(N, T, V) -> (N, 6, V): log share of each band in the window's power, per
    channel (linear trend removed, Hann taper)."""
    x = x.astype(np.float64)
    t = np.arange(x.shape[1], dtype=np.float64)
    tc = t - t.mean()
    slope = np.einsum("t,ntv->nv", tc / (tc**2).sum(), x)
    resid = x - x.mean(1, keepdims=True) - tc[None, :, None] * slope[:, None]
    power = np.abs(np.fft.rfft(resid * np.hanning(len(t))[None, :, None], axis=1)) ** 2
    bands = np.stack(
        [power[:, a:b].sum(1) for a, b in itertools.pairwise(EDGES)], axis=1
    )  # (N, 6, V)
    eps = 1e-12
    return np.log((bands + eps) / (bands.sum(1, keepdims=True) + len(EDGES) * eps))


if __name__ == "__main__":
    for name in sys.argv[1:]:
        screen.beside_statistics(name, "band powers", band_shares)
