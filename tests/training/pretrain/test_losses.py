"""Loss terms: pure functions, the lambda_r schedule, and every ablation switch."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from support.train_helpers import TINY_MODEL
from torch import Tensor

from model import SCJEPA, ModelConfig, TargetEncoder
from training.errors import UserError
from training.pretrain.config import LossConfig, from_dict
from training.pretrain.losses import (
    code_terms,
    covariance_penalty,
    entropy_terms,
    kl_div,
    lambda_r,
    patch_sq_err,
    scjepa_loss,
    variance_hinge,
)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)


def test_kl_matches_torch_and_vanishes_on_equal_inputs() -> None:
    logits_t, logits_p = torch.randn(4, 5, 8), torch.randn(4, 5, 8)
    p_t = logits_t.softmax(-1)
    ref = (
        F.kl_div(logits_p.log_softmax(-1), p_t, reduction="sum") / 4
    )  # sum P,K; mean N
    torch.testing.assert_close(kl_div(p_t, logits_p), ref)
    assert kl_div(p_t, logits_t).abs() < 1e-5
    assert kl_div(p_t, logits_p) > 0


def test_reductions_sum_patches_and_features_as_the_spec() -> None:
    """|a - b|^2 is the squared norm (the spec): summed over the features, then over
    the patches; ``mean`` (configs/improved.yaml) averages the features instead.
    Before, the mean was the only reduction, also in configs/paper.yaml."""
    a = torch.zeros(2, 5, 4)
    b = torch.ones(2, 5, 4) * 2  # squared error 4 everywhere
    assert patch_sq_err(a, b, "sum").item() == pytest.approx(5 * 16.0)  # 5 x |.|^2
    assert patch_sq_err(a, b, "mean").item() == pytest.approx(5 * 4.0)  # 5 x mean 4
    h, z = torch.zeros(3, 5, 4), torch.ones(3, 5, 4)
    assert [t.item() for t in code_terms(h, z, "sum")] == [4.0, 4.0]
    assert [t.item() for t in code_terms(h, z, "mean")] == [1.0, 1.0]
    assert LossConfig().reduce == "sum"
    uniform = torch.full((3, 5, 16), 1 / 16)
    sample, batch = entropy_terms(uniform)
    assert sample.item() == pytest.approx(math.log(16), rel=1e-5)
    assert batch.item() == pytest.approx(math.log(16), rel=1e-5)
    one_hot = F.one_hot(torch.zeros(3, 5, dtype=torch.long), 16).float()
    assert entropy_terms(one_hot)[1].item() == pytest.approx(0.0, abs=1e-6)


def test_lambda_r_anneals_linearly_over_the_run() -> None:
    assert lambda_r(0, 101) == pytest.approx(0.5)
    assert lambda_r(50, 101) == pytest.approx(0.3)
    assert lambda_r(100, 101) == pytest.approx(0.1)
    assert lambda_r(500, 101) == pytest.approx(0.1)  # clamped


def _run(arch: dict | None = None, **loss: bool) -> tuple[SCJEPA, dict]:
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**(TINY_MODEL | (arch or {}))))
    target = TargetEncoder(model)
    cfg = LossConfig(**loss)
    x, x_next = torch.randn(2, 8, 100).cumsum(-1)
    online = model(x, predict=cfg.pred, reconstruct=cfg.rec)
    terms = scjepa_loss(online, target(x_next) if cfg.pred else None, x, cfg, 0.3)
    terms["loss"].backward()
    return model, terms


def _has_grad(module: torch.nn.Module | None) -> bool:
    assert module is not None
    return any(
        p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters()
    )


def test_full_objective_combines_terms_and_reaches_every_module() -> None:
    model, t = _run()
    c = LossConfig()
    pred = (
        c.lambda_f * (t["kl_fine"] + c.gamma * t["mse_fine"])
        + c.lambda_c * t["kl_coarse"]
    )
    code = c.commit * t["commit"] + c.quant * t["quant"]
    code = code + c.entropy * t["ent_sample"] - c.diversity * t["ent_batch"]
    torch.testing.assert_close(t["pred"], pred)
    torch.testing.assert_close(t["code"], code)
    torch.testing.assert_close(t["loss"].detach(), pred + code + 0.3 * t["rec"])
    assert all(t[k] > 0 for k in ("kl_fine", "kl_coarse", "mse_fine", "commit", "rec"))
    for m in ("encoder", "codebook", "fine_predictor", "coarse_predictor", "decoder"):
        assert _has_grad(getattr(model, m)), m


def test_without_kl_only_latent_mse_predicts() -> None:
    model, t = _run(kl=False)
    c = LossConfig()
    assert t["kl_fine"] == 0 and t["kl_coarse"] == 0
    expected = c.gamma * (c.lambda_f * t["mse_fine"] + c.lambda_c * t["mse_coarse"])
    torch.testing.assert_close(t["pred"], expected)
    assert _has_grad(model.fine_predictor) and _has_grad(model.coarse_predictor)


def test_without_reconstruction_the_decoder_is_idle() -> None:
    model, t = _run(rec=False)
    assert t["rec"] == 0 and t["lambda_r"] == 0
    assert not _has_grad(model.decoder)
    assert _has_grad(model.encoder)


def test_window_scale_reconstruction_is_the_same_in_any_units() -> None:
    """rec_scale=window: the error on each window's RevIN scale, so readings in mPa
    or in kPa weigh alike against L_pred; the spec's raw scale grows with units^2."""
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**TINY_MODEL)).eval()
    x = torch.randn(4, 100).cumsum(-1)
    raw, window = LossConfig(pred=False), LossConfig(pred=False, rec_scale="window")

    def rec(xs: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
        return scjepa_loss(model(xs, predict=False), None, xs, cfg, 0.5)["rec"]

    base = rec(x, window)
    torch.testing.assert_close(rec(1000 * x + 50, window), base, rtol=1e-4, atol=0)
    torch.testing.assert_close(
        rec(1000 * x + 50, raw), 1e6 * rec(x, raw), rtol=1e-3, atol=0
    )
    # the raw error over each window's RevIN variance, summed over steps (the spec's sum)
    out = model(x, predict=False)
    var = x.var(-1, unbiased=False) + model.cfg.revin_eps  # (N,)
    err = (out["x_hat"] - x.view(out["x_hat"].shape)).pow(2).sum((-2, -1))
    torch.testing.assert_close(base, (err / var).mean(), rtol=1e-4, atol=0)


def test_variance_term_is_zero_for_spread_latents_and_one_for_identical_ones() -> None:
    torch.manual_seed(0)
    spread = 3 * torch.randn(64, 5, 16)  # (N, P, D): std about 3 in every dimension
    assert variance_hinge(spread) == 0
    same = torch.randn(16).expand(64, 5, 16).clone().requires_grad_()
    hinge = variance_hinge(same)
    assert hinge.item() == pytest.approx(1 - 1e-2, abs=1e-6)  # sqrt(0 + 1e-4)
    hinge.backward()
    assert same.grad is not None and torch.isfinite(same.grad).all()
    _check_h_term("var_h", "variance", variance_hinge)


def test_covariance_term_is_zero_for_independent_dims_not_for_one_line() -> None:
    torch.manual_seed(0)
    n, d = 4096, 8
    independent = torch.randn(n, d)
    # against the definition: squared off-diagonal sample covariances over D
    c = torch.cov(independent.T)
    want = (c.pow(2).sum() - torch.diagonal(c).pow(2).sum()) / d
    torch.testing.assert_close(covariance_penalty(independent), want)
    assert covariance_penalty(independent) < 0.01
    # every dimension moving in step along one direction (what the variance hinge
    # alone lets through): each has std 1, so the hinge is 0, the covariance term not
    s = torch.randn(n, 1)
    one_direction = (s * torch.tensor([1.0, -1.0] * (d // 2))).requires_grad_()
    assert variance_hinge(one_direction) < 0.01
    assert covariance_penalty(one_direction).item() == pytest.approx(d - 1, rel=0.1)
    covariance_penalty(one_direction).backward()
    assert one_direction.grad is not None and torch.isfinite(one_direction.grad).all()
    _check_h_term("cov_h", "covariance", covariance_penalty)


def _check_h_term(key: str, weight: str, term: Callable[[Tensor], Tensor]) -> None:
    """In the objective: the code term carries ``term`` of h with its weight, and
    only when asked (weight 0 by default)."""
    _, t = _run()
    assert t[key] == 0
    torch.manual_seed(0)
    model = SCJEPA(ModelConfig(**TINY_MODEL))
    x = torch.randn(8, 100).cumsum(-1)
    online = model(x, predict=False)
    cfg = LossConfig(pred=False, **{weight: 0.5})
    t = scjepa_loss(online, None, x, cfg, 0.3)
    code = cfg.commit * t["commit"] + cfg.quant * t["quant"]
    code = code + cfg.entropy * t["ent_sample"] - cfg.diversity * t["ent_batch"]
    torch.testing.assert_close(t[key], term(online["h"]).detach())
    assert t[key] > 0
    torch.testing.assert_close(t["code"], code + 0.5 * t[key])


def test_an_unknown_reconstruction_scale_names_the_key() -> None:
    with pytest.raises(UserError, match=r"loss\.rec_scale='units' is unknown; allowed: "
                       "one of raw, window"):  # fmt: skip
        from_dict({"loss": {"rec_scale": "units"}})


def test_without_prediction_no_target_and_idle_predictors() -> None:
    model, t = _run(pred=False)
    assert t["pred"] == 0 and t["kl_fine"] == 0 and t["mse_fine"] == 0
    assert not _has_grad(model.fine_predictor) and not _has_grad(model.coarse_predictor)
    assert _has_grad(model.encoder) and _has_grad(model.codebook)


def test_without_codebook_losses_the_bottleneck_stays() -> None:
    model, t = _run(code=False)
    assert t["code"] == 0 and t["commit"] == 0 and t["quant"] == 0
    assert t["kl_fine"] > 0  # codes still predicted through the bottleneck
    assert _has_grad(model.codebook)  # via z (reconstruction) and z_hat (MSE)


def test_without_codebook_module_continuous_latents_mse() -> None:
    model, t = _run({"use_codebook": False})
    assert model.codebook is None
    c = LossConfig()
    assert t["kl_fine"] == 0 and t["code"] == 0 and t["ent_batch"] == 0
    torch.testing.assert_close(
        t["pred"], c.lambda_f * t["mse_fine"] + c.lambda_c * t["mse_coarse"]
    )
    assert t["mse_fine"] > 0 and t["mse_coarse"] > 0


def test_without_downsampling_no_coarse_term() -> None:
    model, t = _run({"use_coarse": False})
    assert model.coarse_predictor is None
    assert t["kl_coarse"] == 0 and t["mse_coarse"] == 0 and t["kl_fine"] > 0


def test_stats_token_is_trained_by_every_objective() -> None:
    """The level token is one more predicted token (fine KL/MSE over P + 1) and feeds
    the patches' latents; reconstruction still decodes the P patches only."""
    model, t = _run(arch={"stats_token": True})
    assert all(t[k] > 0 for k in ("kl_fine", "kl_coarse", "mse_fine", "rec"))
    assert model.encoder.stats_proj is not None
    assert _has_grad(model.encoder.stats_proj)
    assert model.encoder.stats_pos.grad is not None
    for m in ("fine_predictor", "coarse_predictor", "decoder"):
        assert _has_grad(getattr(model, m)), m
