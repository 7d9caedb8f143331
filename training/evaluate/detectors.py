"""The served probe's inputs beyond the codes: window statistics and label-free
detector scores (model/detectors.py), as featurizers for the evaluation's probe rows.

The detector scores are computed by the same torch module the exported graph runs
(model.detectors.Detectors), from constants fitted on the official train windows (kNN
bank, PCA basis) and a z-scaling fitted on the probe's train split; SC-JEPA's own
scores come from the encoder pass that gives the codes (CodeFeatures.scores).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from model.detectors import DETECTORS, SCJEPA_DETECTORS, Detectors, fit_detector_params
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.encode import CodeFeatures
from training.evaluate.features import PerArrayCache
from training.evaluate.probe import feature_parts


class DetectorScores:
    """Every detector's score of a window batch, cached per array; z-scaled on
    ``train`` (the probe's train windows)."""

    def __init__(
        self,
        normal: np.ndarray,
        train: np.ndarray,
        codes: CodeFeatures | None = None,
        seed: int = 0,
        batch_size: int = 256,
        params: dict[str, Any] | None = None,
    ) -> None:
        own = codes is not None and codes.has_codes
        self.names = (
            DETECTORS
            if own
            else tuple(d for d in DETECTORS if d not in SCJEPA_DETECTORS)
        )
        self.codes = codes
        self.batch_size = batch_size
        # ``params``: another instance's constants fitted on the same ``normal``
        # (the kNN bank and PCA basis do not depend on the model)
        self.params = (
            params
            if params is not None
            else fit_detector_params(normal, self.names, seed)
        )
        self.module = Detectors(self.names, self.params).eval()  # identity scaling
        self._lookup = PerArrayCache(self._raw)
        raw = self._lookup(train)  # cached: the probes featurize the same array
        self.mean, self.std = raw.mean(0), raw.std(0) + 1e-6

    @torch.no_grad()
    def _raw(self, x: np.ndarray) -> np.ndarray:
        own = (
            self.codes.scores(x)
            if self.codes is not None and any(n in self.names for n in SCJEPA_DETECTORS)
            else {}
        )
        out = []
        for i in range(0, len(x), self.batch_size):
            xb = torch.from_numpy(np.ascontiguousarray(x[i : i + self.batch_size]))
            sb = {
                k: torch.from_numpy(v[i : i + self.batch_size]) for k, v in own.items()
            }
            out.append(self.module.raw(xb, sb).numpy())
        return np.concatenate(out).astype(np.float64)

    def columns(self, names: tuple[str, ...]) -> Callable[[np.ndarray], np.ndarray]:
        """Featurizer: the z-scaled scores of ``names`` (N, len(names))."""
        idx = [self.names.index(n) for n in names]

        def f(x: np.ndarray) -> np.ndarray:
            z = (self._lookup(x)[:, idx] - self.mean[idx]) / self.std[idx]
            return z.astype(np.float32)

        return f

    def saved(self, names: tuple[str, ...]) -> dict[str, Any]:
        """What a served probe reading ``names`` stores (SavedProbe.detectors)."""
        idx = [self.names.index(n) for n in names]
        keep = {"knn_k"}
        keep |= {"knn_bank", "knn_mean", "knn_std"} if "knn" in names else set()
        keep |= {"pca_mean", "pca_components"} if "pca" in names else set()
        out = {k: v for k, v in self.params.items() if k in keep}
        return out | {"scale_mean": self.mean[idx], "scale_std": self.std[idx]}


class ProbeInputs:
    """Featurizer of a probe reading ``features`` ("codes+stats+knn", ...): the parts
    concatenated in :data:`training.evaluate.probe.PARTS` order."""

    def __init__(
        self,
        features: str,
        codes: CodeFeatures | None,
        stats: WindowStatsFeatures | None,
        detectors: DetectorScores | None,
    ) -> None:
        self.features = features
        parts = feature_parts(features)
        self.detector_names = tuple(p for p in parts if p in DETECTORS)
        self.fns: list[Callable[[np.ndarray], np.ndarray]] = []
        if "codes" in parts:
            assert codes is not None
            self.fns.append(codes)
        if "stats" in parts:
            assert stats is not None
            self.fns.append(stats)
        if self.detector_names:
            assert detectors is not None
            self.fns.append(detectors.columns(self.detector_names))
        self.codes, self.stats, self.detectors = codes, stats, detectors

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([f(x) for f in self.fns], axis=1)
