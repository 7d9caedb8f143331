"""The served graph's detector scores (model/detectors.py) equal the detectors they
stand for: the kNN and PCA baselines (scikit-learn) and SC-JEPA's reconstruction error
as the evaluation computes it; SC-JEPA's within-window surprise is a KL."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.neighbors import NearestNeighbors
from support.model_helpers import tiny_config

from model import SCJEPA
from model.detectors import Detectors, channel_stats, fit_detector_params
from training.evaluate.encode import ReconstructionError
from training.evaluate.features import channel_stats as np_channel_stats


def _windows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 100, 4)) * rng.uniform(0.5, 3, 4) + rng.uniform(-5, 5, 4)
    return x.astype(np.float32)


def test_channel_stats_match_the_baselines_features() -> None:
    x = _windows(7, 0)
    got = channel_stats(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, np_channel_stats(x).reshape(7, -1), atol=1e-4)


def test_knn_and_pca_scores_equal_scikit_learn() -> None:
    normal, x = _windows(120, 1), _windows(9, 2) * 1.5
    params = fit_detector_params(normal, ("knn", "pca"))
    det = Detectors(("knn", "pca"), params)
    with torch.no_grad():
        knn = det.knn_distance(torch.from_numpy(x)).numpy()
        pca_err = det.pca_error(torch.from_numpy(x)).numpy()
        raw = det.raw(torch.from_numpy(x)).numpy()
    # the kNN baseline's space: per-channel statistics z-scored on the train windows
    f_tr = np_channel_stats(normal).reshape(120, -1)
    mean, std = f_tr.mean(0), f_tr.std(0) + 1e-6
    nn_ = NearestNeighbors(n_neighbors=5).fit((f_tr - mean) / std)
    f = np_channel_stats(x).reshape(9, -1)
    want = nn_.kneighbors((f - mean) / std)[0].mean(1)
    np.testing.assert_allclose(knn, want, rtol=1e-3)
    pca = PCA(n_components=0.9, svd_solver="full").fit(normal.reshape(120, -1))
    flat = x.reshape(9, -1)
    want = ((flat - pca.inverse_transform(pca.transform(flat))) ** 2).mean(1)
    np.testing.assert_allclose(pca_err, want, rtol=1e-3)
    np.testing.assert_allclose(
        raw, np.stack([np.log1p(knn), np.log(pca_err + 1e-8)], 1)
    )
    # a window from the bank is its own nearest neighbour unless skipped
    with torch.no_grad():
        own = det.knn_distance(torch.from_numpy(normal[:3]), skip_self=True).numpy()
        with_self = det.knn_distance(torch.from_numpy(normal[:3])).numpy()
    assert (own > with_self).all()


def test_scaling_z_scores_the_raw_scores() -> None:
    normal, train = _windows(60, 3), _windows(40, 4)
    params = fit_detector_params(normal, ("knn", "pca"))
    with torch.no_grad():
        raw = Detectors(("knn", "pca"), params).raw(torch.from_numpy(train)).numpy()
        scaled = params | {"scale_mean": raw.mean(0), "scale_std": raw.std(0) + 1e-6}
        z = Detectors(("knn", "pca"), scaled)(torch.from_numpy(train))
    np.testing.assert_allclose(z.mean(0).numpy(), 0.0, atol=1e-4)
    np.testing.assert_allclose(z.std(0, correction=0).numpy(), 1.0, atol=1e-3)


def test_scjepa_window_scores() -> None:
    model = SCJEPA(tiny_config()).eval()
    x = torch.from_numpy(_windows(6, 5))
    p = model.code_probs(x)
    scores = model.window_scores(x, p)
    assert scores["surprise"].shape == scores["recon"].shape == (6,)
    assert (scores["surprise"] >= -1e-5).all()  # a KL divergence
    want = ReconstructionError(model)(x.numpy())
    np.testing.assert_allclose(scores["recon"].numpy(), want, atol=1e-4)


def test_knn_score_of_a_channel_at_a_high_level_is_exact() -> None:
    """A channel at 1e5 under small noise (a pressure in Pa): its statistics taken in
    float32 lose the spread and slope to the rounding of the level, which PyTorch and
    onnxruntime round in different orders (the served kNN score moved by 3e-3). In
    float64 the score is the scikit-learn one on float64 statistics."""
    rng = np.random.default_rng(8)

    def windows(n: int) -> np.ndarray:
        x = rng.normal(size=(n, 100, 3)) * [1.0, 0.5, 0.2]
        x[:, :, 2] += 101325.0 + np.linspace(0, 1, 100)[:, None].T  # a slow drift
        return x.astype(np.float32)

    normal, x = windows(120), windows(9)
    det = Detectors(("knn",), fit_detector_params(normal, ("knn",)))
    with torch.no_grad():
        knn = det.knn_distance(torch.from_numpy(x)).numpy()
    f_tr = np_channel_stats(normal).reshape(120, -1)
    mean, std = f_tr.mean(0), f_tr.std(0) + 1e-6
    nn_ = NearestNeighbors(n_neighbors=5).fit((f_tr - mean) / std)
    want = nn_.kneighbors((np_channel_stats(x).reshape(9, -1) - mean) / std)[0]
    np.testing.assert_allclose(knn, want.mean(1), rtol=1e-5)
