"""Model shapes, simplex outputs, the served sub-computation, the one-pass target."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.model_helpers import tiny_config

from model import SCJEPA, SoftCodebook, TargetEncoder
from model.patching import (
    down_avg,
    fold_channels,
    level_stats,
    patchify,
    revin,
    revin_inverse,
)

ARCH = [
    {},
    {"use_codebook": False},
    {"use_coarse": False},
    {"use_codebook": False, "use_coarse": False},
    {"stats_token": True},
    {"stats_token": True, "use_coarse": False},
]


@pytest.mark.parametrize("arch", ARCH, ids=str)
def test_online_and_target_shapes(arch: dict) -> None:
    cfg = tiny_config(**arch)
    model, N, n, D, K = SCJEPA(cfg), 6, cfg.n_tokens, cfg.d_model, cfg.n_codes
    assert n == cfg.n_patches + cfg.stats_token
    target = TargetEncoder(model)
    x = torch.randn(N, cfg.seq_len)
    out, tgt = model(x), target(x)
    width = K if cfg.use_codebook else D
    assert out["h"].shape == out["z"].shape == out["z_hat"].shape == (N, n, D)
    assert out["x_hat"].shape == (N, cfg.n_patches, cfg.patch_len)
    assert out["fine"].shape == (N, n, width)
    assert tgt["z_fine"].shape == (N, n, D)
    assert ("coarse" in out) == cfg.use_coarse == ("z_coarse" in tgt)
    if cfg.use_coarse:
        assert out["coarse"].shape == (N, 1, width)
        assert tgt["z_coarse"].shape == out["z_hat_coarse"].shape == (N, 1, D)
    assert ("probs" in out) == cfg.use_codebook == ("probs_fine" in tgt)
    if cfg.use_codebook:
        probs = [out["probs"], tgt["probs_fine"], tgt.get("probs_coarse", out["probs"])]
        for p in probs:
            assert (p >= 0).all()
            torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]))
        # z is the expected code embedding of the assignments
        torch.testing.assert_close(out["z"], out["probs"] @ model.codebook.codes)
    else:
        torch.testing.assert_close(out["z"], out["h"])


@pytest.mark.parametrize("use_coarse", [True, False])
def test_code_probs_is_channel_independent_and_on_simplex(use_coarse: bool) -> None:
    cfg = tiny_config(use_coarse=use_coarse)
    model = SCJEPA(cfg).eval()
    x = torch.randn(3, cfg.seq_len, 4).cumsum(1)  # (B, T, V)
    p = model.code_probs(x)
    assert p.shape == (3, 4, cfg.n_patches, cfg.n_codes)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 4, cfg.n_patches))
    # channels are folded into the batch: permuting channels permutes the output only
    perm = torch.tensor([2, 0, 3, 1])
    torch.testing.assert_close(model.code_probs(x[:, :, perm]), p[:, perm])
    # and channel 1 alone gives channel 1's codes
    torch.testing.assert_close(model.code_probs(x[:, :, 1:2])[:, 0], p[:, 1])
    # RevIN: codes do not depend on a channel's offset and scale
    torch.testing.assert_close(model.code_probs(3.0 * x + 7.0), p, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("use_coarse", [True, False])
def test_stats_token_carries_the_level_revin_removes(use_coarse: bool) -> None:
    cfg = tiny_config(stats_token=True, use_coarse=use_coarse)
    model = SCJEPA(cfg).eval()
    x = torch.randn(3, cfg.seq_len, 4).cumsum(1)
    p = model.code_probs(x)
    P = cfg.n_patches
    assert p.shape == (3, 4, P + 1, cfg.n_codes)
    torch.testing.assert_close(model.code_probs(x[:, :, 1:2])[:, 0], p[:, 1])
    shifted = model.code_probs(3.0 * x + 7.0)
    # the stats token (last) sees offset and scale; the patches see them through
    # attention to it, so every token moves, unlike the paper's RevIN-only encoder
    assert not torch.allclose(shifted[:, :, P], p[:, :, P], atol=1e-4)
    assert not torch.allclose(shifted[:, :, :P], p[:, :, :P], atol=1e-4)
    # the token reads exactly [mean, log std] of each raw channel window
    xc = fold_channels(x)
    _, mean, std = revin(xc, cfg.revin_eps)
    s = level_stats(mean, std)
    torch.testing.assert_close(s[:, 0], xc.mean(-1))
    torch.testing.assert_close(
        s[:, 1], 0.5 * torch.log(xc.var(-1, unbiased=False) + cfg.revin_eps)
    )


def test_code_probs_needs_the_codebook() -> None:
    with pytest.raises(AssertionError, match="codebook"):
        SCJEPA(tiny_config(use_codebook=False)).code_probs(torch.randn(1, 100, 2))


@pytest.mark.parametrize("stats_token", [False, True], ids=["paper", "stats-token"])
def test_target_single_pass_equals_separate_fine_and_coarse_passes(
    stats_token: bool,
) -> None:
    cfg = tiny_config(stats_token=stats_token)
    target = TargetEncoder(SCJEPA(cfg))
    x = torch.randn(5, cfg.seq_len).cumsum(1)
    out = target(x)
    xn, mean, std = revin(x)
    stats = level_stats(mean, std) if stats_token else None
    h_fine = target.encoder(patchify(xn, cfg.patch_len), stats=stats)  # P (+1) alone
    h_coarse = target.encoder(down_avg(xn, cfg.n_patches))  # 1 token alone
    p_fine, z_fine = target.codebook(h_fine)
    p_coarse, _ = target.codebook(h_coarse)
    torch.testing.assert_close(out["z_fine"], z_fine, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["probs_fine"], p_fine, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["probs_coarse"], p_coarse, atol=1e-5, rtol=1e-5)


def test_target_is_frozen_and_stays_in_eval_mode() -> None:
    target = TargetEncoder(SCJEPA(tiny_config(dropout=0.5)))
    target.train()
    assert not target.training and not any(m.training for m in target.modules())
    assert not any(p.requires_grad for p in target.parameters())
    x = torch.randn(4, 100)
    torch.testing.assert_close(target(x)["z_fine"], target(x)["z_fine"])  # no dropout


def test_patching_views_and_revin_round_trip() -> None:
    x = torch.randn(3, 100) * 5 + 2
    xn, mean, std = revin(x, 1e-5)
    torch.testing.assert_close(xn.mean(-1), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        xn.std(-1, unbiased=False), torch.ones(3), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(revin_inverse(xn, mean, std), x, atol=1e-4, rtol=1e-5)
    patches = patchify(xn, 20)
    assert patches.shape == (3, 5, 20)
    torch.testing.assert_close(patches[:, 2], xn[:, 40:60])
    coarse = down_avg(xn, 5)
    assert coarse.shape == (3, 1, 20)
    torch.testing.assert_close(coarse[:, 0, 3], xn[:, 15:20].mean(-1))
    raw = torch.arange(24.0).reshape(2, 4, 3)  # (B, T, V)
    torch.testing.assert_close(fold_channels(raw)[1], raw[0, :, 1])  # (B*V, T)


def test_encoder_accepts_one_to_p_tokens() -> None:
    cfg = tiny_config()
    enc = SCJEPA(cfg).encoder
    for n in range(1, cfg.n_patches + 1):
        assert enc(torch.randn(2, n, cfg.patch_len)).shape == (2, n, cfg.d_model)


def test_codebook_decode_paths_agree_and_tau_sharpens() -> None:
    cb = SoftCodebook(10, 8, tau=0.1)
    h = torch.randn(7, 8)
    p, z = cb(h)
    idx = p.argmax(-1)
    torch.testing.assert_close(
        cb.probs_to_codes(F.one_hot(idx, 10).float()), cb.indices_to_codes(idx)
    )
    torch.testing.assert_close(z, p @ cb.codes)
    soft = SoftCodebook(10, 8, tau=1.0)
    soft.load_state_dict(cb.state_dict())
    assert cb.probs(h).max(-1).values.mean() > soft.probs(h).max(-1).values.mean()
    # cosine logits: the scale of h does not matter
    torch.testing.assert_close(cb.probs(10 * h), p)


def test_config_is_enough_to_rebuild() -> None:
    model = SCJEPA(tiny_config(use_coarse=False))
    clone = SCJEPA(type(model.config)(**model.config.to_dict()))
    clone.load_state_dict(model.state_dict())  # strict: same architecture
    x = torch.randn(2, 100, 3)
    torch.testing.assert_close(clone.eval().code_probs(x), model.eval().code_probs(x))


def test_collapse_diagnostics_tell_collapse_from_spread() -> None:
    from model.codebook import pca_variance_ratio, usage_stats

    spread = pca_variance_ratio(torch.randn(500, 16))
    assert spread["pc1_var"] < 0.2 and spread["pc10_var"] < 0.8
    assert spread["z_spread"] > 0.9
    line = torch.randn(500, 1) * torch.randn(1, 16) + 5.0  # rank-1 around an offset
    collapsed = pca_variance_ratio(line)
    assert collapsed["pc1_var"] == pytest.approx(1.0) and collapsed["z_spread"] < 0.2
    one_code = F.one_hot(torch.zeros(50, dtype=torch.long), 8).float()
    u = usage_stats(one_code)
    assert u["active_codes"] == 1 and u["perplexity"] == pytest.approx(1.0)
    assert u["max_prob"] == 1.0 and u["usage"] == [50, 0, 0, 0, 0, 0, 0, 0]
    assert usage_stats(torch.full((50, 8), 1 / 8))["perplexity"] == pytest.approx(8.0)


def test_target_buffers_follow_the_model_device() -> None:
    """The target's mask, token indices and positions live where the model does: on a
    GPU, pre-training failed at the first step with the mask left on the CPU (H100 and
    H200, 2026-11-27). The meta device stands in for the GPU here."""
    model = SCJEPA(tiny_config()).to("meta")
    target = TargetEncoder(model)
    assert {b.device.type for b in target.buffers()} == {"meta"}
    assert {p.device.type for p in target.parameters()} == {"meta"}
