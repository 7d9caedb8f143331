"""Frozen SC-JEPA features for the downstream probe (method.md, "Downstream probe").

A window (T, V) -> code probabilities p (V, P, K) from the online encoder + codebook
-> variable-wise max over V -> (P, K) -> flattened P * K features. Without the codebook
(ablation) the encoder's latents (V, P, D) take the place of p.
"""

from __future__ import annotations

import numpy as np
import torch

from model import SCJEPA
from model.patching import fold_channels
from training.evaluate.features import PerArrayCache


class CodeFeatures:
    """Callable featurizer over window batches, cached per input array.

    The probe is refitted for every seed on the same train/val/test arrays; encoding
    them once keeps evaluation cost at one encoder pass per window.
    """

    def __init__(self, model: SCJEPA, batch_size: int = 64) -> None:
        self.model = model.eval()
        self.batch_size = batch_size
        self._lookup = PerArrayCache(self._encode)  # -> (features, codes, scores)

    @torch.no_grad()
    def _encode(
        self, x: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        feats, codes = [], []
        own: dict[str, list[np.ndarray]] = {"surprise": [], "recon": []}
        for i in range(0, len(x), self.batch_size):
            xb = torch.from_numpy(np.ascontiguousarray(x[i : i + self.batch_size]))
            p = self.model.probe_inputs(xb)  # (B, V, P, K)
            feats.append(p.amax(dim=1).flatten(1).numpy())  # (B, P * K)
            codes.append(p.argmax(dim=-1).to(torch.int16).numpy())  # (B, V, P)
            if self.has_codes:  # the model's label-free scores, from the same pass
                for k, v in self.model.window_scores(xb, p).items():
                    own[k].append(v.numpy())
        scores = {k: np.concatenate(v) for k, v in own.items() if v}
        return np.concatenate(feats), np.concatenate(codes), scores

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._lookup(x)[0]

    def scores(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """SC-JEPA's surprise and reconstruction error per window (N,) (model.SCJEPA.
        window_scores); needs the codebook."""
        if not self.has_codes:
            raise ValueError("a model without the codebook has no window scores")
        return self._lookup(x)[2]

    @property
    def has_codes(self) -> bool:
        return self.model.codebook is not None

    def codes(self, x: np.ndarray) -> np.ndarray:
        """Dominant code per channel and patch, (N, V, P); needs the codebook."""
        if not self.has_codes:
            raise ValueError("a model without the codebook has no codes")
        return self._lookup(x)[1]


class ReconstructionError:
    """Label-free score from the pre-trained model itself: how badly its decoder
    reconstructs the current window from the codes.

    Per channel, the mean squared error of the reconstruction on the RevIN-normalised
    scale (so every channel counts alike), then the mean of its log over channels: a
    detector fitted on nothing but pre-training, like the PCA row's reconstruction
    error. Cached per input array like :class:`CodeFeatures`.
    """

    def __init__(self, model: SCJEPA, batch_size: int = 64) -> None:
        self.model = model.eval()
        self.batch_size = batch_size
        self._lookup = PerArrayCache(self._score)

    @torch.no_grad()
    def _score(self, x: np.ndarray) -> np.ndarray:
        out = []
        for i in range(0, len(x), self.batch_size):
            xb = torch.from_numpy(np.ascontiguousarray(x[i : i + self.batch_size]))
            B, _, V = xb.shape
            rec = self.model(fold_channels(xb), predict=False)  # (B*V, P, L) each
            err = (rec["x_hat_norm"] - rec["x_norm"]) ** 2
            per_channel = err.mean((-1, -2))  # normalised-scale MSE, (B*V,)
            out.append(torch.log(per_channel + 1e-6).view(B, V).mean(1).numpy())
        return np.concatenate(out).astype(np.float64)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._lookup(x)
