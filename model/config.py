"""Model hyper-parameters: one dataclass, stored in every checkpoint.

``SCJEPA(ModelConfig(**ckpt["config"]))`` is all a loader needs. Defaults are the
numbers of docs/method.md (D = 256, K = 128, tau = 0.1, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class ModelConfig:
    # -- input
    seq_len: int = 100  # T_w, steps per window (= training.data.WINDOW)
    patch_len: int = 20  # L
    revin_eps: float = 1e-5
    # -- encoder
    d_model: int = 256  # D
    n_layers: int = 6
    n_heads: int = 8
    ffn_mult: int = 4  # FFN hidden = ffn_mult * D
    dropout: float = 0.1
    tok_channels: int = 16  # conv channels of the patch tokenizer
    tok_pool: int = 4  # conv features pooled to tok_pool steps: 16 * 4 = 64 -> 32 -> D
    tok_hidden: int = 32
    # -- codebook
    n_codes: int = 128  # K
    tau: float = 0.1  # cosine-softmax temperature (tau = 1 leaves codes near uniform)
    # -- predictors (fine and coarse share the trunk shape)
    pred_dim: int = 128
    pred_layers: int = 2
    pred_heads: int = 4
    # -- ablation switches of the architecture (loss switches live in LossConfig)
    use_codebook: bool = True  # False: continuous latents, MSE prediction, no KL
    use_coarse: bool = True  # False: no DownAvg view, no coarse predictor
    # -- beyond the paper: the level and scale RevIN removes (the window's mean and log
    # std per channel) enter the encoder as one extra token, on both branches, so the
    # predictor must forecast W_{t+1}'s level too (docs/reference/ablations.md).
    stats_token: bool = False

    def __post_init__(self) -> None:
        assert self.seq_len % self.patch_len == 0, (
            "seq_len must be a multiple of patch_len"
        )
        assert self.d_model % self.n_heads == 0, "d_model must divide by n_heads"
        assert self.pred_dim % self.pred_heads == 0, (
            "pred_dim must divide by pred_heads"
        )

    @property
    def n_patches(self) -> int:  # P
        return self.seq_len // self.patch_len

    @property
    def n_tokens(self) -> int:  # encoder tokens per channel: P (+ the stats token)
        return self.n_patches + int(self.stats_token)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
