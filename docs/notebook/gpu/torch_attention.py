"""The paper-size model in PyTorch on a GPU, eager fp16 at one batch size: where the
time goes (torch profiler) and which attention formulation suits its 5-token
sequences; torch.compile beside them (benchmarks notebook, 2026-11-27).

    python docs/notebook/gpu/torch_attention.py ARTIFACT/manifest.json 4096 OUT_DIR

Random weights (speed does not depend on them); the input already on the GPU.
Writes OUT_DIR/torch-attention.json and OUT_DIR/torch-ops.txt.
"""

import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from model.config import ModelConfig
from training.bench.infer import served_from_config

manifest, batch, out = (
    json.loads(Path(sys.argv[1]).read_text()),
    int(sys.argv[2]),
    Path(sys.argv[3]),
)
dev = "cuda" if torch.cuda.is_available() else "cpu"
cfg = ModelConfig(**manifest["model_config"])
model = served_from_config(cfg, manifest["channel_mask"]).to(dev).eval()
x = torch.randn(batch, cfg.seq_len, len(manifest["channel_mask"]), device=dev)
half = torch.float16 if dev == "cuda" else torch.bfloat16
res: dict[str, Any] = {
    "batch": batch,
    "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
}
sdpa = F.scaled_dot_product_attention


def sync() -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def windows_per_s(fn: Callable[[], Any], n: int = 8) -> float:
    for _ in range(2):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return round(batch * n / (time.perf_counter() - t), 1)


def matmul_attention(q, k, v, attn_mask=None, dropout_p=0.0):
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    return s.softmax(-1) @ v


variants = [
    ("sdpa default", None, sdpa),
    ("sdpa math", SDPBackend.MATH, sdpa),
    ("sdpa memory-efficient", SDPBackend.EFFICIENT_ATTENTION, sdpa),
    ("explicit matmul-softmax-matmul", None, matmul_attention),
]
with torch.inference_mode(), torch.autocast(dev, dtype=half):
    for name, backend, fn in variants:
        F.scaled_dot_product_attention = fn  # model/layers.py calls it through F
        try:
            with sdpa_kernel(backend) if backend else contextlib.nullcontext():
                res[name] = windows_per_s(lambda: model(x))
        except RuntimeError as e:
            res[name] = f"failed: {str(e)[:200]}"
        finally:
            F.scaled_dot_product_attention = sdpa
        print(name, res[name], flush=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            model(x)
        sync()
    key = "cuda_time_total" if dev == "cuda" else "cpu_time_total"
    (out / "torch-ops.txt").write_text(
        prof.key_averages().table(sort_by=key, row_limit=40)
    )
    compiled = torch.compile(model)
    compiled(x)
    res["torch.compile (default mode)"] = windows_per_s(lambda: compiled(x))
with torch.inference_mode():
    res["eager fp32 (no autocast)"] = windows_per_s(lambda: model(x))
(out / "torch-attention.json").write_text(json.dumps(res, indent=2))
print(json.dumps(res))
