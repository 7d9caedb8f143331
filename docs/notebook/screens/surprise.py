"""Screen, out of fold on train + validation: SC-JEPA's surprise across windows (the
predictor's error on the current window given the previous one) beside the window
statistics the raw-feature candidates read. (results-notes.md, 2026-11-29,
twenty-second session; criterion there.)

    python docs/notebook/screens/surprise.py msl CKPT smd CKPT skab CKPT daphnet CKPT
    # from the repository root; $SCJEPA_DATA; for SKAB and Daphnet fold 0's checkpoint

The served graph reads one window, so its surprise is the fine predictor's forecast
made from the window's own code probabilities, compared with those same
probabilities (model/detectors.py), averaged over the channels. The issue names the
JEPA's real surprise: the forecast made from the previous window W_{t-1}, which the
predictor was trained to make, compared with the current window's codes. The service
holds the previous window, so the graph could read two. Per channel here:

- across: KL(p_t || forecast from p_{t-1}), summed over the patch tokens, with
  W_{t-1} the 100 steps before the window in its entity's series (a window too close
  to the series' start stands in for its own predecessor);
- within: KL(p_t || forecast from p_t), the served graph's score per channel;

each pooled over the channels by mean, max and min (the served score is the mean
alone), log-compressed and standardised on the official train windows. Beside the 18
pooled statistics, each is read by the trees and by the MLP, fitted on every window;
the across score also from the untrained twin (scjepa evaluate's, seed 0), its floor.
Keys and protocol: _screen.cv_table.
"""

import sys

import _screen as screen
import numpy as np
import torch

from training.data import Samples, cut_windows, fit_entities
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.features import Standardizer
from training.evaluate.protocol import load_encoders, normal_windows

torch.set_num_threads(1)
W, BATCH = 100, 128


class Surprise:
    """Samples -> {"across", "within"}: (N, V) per-channel KL of one model, cached
    per sample set (cv_table asks for each block's windows once per input)."""

    def __init__(self, ds, model) -> None:
        self.ds, self.model, self._cache = ds, model.eval(), {}

    @torch.no_grad()
    def kl(self, cur: np.ndarray, prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out_a, out_w = [], []
        for i in range(0, len(cur), BATCH):
            xc = torch.from_numpy(np.ascontiguousarray(cur[i : i + BATCH]))
            xp = torch.from_numpy(np.ascontiguousarray(prev[i : i + BATCH]))
            p = self.model.probe_inputs(xc)  # (B, V, n, K)
            p_prev = self.model.probe_inputs(xp)
            out_a.append(self.model.code_surprise(p, p_prev).numpy())
            out_w.append(self.model.code_surprise(p).numpy())
        return np.concatenate(out_a), np.concatenate(out_w)

    def __call__(self, s: Samples) -> dict[str, np.ndarray]:
        key = hash(s.entity.tobytes() + s.end.tobytes())  # the same windows
        if key not in self._cache:
            a, w = self.kl(s.x, np.nan_to_num(screen.preceding(self.ds, s)))
            self._cache[key] = {"across": a, "within": w}
        return self._cache[key]

    def reference(self) -> dict[str, np.ndarray]:
        """The official train windows (hop W) of the entities fold 0 may fit on, each
        with its predecessor on that grid (an entity's first window with itself)."""
        cur, prev = [], []
        for i in fit_entities(self.ds, 0 if self.ds.folds else None):
            w = cut_windows(self.ds.entities[i].train[:, self.ds.mask], W)
            if len(w):
                cur.append(w)
                prev.append(np.concatenate([w[:1], w[:-1]]))
        a, w = self.kl(np.concatenate(cur), np.concatenate(prev))
        return {"across": a, "within": w}


def pooled(kl: np.ndarray) -> np.ndarray:
    """(N, V) -> (N, 3): log of the mean, max and min over channels."""
    return np.log(np.c_[kl.mean(1), kl.max(1), kl.min(1)] + 1e-6)


def run(name: str, ckpt: str) -> None:
    ds = screen.name_ds(name)
    trained, untrained, _ = load_encoders(ckpt)
    stats = WindowStatsFeatures(normal_windows(ds, W, 0 if ds.folds else None))
    inputs = {"pooled statistics (served)": lambda s: stats(s.x)}
    for tag, model in (("", trained), (", untrained", untrained)):
        sur = Surprise(ds, model)
        ref = sur.reference()
        for kind in ("across", "within") if not tag else ("across",):
            scale = Standardizer().fit(pooled(ref[kind]))
            inputs[f"statistics + surprise {kind}{tag}"] = (
                lambda s, sur=sur, kind=kind, scale=scale: np.c_[
                    stats(s.x), scale(pooled(sur(s)[kind]))
                ]
            )
    for probe in ("trees", "mlp"):  # each row against the statistics, same probe
        screen.cv_table(name, inputs, [(probe, "every window")])


args = sys.argv[1:]
for name, ckpt in zip(args[::2], args[1::2], strict=True):
    run(name, ckpt)
