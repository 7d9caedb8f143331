"""`scjepa bench TARGET`: throughput and peak memory of the project's hot paths.

    scjepa bench train --config configs/paper.yaml --threads 2 --json bench.json
    scjepa bench infer ... / scjepa bench serve ...   (infer.py, serve.py)
    scjepa bench soak --minutes 30 / scjepa bench streams --streams 100000 (soak.py,
    streams.py)
    scjepa bench cv --dataset daphnet --checkpoint CKPT --jobs 2 (cv.py)

``train`` times the full pre-training step (online forward, EMA target pass, losses,
backward, clipping, Adam, EMA update) on random pairs, after a warm-up, and reports
pairs/s (median step, robust to other jobs on a shared machine; the mean too) and peak
memory (process RSS of a fresh process per preset; CUDA max allocated on GPU).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import time
from importlib import import_module
from pathlib import Path
from typing import Any


def bench_train(
    config: str,
    device: str = "cpu",
    steps: int = 30,
    warmup: int = 5,
    threads: int = 0,
    amp: bool = False,
) -> dict[str, Any]:
    """Time ``steps`` training steps after ``warmup``; pairs/s from the median step
    (robust to other jobs on a shared machine) and from the mean."""
    import torch

    from model import SCJEPA
    from training.pretrain.config import load_config
    from training.pretrain.ema import make_target
    from training.pretrain.train import make_optimizer, resolve_device, train_step

    cfg = load_config(config, [f"run.amp={str(amp).lower()}"])
    if threads:
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    torch.manual_seed(0)
    model = SCJEPA(cfg.model).to(dev)
    target = make_target(model)
    opt = make_optimizer(model, cfg)
    B, T = cfg.optim.batch_size, cfg.model.seq_len
    batches = torch.randn(4, B, 2, T, device=dev).cumsum(-1)  # random walks
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def step(i: int) -> float:
        t0 = time.perf_counter()
        train_step(model, target, opt, batches[i % 4], cfg, 0.5, autocast)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)  # CPU-GPU sync point: time the whole step
        return time.perf_counter() - t0

    for i in range(warmup):
        step(i)
    times = sorted(step(i) for i in range(steps))
    median, mean = times[len(times) // 2], sum(times) / len(times)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {
        "target": "train",
        "config": config,
        "device": str(dev),
        "threads": torch.get_num_threads(),
        "batch_size": B,
        "amp_bf16": amp,
        "steps": steps,
        "pairs_per_s": round(B / median, 1),
        "pairs_per_s_mean": round(B / mean, 1),
        "step_ms": round(1000 * median, 2),
        "peak_rss_mb": round(rss_mb, 1),
        "cuda_max_alloc_mb": (
            round(torch.cuda.max_memory_allocated(dev) / 2**20, 1)
            if dev.type == "cuda"
            else None
        ),
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 3),
        "torch": torch.__version__,
    }


# target -> (module with add_arguments/run, help); "train" lives here
TARGETS: dict[str, tuple[str, str]] = {
    "train": (__name__, "pre-training step: pairs/s and peak memory"),
    "infer": ("training.bench.infer", "serving speed: onnxruntime vs PyTorch eager"),
    "serve": ("training.bench.serve", "the running service over loopback"),
    "soak": (
        "training.bench.soak",
        "steady mixed load for N minutes: memory over time",
    ),
    "streams": ("training.bench.streams", "many streams: memory per stream, the TTL"),
    "cv": (
        "training.bench.cv",
        "evaluate's cross-validation: one worker against N, same risks",
    ),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="target", required=True, metavar="target")
    for name, (module, help_line) in TARGETS.items():
        sp = sub.add_parser(name, help=help_line, description=help_line)
        if name == "train":
            add_train_arguments(sp)
        else:
            import_module(module).add_arguments(sp)


def run(args: argparse.Namespace) -> int:
    if args.target != "train":
        return int(import_module(TARGETS[args.target][0]).run(args) or 0)
    return run_train(args)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        action="append",
        help="preset(s) to time (repeatable; default: paper and fast)",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (both if CUDA)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--amp", action="store_true", help="bf16 autocast (CPU or CUDA)")
    p.add_argument("--json", type=Path, help="write the results here")


def run_train(args: argparse.Namespace) -> int:
    import torch

    configs = args.config or ["configs/paper.yaml", "configs/fast.yaml"]
    devices = [args.device]
    if args.device == "auto":
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = []
    for dev in devices:
        for config in configs:
            kw = {"steps": args.steps, "warmup": args.warmup, "threads": args.threads}
            # a fresh process per run: peak RSS is per preset, not cumulative
            with mp.get_context("spawn").Pool(1) as pool:
                r = pool.apply(bench_train, (config, dev), kw | {"amp": args.amp})
            results.append(r)
            mem = r["cuda_max_alloc_mb"] or r["peak_rss_mb"]
            print(
                f"train {Path(config).stem:<6} {r['device']:<5} "
                f"threads={r['threads']} {r['pairs_per_s']:>8.1f} pairs/s "
                f"(median {r['step_ms']:.1f} ms/step of {r['batch_size']}; mean "
                f"{r['pairs_per_s_mean']:.1f} pairs/s), peak {mem:.0f} MB"
                + (" [bf16 autocast]" if args.amp else "")
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    from training.cli import main

    sys.exit(main(["bench", *sys.argv[1:]]))
