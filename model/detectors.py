"""Label-free detector scores of the current window, inside the served graph.

Beside SC-JEPA's codes and the pooled window statistics, a probe may read these scores
(one column each, in :data:`DETECTORS` order), all computed from the raw window alone:

- ``knn``: mean Euclidean distance to the k nearest official-train windows in the
  per-channel statistics space (mean, std, min, max, last value, slope per channel,
  z-scored on train: the kNN baseline's space), the train bank stored in the graph;
- ``pca``: reconstruction error of the flattened raw window by a PCA of the official
  train windows (the PCA baseline's model: mean and components stored in the graph);
- ``surprise``: SC-JEPA's own prediction error, within the window (the graph reads one
  window, so the previous window is not there): KL of the window's code assignments
  from the fine predictor's forecast made from those same assignments, summed over
  tokens, mean over channels. The predictor learned what follows a window; a window
  unlike what the predictor expects to follow it is one the dynamics do not explain;
- ``recon``: SC-JEPA's decoder error on the window (RevIN scale, log, mean over
  channels), as training.evaluate.encode.ReconstructionError.

Each score is log-compressed and z-scored with constants fitted on train windows
(``scale_mean``/``scale_std``); the same module computes the probe's features during
evaluation and in the exported graph, so training and serving share one definition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

DETECTORS = ("knn", "pca", "surprise", "recon")
SCJEPA_DETECTORS = ("surprise", "recon")  # need the SC-JEPA model
KNN_K = 5


def channel_stats(x: Tensor) -> Tensor:
    """(B, T, V) -> (B, 6 * V) float64: per channel mean, std, min, max, last value,
    slope, statistic-major (as training.evaluate.features.channel_stats(x).reshape(B,
    -1)). In float64, as model/stats.py: in float32 a channel at 1e5 loses its slope
    and spread to the rounding of its level, and PyTorch and onnxruntime round in
    different orders (the kNN score of such a window moved by 3e-3)."""
    x = x.double()
    t = torch.arange(x.shape[1], dtype=x.dtype, device=x.device)
    tc = (t - t.mean()) / ((t - t.mean()) ** 2).sum()
    slope = torch.einsum("t,btv->bv", tc, x)
    s = torch.stack(
        [x.mean(1), x.std(1, correction=0), x.amin(1), x.amax(1), x[:, -1], slope],
        dim=1,
    )  # (B, 6, V)
    return s.flatten(1)


class Detectors(nn.Module):
    """Raw window (B, T, V kept channels) [+ SC-JEPA scores] -> (B, n) z-scored scores."""

    knn_bank: Tensor  # (N, 6 V) z-scored statistics of official-train windows
    knn_mean: Tensor  # (6 V,) float64: their scaling
    knn_std: Tensor
    pca_mean: Tensor  # (T V,)
    pca_components: Tensor  # (k, T V)
    scale_mean: Tensor  # (n,) z-scaling of the raw (log) scores
    scale_std: Tensor

    def __init__(self, names: tuple[str, ...], params: dict[str, Any]) -> None:
        super().__init__()
        unknown = set(names) - set(DETECTORS)
        assert not unknown, f"unknown detectors {sorted(unknown)}"
        self.names = tuple(n for n in DETECTORS if n in names)
        self.k = int(params.get("knn_k", KNN_K))

        def buf(key: str, dtype: torch.dtype = torch.float32) -> None:
            value = torch.as_tensor(np.asarray(params[key]), dtype=dtype)
            self.register_buffer(key, value)

        if "knn" in self.names:
            buf("knn_bank")
            # float64 as the statistics they scale: a level of 1e5 kept in float32
            # is 0.008 off, which a spread of 0.1 across windows makes 0.08 sigma
            buf("knn_mean", torch.float64)
            buf("knn_std", torch.float64)
        if "pca" in self.names:
            for key in ("pca_mean", "pca_components"):
                buf(key)
        for key in ("scale_mean", "scale_std"):
            buf(key)

    def raw(self, x: Tensor, scjepa: dict[str, Tensor] | None = None) -> Tensor:
        """Unscaled (log) scores (B, n); ``scjepa`` holds "surprise" / "recon" (B,)."""
        cols = []
        if "knn" in self.names:
            cols.append(torch.log1p(self.knn_distance(x)))
        if "pca" in self.names:
            cols.append(torch.log(self.pca_error(x) + 1e-8))
        for name in SCJEPA_DETECTORS:
            if name in self.names:
                assert scjepa is not None, f"{name} needs the SC-JEPA model's scores"
                cols.append(scjepa[name])
        return torch.stack(cols, dim=1)

    def forward(self, x: Tensor, scjepa: dict[str, Tensor] | None = None) -> Tensor:
        return (self.raw(x, scjepa) - self.scale_mean) / self.scale_std

    def knn_distance(self, x: Tensor, skip_self: bool = False) -> Tensor:
        """Mean distance to the k nearest bank windows (B,); ``skip_self`` drops the
        nearest (the window itself, when ``x`` is in the bank)."""
        f = ((channel_stats(x) - self.knn_mean) / self.knn_std).float()  # (B, F)
        bank = self.knn_bank
        d2 = (
            (f * f).sum(1, keepdim=True)
            - 2.0 * f @ bank.t()
            + (bank * bank).sum(1).unsqueeze(0)
        )  # (B, N)
        k = self.k + int(skip_self)
        idx = torch.topk(d2, k, dim=1, largest=False).indices  # (B, k)
        # the expansion above finds the neighbours; their distances are taken again
        # from the differences, as it loses the digits of a distance far below the
        # features' norm (near-duplicate windows, periodic data), and the root would
        # pass that rounding on (1e-3 on a distance of 1e-3)
        dist = ((f.unsqueeze(1) - bank[idx]) ** 2).sum(-1).sqrt()  # (B, k)
        return dist[:, int(skip_self) :].mean(1)

    def pca_error(self, x: Tensor) -> Tensor:
        """Mean squared error of the PCA reconstruction of the flattened window (B,)."""
        c = x.flatten(1) - self.pca_mean  # (B, T*V)
        rec = (c @ self.pca_components.t()) @ self.pca_components
        return ((c - rec) ** 2).mean(1)


def fit_detector_params(
    normal: np.ndarray,
    names: tuple[str, ...],
    seed: int = 0,
    max_bank: int = 8192,
    variance: float = 0.9,
) -> dict[str, Any]:
    """The stored constants of ``knn`` / ``pca`` fitted on official-train windows
    ``normal`` (N, T, V) (at most ``max_bank`` of them, drawn with ``seed``, in the kNN
    bank); the z-scaling is the identity (the caller sets ``scale_mean`` / ``scale_std``
    from the probe's train windows: the official train windows sit in the kNN bank)."""
    params: dict[str, Any] = {"knn_k": KNN_K}
    if "knn" in names:
        with torch.no_grad():
            f = channel_stats(torch.from_numpy(np.ascontiguousarray(normal))).numpy()
        mean, std = f.mean(0), f.std(0) + 1e-6
        bank = (f - mean) / std
        if len(bank) > max_bank:
            rng = np.random.default_rng(seed)
            bank = bank[np.sort(rng.choice(len(bank), max_bank, replace=False))]
        params |= {"knn_bank": bank, "knn_mean": mean, "knn_std": std}
        params["knn_k"] = min(KNN_K, len(bank) - 1)
    if "pca" in names:
        from sklearn.decomposition import PCA

        flat = normal.reshape(len(normal), -1)
        pca = PCA(n_components=variance, svd_solver="full", random_state=seed).fit(flat)
        params |= {"pca_mean": pca.mean_, "pca_components": pca.components_}
    n = sum(1 for d in DETECTORS if d in names)
    params |= {"scale_mean": np.zeros(n), "scale_std": np.ones(n)}
    return params
