"""Soft codebook Q: cosine-similarity softmax over K prototypes, expected code embedding.

p_k = softmax_k(<h/|h|, c_k/|c_k|> / tau),  z = sum_k p_k c_k   (docs/method.md, "Modules").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def cosine_logits(h: Tensor, codes: Tensor, tau: float) -> Tensor:
    """h: (..., D), codes: (K, D) -> (..., K) cosine similarities / tau."""
    return F.normalize(h, dim=-1) @ F.normalize(codes, dim=-1).t() / tau


class SoftCodebook(nn.Module):
    def __init__(self, n_codes: int, dim: int, tau: float = 0.1) -> None:
        super().__init__()
        self.tau = tau
        # unit-variance entries: the scale of the LayerNorm'd encoder output h
        self.embed = nn.Parameter(torch.randn(n_codes, dim))

    @property
    def codes(self) -> Tensor:
        """(K, D) prototypes c_k."""
        return self.embed

    def probs(self, h: Tensor) -> Tensor:
        """h: (..., D) -> p: (..., K) on the simplex."""
        return cosine_logits(h, self.embed, self.tau).softmax(-1)

    def probs_to_codes(self, p: Tensor) -> Tensor:
        """Soft assignments (..., K) -> expected code embedding z (..., D)."""
        return p @ self.embed

    def indices_to_codes(self, idx: Tensor) -> Tensor:
        """Hard code indices (...,) -> prototypes (..., D)."""
        return F.embedding(idx, self.embed)

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """h: (..., D) -> (probs (..., K), z (..., D))."""
        p = self.probs(h)
        return p, self.probs_to_codes(p)


# -- diagnostics (logged per epoch; lucidrains-style "active %")


def perplexity(p: Tensor) -> Tensor:
    """exp(H(mean p)) of assignments (..., K): effective number of codes in use."""
    mean = p.reshape(-1, p.shape[-1]).mean(0)
    return torch.exp(-(mean * torch.log(mean + 1e-10)).sum())


@torch.no_grad()
def usage_stats(p: Tensor) -> dict[str, float | list[int]]:
    """Assignments (..., K) -> perplexity, active codes (argmax hit at least once),
    the share of tokens whose argmax is one of the 5 most used codes (near 1 = the
    hard assignments collapsed onto a few codes, whatever the soft perplexity says),
    mean max-probability, and the argmax usage histogram (K counts)."""
    p = p.reshape(-1, p.shape[-1])  # (N, K)
    hist = torch.bincount(p.argmax(-1), minlength=p.shape[-1])
    top = hist.topk(min(5, len(hist))).values.sum()
    return {
        "perplexity": perplexity(p).item(),
        "active_codes": int((hist > 0).sum()),
        "top5_share": (top / hist.sum().clamp_min(1)).item(),
        "max_prob": p.max(-1).values.mean().item(),
        "usage": hist.tolist(),
    }


@torch.no_grad()
def pca_variance_ratio(z: Tensor, ks: tuple[int, ...] = (1, 5, 10)) -> dict[str, float]:
    """Collapse diagnostics of latents (..., D): share of the variance carried by the
    top-k principal components (near 1 for small k = dimensional collapse) and
    ``z_spread``, the varying share of the energy (near 0 = complete collapse)."""
    z = z.reshape(-1, z.shape[-1]).double()  # (N, D)
    s = torch.linalg.svdvals(z - z.mean(0))
    var = s**2 / (s**2).sum().clamp_min(1e-30)
    out = {f"pc{k}_var": var[:k].sum().item() for k in ks}
    # share of the latents' energy that varies across samples (0 = every z identical)
    out["z_spread"] = ((s**2).sum() / (z**2).sum().clamp_min(1e-30)).item()
    return out


if __name__ == "__main__":
    cb = SoftCodebook(128, 32)
    p, z = cb(torch.randn(4, 5, 32))
    assert p.shape == (4, 5, 128) and z.shape == (4, 5, 32)
    assert torch.allclose(p.sum(-1), torch.ones(4, 5))
    one_hot = F.one_hot(p.argmax(-1), 128).float()
    assert torch.allclose(cb.probs_to_codes(one_hot), cb.indices_to_codes(p.argmax(-1)))
    print(f"ok: perplexity {perplexity(p).item():.1f} of 128")  # noqa: T201
