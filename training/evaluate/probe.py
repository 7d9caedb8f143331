"""The downstream probe: an MLP on frozen features, BCE, calibrated on validation.

method.md: frozen online encoder + codebook -> p (V, P, K) -> variable-wise max over V
-> flatten -> MLP -> s_hat = P(y_{t+1} = 1). The same probe runs on raw window features
for the baseline rows. Early stopping and calibration use the validation split only.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from training.evaluate.metrics import roc_auc


@dataclass
class ProbeConfig:
    hidden: int = 256
    dropout: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 1e-4
    max_epochs: int = 300
    patience: int = 30  # epochs without a better validation score
    select_on: str = "val_loss"  # or "val_auc"
    class_weight: bool = True  # BCE pos_weight = n_neg / n_pos on the train split
    calibration: str = "platt"  # "platt" | "none"


def build_probe_net(n_features: int, hidden: int, dropout: float) -> nn.Sequential:
    """The probe's MLP; export rebuilds the same module from a saved state dict."""
    return nn.Sequential(
        nn.Linear(n_features, hidden),
        nn.GELU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, 1),
    )


class Platt:
    """sigmoid(a * logit + b), fitted by maximum likelihood on validation logits."""

    def __init__(self) -> None:
        self.a, self.b = 1.0, 0.0

    def fit(self, logits: np.ndarray, y: np.ndarray) -> Platt:
        z = torch.tensor(logits, dtype=torch.float64)
        t = torch.tensor(y, dtype=torch.float64)
        ab = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([ab], max_iter=200, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(ab[0] * z + ab[1], t)
            loss.backward()
            return loss

        opt.step(closure)
        self.a, self.b = (float(v) for v in ab.detach())
        return self

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(self.a * logits + self.b)))


class Probe:
    """MLP probe on precomputed features (N, F)."""

    def __init__(self, n_features: int, cfg: ProbeConfig, seed: int) -> None:
        self.cfg, self.seed = cfg, seed
        torch.manual_seed(seed)
        self.net = build_probe_net(n_features, cfg.hidden, cfg.dropout)
        self.calibrator: Platt | None = None
        self.history: list[dict[str, float]] = []

    def logits(self, f: np.ndarray) -> np.ndarray:
        self.net.eval()
        with torch.no_grad():
            return self.net(torch.from_numpy(f)).squeeze(1).numpy().astype(np.float64)

    def fit(
        self, f_tr: np.ndarray, y_tr: np.ndarray, f_va: np.ndarray, y_va: np.ndarray
    ) -> Probe:
        cfg = self.cfg
        x, t = torch.from_numpy(f_tr), torch.from_numpy(y_tr.astype(np.float32))
        n_pos = max(float(y_tr.sum()), 1.0)
        pos_weight = torch.tensor(
            (len(y_tr) - n_pos) / n_pos if cfg.class_weight else 1.0
        )
        opt = torch.optim.AdamW(
            self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        best, best_state, waited = -np.inf, copy.deepcopy(self.net.state_dict()), 0
        for epoch in range(cfg.max_epochs):
            self.net.train()  # full batch: a few hundred windows
            loss = nn.functional.binary_cross_entropy_with_logits(
                self.net(x).squeeze(1), t, pos_weight=pos_weight
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            z_va = self.logits(f_va)
            va_loss = float(
                nn.functional.binary_cross_entropy_with_logits(
                    torch.from_numpy(z_va),
                    torch.from_numpy(y_va.astype(np.float64)),
                    pos_weight=pos_weight.double(),
                )
            )
            score = -va_loss if cfg.select_on == "val_loss" else roc_auc(y_va, z_va)
            self.history.append(
                {"epoch": epoch, "train_loss": loss.item(), "val_loss": va_loss}
            )
            if score > best:
                best, best_state, waited = (
                    score,
                    copy.deepcopy(self.net.state_dict()),
                    0,
                )
                self.best_epoch = epoch
            elif (waited := waited + 1) >= cfg.patience:
                break
        self.net.load_state_dict(best_state)
        if cfg.calibration == "platt":
            self.calibrator = Platt().fit(self.logits(f_va), y_va)
        return self

    def predict(self, f: np.ndarray) -> np.ndarray:
        """Calibrated P(next window anomalous)."""
        z = self.logits(f)
        return self.calibrator(z) if self.calibrator else 1.0 / (1.0 + np.exp(-z))

    def state(self) -> dict[str, Any]:
        cal = (
            {"method": "platt", "a": self.calibrator.a, "b": self.calibrator.b}
            if self.calibrator
            else {"method": "none"}
        )
        return {
            "config": asdict(self.cfg),
            "seed": self.seed,
            "best_epoch": self.best_epoch,
            "calibration": cal,
        }
