"""SC-JEPA losses: pure functions, combined in one place (:func:`scjepa_loss`).

L = L_pred + L_code + lambda_r * L_rec   (docs/method.md, "Loss")

Reductions: a squared norm |a - b|^2 of a latent (D) or a patch (L) is the sum of its
squared entries (the spec), or with ``loss.reduce=mean`` their MEAN, so that no term
scales with D or L (configs/improved.yaml); terms defined per patch are SUMMED over the
P patches (the paper's formulas) and every term is averaged over the batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from training.pretrain.config import LossConfig


def kl_div(p_target: Tensor, logits: Tensor) -> Tensor:
    """KL(target || prediction) summed over patches, batch mean. (N, n, K) each."""
    log_q = logits.log_softmax(-1)
    kl = torch.xlogy(p_target, p_target) - p_target * log_q  # (N, n, K)
    return kl.sum((1, 2)).mean()


def sq_norm(d: Tensor, reduce: str) -> Tensor:
    """|d|^2 over the last axis: the sum of squares, or their mean (``reduce``)."""
    sq = d.pow(2)
    return sq.sum(-1) if reduce == "sum" else sq.mean(-1)


def patch_sq_err(a: Tensor, b: Tensor, reduce: str) -> Tensor:
    """sum_patches |a - b|^2, batch mean. (N, n, F) each."""
    return sq_norm(a - b, reduce).sum(-1).mean()


def code_terms(h: Tensor, z: Tensor, reduce: str) -> tuple[Tensor, Tensor]:
    """VQ-style terms: commit = |sg(z) - h|^2 (moves E), quant = |z - sg(h)|^2 (moves Q),
    per token, averaged over the tokens. (..., D) each."""
    commit = sq_norm(z.detach() - h, reduce).mean()
    quant = sq_norm(z - h.detach(), reduce).mean()
    return commit, quant


def entropy_terms(p: Tensor) -> tuple[Tensor, Tensor]:
    """(E[H(p)], H(E[p])) of assignments (..., K): per-row entropy, batch-usage entropy."""
    p = p.reshape(-1, p.shape[-1])  # (N*P, K)
    sample = -torch.xlogy(p, p).sum(-1).mean()
    mean = p.mean(0)
    batch = -torch.xlogy(mean, mean).sum()
    return sample, batch


def variance_hinge(h: Tensor) -> Tensor:
    """mean over dims of relu(1 - std across tokens), h (..., D): 0 once every
    dimension varies between windows by at least 1 (VICReg's variance term)."""
    std = torch.sqrt(h.reshape(-1, h.shape[-1]).var(0) + 1e-4)
    return torch.relu(1.0 - std).mean()


def covariance_penalty(h: Tensor) -> Tensor:
    """sum of squared off-diagonal covariances of h's dimensions across tokens, over D
    (VICReg's covariance term), h (..., D): 0 when the dimensions are uncorrelated. The
    variance hinge alone is met by h moving along one direction with every dimension
    in step; this term makes them vary apart."""
    flat = h.reshape(-1, h.shape[-1])
    flat = flat - flat.mean(0)
    cov = flat.T @ flat / max(len(flat) - 1, 1)  # (D, D)
    off = cov - torch.diag(torch.diagonal(cov))
    return off.pow(2).sum() / h.shape[-1]


def rec_loss(online: dict[str, Tensor], x: Tensor, scale: str, reduce: str) -> Tensor:
    """sum_patches |X_hat - X|^2, (N, P, L) against the window x (N, T): on the raw
    (de-normalised) scale, or on the window's RevIN scale (``scale="window"``)."""
    if scale == "window":
        return patch_sq_err(online["x_hat_norm"], online["x_norm"], reduce)
    x_hat = online["x_hat"]
    return patch_sq_err(x_hat, x.view(x_hat.shape), reduce)


def lambda_r(
    step: int, total_steps: int, start: float = 0.5, end: float = 0.1
) -> float:
    """Linear anneal of the reconstruction weight over the run's global step."""
    frac = min(max(step / max(total_steps - 1, 1), 0.0), 1.0)
    return start + (end - start) * frac


def scjepa_loss(
    online: dict[str, Tensor],
    target: dict[str, Tensor] | None,
    x: Tensor,
    cfg: LossConfig,
    lam_r: float,
) -> dict[str, Tensor]:
    """Every term, weighted in one place. ``online``: SCJEPA(x) outputs for W_t (x is
    (N, T)); ``target``: TargetEncoder(W_{t+1}) outputs (None when cfg.pred is off).

    Returns the total ``loss`` and the named terms (detached except ``loss``).
    """
    zero = x.new_zeros(())
    t = dict.fromkeys(
        ("kl_fine", "mse_fine", "kl_coarse", "mse_coarse", "commit", "quant"), zero
    )
    t |= dict.fromkeys(("ent_sample", "ent_batch", "var_h", "cov_h", "rec"), zero)
    has_codes = "probs" in online

    # -- predictive: fine (P x K) and coarse (1 x K) assignments of W_{t+1}
    if cfg.pred:
        assert target is not None, "the predictive objective needs the target pass"
        t["mse_fine"] = patch_sq_err(online["z_hat"], target["z_fine"], cfg.reduce)
        if "coarse" in online:
            t["mse_coarse"] = patch_sq_err(
                online["z_hat_coarse"], target["z_coarse"], cfg.reduce
            )
        if has_codes and cfg.kl:
            t["kl_fine"] = kl_div(target["probs_fine"], online["fine"])
            if "coarse" in online:
                t["kl_coarse"] = kl_div(target["probs_coarse"], online["coarse"])
            pred = cfg.lambda_f * (t["kl_fine"] + cfg.gamma * t["mse_fine"])
            pred = pred + cfg.lambda_c * t["kl_coarse"]
        elif has_codes:  # w/o KL: the latent MSE terms only
            pred = cfg.gamma * (
                cfg.lambda_f * t["mse_fine"] + cfg.lambda_c * t["mse_coarse"]
            )
        else:  # w/o codebook module: continuous latents, MSE prediction
            pred = cfg.lambda_f * t["mse_fine"] + cfg.lambda_c * t["mse_coarse"]
    else:
        pred = zero

    # -- codebook: commitment, quantisation, assignment entropy, usage diversity
    code = zero
    if has_codes:
        t["ent_sample"], t["ent_batch"] = entropy_terms(online["probs"])
        if cfg.code:
            t["commit"], t["quant"] = code_terms(online["h"], online["z"], cfg.reduce)
            code = cfg.commit * t["commit"] + cfg.quant * t["quant"]
            code = code + cfg.entropy * t["ent_sample"] - cfg.diversity * t["ent_batch"]
    if cfg.code and cfg.variance > 0:
        t["var_h"] = variance_hinge(online["h"])
        code = code + cfg.variance * t["var_h"]
    if cfg.code and cfg.covariance > 0:
        t["cov_h"] = covariance_penalty(online["h"])
        code = code + cfg.covariance * t["cov_h"]

    # -- reconstruction of W_t from z
    if cfg.rec:
        t["rec"] = rec_loss(online, x, cfg.rec_scale, cfg.reduce)
    lam = lam_r if cfg.rec else 0.0

    loss = pred + code + lam * t["rec"]
    terms = {k: v.detach() for k, v in t.items()}
    terms |= {"pred": pred.detach(), "code": code.detach()}
    terms["lambda_r"] = loss.detach().new_tensor(lam)  # on the loss's device
    return {"loss": loss, **terms}
