"""A tiny real artifact honouring the serving contract (stand-in for training's exporter).

window (B, T, V_in) -> mask -> per-window/channel RevIN stats -> features -> variable-wise
max -> linear -> sigmoid = risk; the winning channel's share -> channel_contrib; a small
projection's argmax per patch -> codes. Exported with torch.onnx.export (dynamo=False).
With a ``novelty`` record, a fourth output "novelty" (the input-drift monitor's place
in the contract): the window's mean absolute kept value / 10, clipped to [0, 1], so a
test picks a window's novelty by its values (constant 9.95: 0.995).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import torch
from torch import Tensor, nn

from service.manifest import Manifest, Novelty, write_manifest


class TinyServed(nn.Module):
    def __init__(self, mask: list[bool], window: int = 100, n_patches: int = 5) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.n_in = len(mask)
        self.n_patches = n_patches
        kept = torch.tensor([i for i, k in enumerate(mask) if k], dtype=torch.long)
        self.register_buffer("kept", kept)
        self.register_buffer("w", torch.randn(2, generator=g))
        self.register_buffer("proj", torch.randn(window // n_patches, 8, generator=g))

    def forward(self, window: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = window.index_select(2, self.kept)  # (B, T, V)
        mean = x.mean(dim=1)  # (B, V)
        std = (x.var(dim=1, unbiased=False) + 1e-5).sqrt()  # (B, V)
        feat = torch.stack([mean.abs(), std], dim=-1)  # (B, V, 2)
        score = (feat * self.w).sum(-1)  # (B, V)
        pooled, winner = score.max(dim=1)  # (B,), (B,)
        risk = torch.sigmoid(pooled)  # (B,)
        share = nn.functional.one_hot(winner, x.shape[2]).to(x.dtype)  # (B, V)
        contrib = window.new_zeros(window.shape[0], self.n_in).index_copy(
            1, self.kept, share
        )  # (B, V_in)
        z = (x - x.mean(dim=1, keepdim=True)) / std.unsqueeze(1)  # (B, T, V)
        patches = z.mean(dim=2).reshape(
            window.shape[0], self.n_patches, -1
        )  # (B, P, L)
        codes = (patches @ self.proj).argmax(dim=-1)  # (B, P)
        return risk, contrib, codes


class TinyNovelty(TinyServed):
    def forward(self, window: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # type: ignore[override]
        risk, contrib, codes = super().forward(window)
        x = window.index_select(2, self.kept)
        novelty = (x.abs().mean(dim=(1, 2)) / 10).clamp(0.0, 1.0)  # (B,)
        return risk, contrib, codes, novelty


NOVELTY = Novelty(
    detectors="knn+pca",
    level=0.99,
    expected_share=0.01,
    reference_windows=400,
    calibration_windows=300,
)


def build_artifact(
    directory: Path,
    channels: list[str] | None = None,
    mask: list[bool] | None = None,
    threshold: float = 0.5,
    int8: bool = False,
    input_name: str = "window",  # anything else breaks the contract (for tests)
    novelty: Novelty | None = None,  # the manifest's input-drift monitor record
    novelty_output: bool | None = None,  # default: the graph has it when recorded
) -> Manifest:
    """Export TinyServed (TinyNovelty with ``novelty_output``) to
    ``directory/model.onnx`` and write a valid manifest."""
    channels = channels or ["a", "b", "c", "flat"]
    mask = mask or [True] * (len(channels) - 1) + [False]
    directory.mkdir(parents=True, exist_ok=True)
    with_novelty = novelty is not None if novelty_output is None else novelty_output
    model = (TinyNovelty if with_novelty else TinyServed)(mask).eval()
    outputs = ["risk", "channel_contrib", "codes"] + ["novelty"] * with_novelty
    torch.onnx.export(
        model,
        (torch.randn(2, 100, len(channels)),),
        str(directory / "model.onnx"),
        input_names=[input_name],
        output_names=outputs,
        dynamic_axes={k: {0: "batch"} for k in (input_name, *outputs)},
        opset_version=17,
        dynamo=False,
    )
    if int8:  # same graph under the int8 name: enough to test the file selection
        (directory / "model.int8.onnx").write_bytes(
            (directory / "model.onnx").read_bytes()
        )
    manifest = Manifest(
        name="tiny",
        version="0.0.1",
        created_at=datetime.now(UTC),
        git_commit="test",
        model_config={"window": 100, "n_patches": 5},
        channels=channels,
        n_channels=len(channels),
        channel_mask=mask,
        window=100,
        hop=100,
        threshold=threshold,
        calibration={"method": "none", "params": {}},
        eval_metrics={"f1": 0.0},
        training_data_fingerprint="synthetic-test",
        novelty=novelty,
    )
    return write_manifest(directory, manifest)
