"""The served model: one graph from a raw window batch to a calibrated risk.

    window (B, T, V_in) float32  ->  risk (B,)            calibrated P(next window anomalous)
                                     channel_contrib (B, V_in)  share of the variable-wise
                                                          max won by each input channel
                                     codes (B, P) int64   dominant code per patch
                                     features (B, F)      what the probe reads: the
                                                          export's parity check compares
                                                          them (the service ignores them)
                                     novelty (B,)         with a monitor only: how unlike
                                                          the training data's normal
                                                          windows the window is, in [0, 1]

The zero-variance channel mask and RevIN are inside the graph, so training and serving
share one definition. Only this inference-only wrapper is exported (no loss branches).
With ``stats`` the probe reads the code features AND the pooled window statistics that
RevIN removes (model/stats.py); with ``detectors`` it reads label-free detector scores
of the window (model/detectors.py: kNN distance, PCA error, SC-JEPA's surprise and
reconstruction error); ``codes=False`` drops the code features from the probe's input
(the codes still give the ``codes`` and ``channel_contrib`` outputs). All of it is
computed inside the graph from the raw window.

The optional ``novelty`` monitor (:class:`NoveltyMonitor`) is the input-drift signal:
the kNN and PCA detector scores of the raw window, ranked among normal calibration
windows as `scjepa calibrate`'s label-free risk (model/rarity.py), whatever the probe
reads, so it means the same in every artifact: about 0.5 for a typical normal window,
near 1 for one unlike any of them.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from model.detectors import SCJEPA_DETECTORS, Detectors
from model.rarity import Rarity
from model.scjepa import SCJEPA
from model.stats import WindowStats

OUTPUTS = ["risk", "channel_contrib", "codes", "features"]
NOVELTY = "novelty"  # the monitor's output, after OUTPUTS, where the graph has one


class NoveltyMonitor(nn.Module):
    """Raw window (B, T, V kept channels) -> novelty (B,): sigmoid of the
    :class:`~model.rarity.Rarity` logit of the window's z-scored detector scores,
    i.e. its smoothed rank among the normal calibration windows."""

    def __init__(self, detectors: Detectors, rarity: Rarity) -> None:
        super().__init__()
        assert not set(detectors.names) & set(SCJEPA_DETECTORS), "raw-window only"
        self.detectors = detectors
        self.rarity = rarity

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> NoveltyMonitor:
        """The monitor of a probe file's ``novelty`` record (training/calibrate.py,
        :func:`~training.calibrate.novelty_record`)."""
        names = tuple(str(record["detectors"]).split("+"))
        return cls(
            Detectors(names, record["params"]), Rarity.from_state(record["rarity"])
        ).eval()

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.rarity(self.detectors(x))).squeeze(1)


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
        novelty: NoveltyMonitor | None = None,
    ) -> None:
        super().__init__()
        self.model = model.eval()
        self.probe = probe.eval()
        self.stats = stats
        self.detectors = detectors
        self.novelty = novelty
        self.use_codes = codes
        self.n_in = len(mask)
        kept = torch.tensor(
            [i for i, keep in enumerate(mask) if keep], dtype=torch.long
        )
        self.register_buffer("kept", kept, persistent=False)
        self.register_buffer(
            "platt", torch.tensor(platt, dtype=torch.float32), persistent=False
        )

    @property
    def outputs(self) -> list[str]:
        """The graph's output names, in :meth:`forward`'s order."""
        return OUTPUTS + ([NOVELTY] if self.novelty is not None else [])

    def forward(self, window: Tensor) -> tuple[Tensor, ...]:
        """window: (B, T, V_in) -> risk (B,), channel_contrib (B, V_in), codes (B, P),
        features (B, F) [, novelty (B,) with a monitor].

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
        if self.novelty is not None:
            return self.head(feats), contrib, codes, feats, self.novelty(x)
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
            output_names=served.outputs,
            dynamic_shapes={"window": {0: batch}},
            opset_version=opset,
            dynamo=True,
            external_data=False,  # one file: the manifest's sha256 covers the weights
            optimize=True,
            verbose=False,
        )
    return path
