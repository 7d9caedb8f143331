"""The served model: one graph from a raw window batch to a calibrated risk.

    window (B, T, V_in) float32  ->  risk (B,)            calibrated P(next window anomalous)
                                     channel_contrib (B, V_in)  share of the variable-wise
                                                          max won by each input channel
                                     codes (B, P) int64   dominant code per patch
                                     features (B, F)      what the probe reads: the
                                                          export's parity check compares
                                                          them (the service ignores them)

The zero-variance channel mask and RevIN are inside the graph, so training and serving
share one definition. Only this inference-only wrapper is exported (no loss branches).
With ``stats`` the probe reads the code features AND the pooled window statistics that
RevIN removes (model/stats.py); with ``detectors`` it reads label-free detector scores
of the window (model/detectors.py: kNN distance, PCA error, SC-JEPA's surprise and
reconstruction error); ``codes=False`` drops the code features from the probe's input
(the codes still give the ``codes`` and ``channel_contrib`` outputs). All of it is
computed inside the graph from the raw window.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from model.detectors import SCJEPA_DETECTORS, Detectors
from model.scjepa import SCJEPA
from model.stats import WindowStats

OUTPUTS = ["risk", "channel_contrib", "codes", "features"]


class ServedModel(nn.Module):
    kept: Tensor  # (V,) indices of the kept input channels
    platt: Tensor  # (2,) a, b of sigmoid(a * logit + b)

    def __init__(
        self,
        model: SCJEPA,
        probe: nn.Module,
        mask: list[bool],
        platt: tuple[float, float],
        stats: WindowStats | None = None,
        detectors: Detectors | None = None,
        codes: bool = True,
    ) -> None:
        super().__init__()
        self.model = model.eval()
        self.probe = probe.eval()
        self.stats = stats
        self.detectors = detectors
        self.use_codes = codes
        self.n_in = len(mask)
        kept = torch.tensor(
            [i for i, keep in enumerate(mask) if keep], dtype=torch.long
        )
        self.register_buffer("kept", kept, persistent=False)
        self.register_buffer(
            "platt", torch.tensor(platt, dtype=torch.float32), persistent=False
        )

    def forward(self, window: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """window: (B, T, V_in) -> risk (B,), channel_contrib (B, V_in), codes (B, P),
        features (B, F).

        With the stats token the probe reads P + 1 tokens; ``codes`` stays the dominant
        code of each of the P patches (the service's contract).
        """
        x = window.index_select(2, self.kept)  # (B, T, V) kept channels
        p = self.model.code_probs(x)  # (B, V, n, K), n = P (+ the stats token)
        # variable-wise max (B, n, K), and the channel that holds it (B, n, K)
        pooled, winner = p.max(dim=1)
        parts = [pooled.flatten(1)] if self.use_codes else []  # (B, n*K)
        if self.stats is not None:
            parts.append(self.stats(x))  # (B, 18)
        if self.detectors is not None:
            own = None
            if any(n in self.detectors.names for n in SCJEPA_DETECTORS):
                own = self.model.window_scores(x, p)
            parts.append(self.detectors(x, own))  # (B, n_detectors)
        feats = torch.cat(parts, dim=1)
        V = x.shape[2]
        # (B, n, K, V): each max, credited to the channel that won it
        won = nn.functional.one_hot(winner, V).to(pooled.dtype) * pooled.unsqueeze(-1)
        share = won.sum(dim=(1, 2)) / pooled.sum(dim=(1, 2)).unsqueeze(1)  # (B, V)
        # (B, V_in): masked channels contribute 0
        contrib = window.new_zeros(window.shape[0], self.n_in)
        contrib = contrib.index_copy(1, self.kept, share)
        codes = pooled[:, : self.model.cfg.n_patches].argmax(dim=-1)  # (B, P)
        return self.head(feats), contrib, codes, feats

    def head(self, feats: Tensor) -> Tensor:
        """The probe's features (B, F) -> calibrated risk (B,)."""
        logit = self.probe(feats).squeeze(1)  # (B,)
        return torch.sigmoid(self.platt[0] * logit + self.platt[1])


def export_onnx(served: ServedModel, path: Path, opset: int = 18) -> Path:
    """Write ``served`` as ONNX (torch.export-based exporter) with a dynamic batch axis."""
    example = torch.randn(2, served.model.cfg.seq_len, served.n_in)
    batch = torch.export.Dim("batch", min=1, max=65536)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            served,
            (example,),
            str(path),
            input_names=["window"],
            output_names=OUTPUTS,
            dynamic_shapes={"window": {0: batch}},
            opset_version=opset,
            dynamo=True,
            external_data=False,  # one file: the manifest's sha256 covers the weights
            optimize=True,
            verbose=False,
        )
    return path
