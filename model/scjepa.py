"""SC-JEPA: the online branch, the EMA target branch, and the served sub-computation.

Online (W_t):   RevIN -> P patches -> E -> h -> Q -> (Pi_t, z) -> decoder -> X_hat
                Pi_t -> fine predictor -> p_hat_fine, z_hat;  -> coarse predictor -> p_hat_coarse
Target (W_{t+1}, EMA of E and Q, no grad): fine patches and the DownAvg patch in ONE
encoder pass: a 6-token sequence with a block-diagonal attention mask (fine tokens see
fine tokens, the coarse token sees itself) and positions [0..P-1, 0], which equals two
separate passes while keeping one set of large matmuls. With ``stats_token`` (beyond the
paper) both branches append the window's level token, which joins the fine block.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from model.codebook import SoftCodebook
from model.config import ModelConfig
from model.decoder import PatchDecoder
from model.encoder import PatchEncoder
from model.patching import (
    down_avg,
    fold_channels,
    level_stats,
    patchify,
    revin,
    revin_inverse,
)
from model.predictor import CoarsePredictor, FinePredictor


class SCJEPA(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        K, D = cfg.n_codes, cfg.d_model
        self.encoder = PatchEncoder(cfg)
        self.codebook = SoftCodebook(K, D, cfg.tau) if cfg.use_codebook else None
        width = K if cfg.use_codebook else D  # what the predictors read and predict
        self.fine_predictor = FinePredictor(cfg, width, width)
        self.coarse_predictor = (
            CoarsePredictor(cfg, width, width) if cfg.use_coarse else None
        )
        self.decoder = PatchDecoder(cfg)

    @property
    def config(self) -> ModelConfig:
        return self.cfg

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """x: (N, T) one-channel windows -> (h (N, n, D), patches (N, P, L), mean, std).

        n = P tokens, plus the stats token (last) when ``cfg.stats_token``.
        """
        xn, mean, std = revin(x, self.cfg.revin_eps)  # (N, T), (N, 1), (N, 1)
        patches = patchify(xn, self.cfg.patch_len)  # (N, P, L)
        stats = level_stats(mean, std) if self.cfg.stats_token else None  # (N, 2)
        return self.encoder(patches, stats=stats), patches, mean, std

    @torch.no_grad()
    def code_probs(self, x: Tensor) -> Tensor:
        """The served sub-computation. x: (B, T, V) raw windows -> p: (B, V, n, K)."""
        assert self.codebook is not None, "code_probs needs the codebook module"
        return self.probe_inputs(x)

    def probe_inputs(self, x: Tensor) -> Tensor:
        """What the probe reads, per channel and patch. x: (B, T, V) raw windows.

        Code probabilities p (B, V, n, K) of the n = ``cfg.n_tokens`` tokens; without
        the codebook (the "continuous latents" ablation) the encoder's latents h
        (B, V, n, D) stand in for them. With gradients, for fine-tuning
        (training/evaluate/finetune.py); the frozen readers call it under
        ``torch.no_grad()``.
        """
        B, steps, V = x.shape
        assert steps == self.cfg.seq_len, (
            f"window of {steps} steps, model expects {self.cfg.seq_len}"
        )
        h, _, _, _ = self.encode(fold_channels(x))  # (B*V, P, D)
        p = h if self.codebook is None else self.codebook.probs(h)  # (B*V, P, K|D)
        return p.view(B, V, *p.shape[1:])

    def code_surprise(self, p: Tensor, source: Tensor | None = None) -> Tensor:
        """(B, V) KL(p || the fine predictor's forecast from ``source``), summed over
        tokens: code probabilities p and source (B, V, n, K); source defaults to p
        itself (the served graph's within-window surprise), else e.g. the previous
        window's probabilities."""
        q = p.flatten(0, 1)  # (B*V, n, K)
        src = q if source is None else source.flatten(0, 1)
        logf = self.fine_predictor(src).log_softmax(-1)
        kl = (q * (torch.log(q + 1e-8) - logf)).sum((-1, -2))
        return kl.view(p.shape[0], p.shape[1])

    @torch.no_grad()
    def window_scores(self, x: Tensor, p: Tensor) -> dict[str, Tensor]:
        """Label-free scores of raw windows x (B, T, V) with their code probabilities
        p (B, V, n, K) (:meth:`code_probs`); model/detectors.py says what they mean.

        surprise (B,): KL(p || fine predictor's forecast from p), summed over tokens,
        mean over channels (within the window: the previous one is not available).
        recon (B,): log of the decoder's per-channel MSE on the RevIN scale, mean over
        channels.
        """
        assert self.codebook is not None, "window_scores needs the codebook module"
        B, _, V = x.shape
        q = p.flatten(0, 1)  # (B*V, n, K)
        xc = fold_channels(x)  # (B*V, T)
        xn, _, _ = revin(xc, self.cfg.revin_eps)
        P = self.cfg.n_patches
        x_hat = self.decoder(self.codebook.probs_to_codes(q[:, :P]))  # (B*V, P, L)
        err = ((x_hat - patchify(xn, self.cfg.patch_len)) ** 2).mean((-1, -2))
        return {
            "surprise": self.code_surprise(p).mean(1),
            "recon": torch.log(err + 1e-6).view(B, V).mean(1),
        }

    def forward(
        self, x: Tensor, predict: bool = True, reconstruct: bool = True
    ) -> dict[str, Tensor]:
        """Online branch on W_t. x: (N, T) one-channel windows.

        Returns h, z (N, n, D); probs (N, n, K) with the codebook; x_hat (N, P, L)
        de-normalised (from the P patch tokens), x_hat_norm and x_norm (N, P, L) the
        reconstruction and the window on the RevIN scale; fine (N, n, K|D) logits or
        latents, z_hat (N, n, D); coarse (N, 1, K|D), z_hat_coarse (N, 1, D). n = P patches, plus
        the stats token with ``cfg.stats_token``.
        """
        h, patches, mean, std = self.encode(x)
        out = {"h": h}
        if self.codebook is not None:
            out["probs"], out["z"] = self.codebook(h)  # (N, P, K), (N, P, D)
            pred_in = out["probs"]
        else:
            out["z"] = pred_in = h  # continuous latents
        if reconstruct:
            P = self.cfg.n_patches
            x_hat = self.decoder(out["z"][:, :P])  # (N, P, L), normalised scale
            out["x_hat"] = revin_inverse(x_hat, mean.unsqueeze(-1), std.unsqueeze(-1))
            out["x_hat_norm"], out["x_norm"] = x_hat, patches
        if predict:
            fine = self.fine_predictor(pred_in)  # (N, P, K|D)
            out["fine"] = fine
            out["z_hat"] = self._latent(fine)  # (N, P, D)
            if self.coarse_predictor is not None:
                out["coarse"] = coarse = self.coarse_predictor(pred_in)  # (N, 1, K|D)
                out["z_hat_coarse"] = self._latent(coarse)  # (N, 1, D)
        return out

    def _latent(self, pred: Tensor) -> Tensor:
        """Predictor output -> latent: the soft code embedding of the predicted logits
        (as the paper's bound assumes), or the prediction itself without a codebook."""
        if self.codebook is None:
            return pred
        return self.codebook.probs_to_codes(pred.softmax(-1))


class TargetEncoder(nn.Module):
    """EMA copies of E and Q; encodes W_{t+1} (fine and coarse) in one pass."""

    def __init__(self, model: SCJEPA) -> None:
        super().__init__()
        self.cfg = cfg = model.cfg
        self.encoder = copy.deepcopy(model.encoder)
        self.codebook = copy.deepcopy(model.codebook)
        P = cfg.n_patches
        n = P + 1 if cfg.use_coarse else P
        # tokens: P fine patches, [the coarse patch], [the stats token, last]; the
        # stats token belongs to the fine view (the online branch sees them together)
        m = n + int(cfg.stats_token)
        fine = torch.zeros(m, dtype=torch.bool)
        fine[:P] = True
        fine[n:] = True
        # token indices, not the boolean: boolean indexing syncs the GPU every step
        self.register_buffer("fine_idx", fine.nonzero()[:, 0], persistent=False)
        self.register_buffer("coarse_idx", (~fine).nonzero()[:, 0], persistent=False)
        mask = fine[:, None] == fine[None, :]  # block-diagonal: fine(+stats) | coarse
        self.register_buffer("mask", mask, persistent=False)
        # positions [0..P-1, 0]: the coarse patch sits at position 0
        self.register_buffer("pos", torch.arange(n) % P, persistent=False)
        # the buffers above were made on the CPU; the copies are wherever the model is
        self.to(next(model.parameters()).device)
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> TargetEncoder:
        return super().train(False)  # the target is always in eval mode (no dropout)

    @torch.no_grad()
    def forward(self, x: Tensor) -> dict[str, Tensor]:
        """x: (N, T) W_{t+1} -> z_fine (N, n, D), probs_fine (N, n, K) in the online
        branch's token order (n = ``cfg.n_tokens``), and *_coarse (N, 1, .)."""
        cfg = self.cfg
        xn, mean, std = revin(x, cfg.revin_eps)  # (N, T)
        stats = level_stats(mean, std) if cfg.stats_token else None  # (N, 2)
        views = patchify(xn, cfg.patch_len)  # (N, P, L)
        if cfg.use_coarse:
            # (N, P+1, L): the fine patches and the DownAvg patch
            views = torch.cat([views, down_avg(xn, cfg.n_patches)], dim=1)
            mask = self.mask
        else:
            mask = None
        h = self.encoder(views, self.pos, mask, stats)  # (N, P(+1)(+1), D)
        out = {}
        if self.codebook is not None:
            p, z = self.codebook(h)  # (N, m, K), (N, m, D)
        else:
            p, z = None, h
        fine, coarse = self.fine_idx, self.coarse_idx
        out["z_fine"] = z[:, fine]  # (N, n_tokens, D)
        if p is not None:
            out["probs_fine"] = p[:, fine]
        if cfg.use_coarse:
            out["z_coarse"] = z[:, coarse]  # (N, 1, D)
            if p is not None:
                out["probs_coarse"] = p[:, coarse]
        return out
