"""`scjepa bench infer`: serving speed of a model artifact, onnxruntime vs PyTorch eager.

    scjepa bench infer --artifact artifacts/msl --json docs/bench-infer.json --figure docs/efficiency.png

Both runtimes score the same windows in the same process, so their ratio survives a noisy
machine. PyTorch runs the same architecture rebuilt from the manifest's config (random
weights: speed does not depend on them). FLOPs per window come from PyTorch's flop
counter. The efficiency figure compares SC-JEPA with a PatchTST-style encoder of the same
width and depth (overlapping patches of 16, stride 8) in latency vs batch size and vs
window length, as the paper's inference-efficiency figure does.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from model.config import ModelConfig
from model.export import ServedModel
from model.layers import Block
from model.patching import revin
from model.scjepa import SCJEPA
from training.probe import build_probe_net


def time_fn(fn: Callable[[], Any], seconds: float, warmup: int = 2) -> np.ndarray:
    """Per-call latencies (s) of ``fn`` over about ``seconds`` of repeated calls."""
    for _ in range(warmup):
        fn()
    lat, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(lat) < 5:
        t = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t)
    return np.asarray(lat)


def summary(lat: np.ndarray, batch: int) -> dict[str, float]:
    return {
        "windows_per_s": batch / float(np.median(lat)),
        "p50_ms": 1e3 * float(np.percentile(lat, 50)),
        "p99_ms": 1e3 * float(np.percentile(lat, 99)),
    }


def flops_per_window(model: nn.Module, n_channels: int, seq_len: int) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.randn(1, seq_len, n_channels))
    return float(counter.get_total_flops())


class PatchTSTStyle(nn.Module):
    """Channel-independent Transformer over overlapping patches (len 16, stride 8)."""

    def __init__(
        self,
        d_model: int,
        n_layers: int,
        n_heads: int,
        seq_len: int,
        patch: int = 16,
        stride: int = 8,
    ) -> None:
        super().__init__()
        self.patch, self.stride = patch, stride
        n = (seq_len - patch) // stride + 1
        self.embed = nn.Linear(patch, d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(n, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(n * d_model, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, V = x.shape
        xn, _, _ = revin(x.transpose(1, 2).reshape(B * V, T))  # (B*V, T)
        p = xn.unfold(1, self.patch, self.stride)  # (B*V, n, patch)
        h = self.embed(p) + self.pos  # (B*V, n, D)
        for blk in self.blocks:
            h = blk(h)
        out = self.head(self.ln(h).flatten(1)).view(B, V)  # (B, V)
        return torch.sigmoid(out.max(1).values)  # (B,)


def served_from_config(
    cfg: ModelConfig, n_channels: int, hidden: int = 256
) -> ServedModel:
    probe = build_probe_net(cfg.n_patches * cfg.n_codes, hidden, 0.0)
    return ServedModel(SCJEPA(cfg), probe, [True] * n_channels, (1.0, 0.0)).eval()


def ort_session(path: Path, threads: int, providers: list[str]) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), so, providers=providers)


def bench_artifact(
    artifact: Path, batch_sizes: list[int], seconds: float, threads: int
) -> dict[str, Any]:
    import onnxruntime as ort

    manifest = json.loads((artifact / "manifest.json").read_text())
    cfg = ModelConfig(**manifest["model_config"])
    n_in = len(manifest["channel_mask"])
    n_kept = sum(manifest["channel_mask"])
    torch.set_num_threads(threads)
    eager = served_from_config(cfg, n_in)
    flops = flops_per_window(eager, n_in, cfg.seq_len)
    runtimes: dict[str, Callable[[np.ndarray], Any]] = {}
    sess = ort_session(artifact / "model.onnx", threads, ["CPUExecutionProvider"])
    runtimes["onnxruntime cpu fp32"] = lambda x: sess.run(None, {"window": x})
    if (artifact / "model.int8.onnx").is_file():
        q = ort_session(artifact / "model.int8.onnx", threads, ["CPUExecutionProvider"])
        runtimes["onnxruntime cpu int8"] = lambda x: q.run(None, {"window": x})
    if "CUDAExecutionProvider" in ort.get_available_providers():
        g = ort_session(artifact / "model.onnx", threads, ["CUDAExecutionProvider"])
        if g.get_providers()[0] == "CUDAExecutionProvider":
            runtimes["onnxruntime cuda fp32"] = lambda x: g.run(None, {"window": x})

    def torch_eager(x: np.ndarray) -> Any:
        with torch.inference_mode():
            return eager(torch.from_numpy(x))

    runtimes["pytorch eager cpu"] = torch_eager
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for b in batch_sizes:
        x = rng.normal(size=(b, cfg.seq_len, n_in)).astype(np.float32)
        res = {
            name: summary(time_fn(lambda f=f, x=x: f(x), seconds), b)
            for name, f in runtimes.items()
        }
        for name, r in res.items():
            r["gflop_per_s"] = r["windows_per_s"] * flops / 1e9
            r["vs_pytorch"] = (
                r["windows_per_s"] / res["pytorch eager cpu"]["windows_per_s"]
            )
            rows.append({"batch": b, "runtime": name} | r)
        print(
            f"batch {b:>4}: "
            + "  ".join(
                f"{n} {r['windows_per_s']:.1f} w/s ({r['vs_pytorch']:.2f}x)"
                for n, r in res.items()
            ),
            flush=True,
        )
    return {
        "artifact": str(artifact),
        "channels_in": n_in,
        "channels_kept": n_kept,
        "flops_per_window": flops,
        "threads": threads,
        "rows": rows,
    }


def efficiency_figure(
    cfg: ModelConfig, n_channels: int, path: Path, seconds: float
) -> dict[str, Any]:
    """Latency vs batch size and vs window length: SC-JEPA vs a PatchTST-style encoder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def latency(model: nn.Module, b: int, t: int) -> float:
        x = torch.randn(b, t, n_channels)
        with torch.inference_mode():
            return 1e3 * float(np.median(time_fn(lambda: model(x), seconds)))

    out: dict[str, Any] = {"batch": {}, "length": {}}
    batches, lengths = [1, 4, 16, 64], [100, 200, 400, 800]
    for name, make in (
        (
            "SC-JEPA",
            lambda t: served_from_config(
                ModelConfig(**(cfg.to_dict() | {"seq_len": t})), n_channels
            ),
        ),
        (
            "PatchTST-style",
            lambda t: PatchTSTStyle(cfg.d_model, cfg.n_layers, cfg.n_heads, t).eval(),
        ),
    ):
        m100 = make(100)
        out["batch"][name] = [latency(m100, b, 100) for b in batches]
        out["length"][name] = [latency(make(t), 16, t) for t in lengths]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name in out["batch"]:
        a.plot(batches, out["batch"][name], "o-", label=name)
        b.plot(lengths, out["length"][name], "o-", label=name)
    a.set(
        xscale="log",
        yscale="log",
        xlabel="batch size (windows of 100)",
        ylabel="latency (ms)",
        title=f"Latency vs batch ({n_channels} channels)",
    )
    b.set(
        xlabel="window length (steps)",
        ylabel="latency (ms)",
        title="Latency vs window length (batch 16)",
    )
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return out | {"batches": batches, "lengths": lengths}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--artifact",
        type=Path,
        required=True,
        help="folder with model.onnx + manifest.json",
    )
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128,256")
    p.add_argument(
        "--seconds",
        type=float,
        default=2.0,
        help="timing budget per runtime and batch size",
    )
    p.add_argument(
        "--threads", type=int, default=2, help="intra-op threads for both runtimes"
    )
    p.add_argument("--json", type=Path, help="write results here")
    p.add_argument("--figure", type=Path, help="write the efficiency figure (PNG) here")


def run(args: argparse.Namespace) -> int:
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    res = bench_artifact(args.artifact, sizes, args.seconds, args.threads)
    if args.figure:
        manifest = json.loads((args.artifact / "manifest.json").read_text())
        cfg = ModelConfig(**manifest["model_config"])
        res["efficiency"] = efficiency_figure(
            cfg, len(manifest["channel_mask"]), args.figure, args.seconds / 2
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0
