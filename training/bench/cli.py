"""`scjepa bench TARGET`: throughput and peak memory of the project's hot paths.

    scjepa bench train --config configs/paper.yaml --threads 2 --json bench.json
    scjepa bench infer ... / scjepa bench serve ...   (infer.py, serve.py)
    scjepa bench soak --minutes 30 / scjepa bench streams --streams 100000 (soak.py,
    streams.py)
    scjepa bench cv --dataset daphnet --checkpoint CKPT --jobs 2 (cv.py)

``train`` times the full pre-training step (online forward, EMA target pass, losses,
backward, clipping, Adam, EMA update) on random pairs, after a warm-up, and reports
pairs/s (median step, robust to other jobs on a shared machine; the mean too) and peak
memory (process RSS of a fresh process per preset; CUDA max allocated on GPU). Its
baseline: an FP32 matrix product on the same threads and device, one call after each
step; the step's FLOPs (PyTorch's counter) per second as a share of that product's, a
ratio that holds on a loaded machine where pairs/s do not.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import Any

from training.bench import nonneg_int, positive_int


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

    from torch.utils.flop_counter import FlopCounterMode

    from training.bench.infer import sgemm

    with FlopCounterMode(display=False) as counter:  # one step, counted: a warm-up
        train_step(model, target, opt, batches[0], cfg, 0.5, autocast)
    step_flops = float(counter.get_total_flops())
    mm_n = 1024 if dev.type == "cpu" else 8192
    mm, mm_flops = sgemm(dev.type, n=mm_n)

    def peak() -> float:
        t0 = time.perf_counter()
        mm()
        return time.perf_counter() - t0

    for i in range(warmup):
        step(i)
        peak()
    times, mm_times = [], []
    for i in range(steps):  # in alternation: both see the same load
        times.append(step(i))
        mm_times.append(peak())
    times.sort()
    median, mean = times[len(times) // 2], sum(times) / len(times)
    mm_median = sorted(mm_times)[len(mm_times) // 2]
    gflops, peak_gflops = step_flops / median / 1e9, mm_flops / mm_median / 1e9
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
        "gflop_per_step": round(step_flops / 1e9, 3),
        "gflop_per_s": round(gflops, 2),
        "baseline": f"fp32 matmul {mm_n}x{mm_n} @ {mm_n}x{mm_n} on the same threads "
        "and device, one call after each timed step",
        "baseline_gflop_per_s": round(peak_gflops, 2),
        "share_of_baseline": round(gflops / peak_gflops, 4),
        "torch": torch.__version__,
    }


# target -> (module with add_arguments/run, help); "train" lives here
TARGETS: dict[str, tuple[str, str]] = {
    "train": (
        __name__,
        "pre-training step: pairs/s, peak memory, share of a matmul baseline",
    ),
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
    if getattr(args, "json", None) is not None:
        from training.bench import check_json

        check_json(args.json)  # before the run, not after it
    with stopped_as_interrupted():
        if args.target != "train":
            return int(import_module(TARGETS[args.target][0]).run(args) or 0)
        return run_train(args)


@contextmanager
def stopped_as_interrupted() -> Iterator[None]:
    """SIGTERM and SIGHUP (``kill``, ``timeout``, a closed terminal) stop a bench as
    Ctrl-C does: as KeyboardInterrupt, so the context managers that own its
    redis-server, service processes and workers stop them. Python's default for these
    signals ends the process at once, leaving those children running. A forked child
    (a worker) keeps the default: the handler re-raises the signal there."""
    owner = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked worker: die as before
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        action="append",
        help="preset(s) to time (repeatable; default: paper and fast)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda (or cuda:N), or auto (both if CUDA)",
    )
    p.add_argument(
        "--threads", type=nonneg_int, default=0, help="torch threads (0 = default)"
    )
    p.add_argument("--steps", type=positive_int, default=30, help="timed steps")
    p.add_argument("--warmup", type=nonneg_int, default=5)
    p.add_argument("--amp", action="store_true", help="bf16 autocast (CPU or CUDA)")
    p.add_argument("--json", type=Path, help="write the results here")


def run_train(args: argparse.Namespace) -> int:
    import torch

    from training.bench import load_after, machine, write_json
    from training.errors import UserError

    configs = args.config or ["configs/paper.yaml", "configs/fast.yaml"]
    for config in configs:
        if not Path(config).is_file():
            raise UserError(f"--config {config}: not found")
    devices = [args.device]
    if args.device == "auto":
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    elif args.device != "cpu":
        try:
            ok = torch.device(args.device).type == "cuda"
        except RuntimeError:
            ok = False
        if not ok:
            raise UserError(f"--device {args.device!r}: cpu, cuda, cuda:N or auto")
        if not torch.cuda.is_available():
            raise UserError(f"--device {args.device}: PyTorch sees no CUDA device here")
    results = []
    for dev in devices:
        for config in configs:
            ran_on = machine()  # the load just before this preset's run
            kw = {"steps": args.steps, "warmup": args.warmup, "threads": args.threads}
            # a fresh process per run: peak RSS is per preset, not cumulative
            with mp.get_context("spawn").Pool(1) as pool:
                r = pool.apply(bench_train, (config, dev), kw | {"amp": args.amp})
            results.append(ran_on | r | {"load_after": load_after()})
            mem = r["cuda_max_alloc_mb"] or r["peak_rss_mb"]
            print(
                f"train {Path(config).stem:<6} {r['device']:<5} "
                f"threads={r['threads']} {r['pairs_per_s']:>8.1f} pairs/s "
                f"(median {r['step_ms']:.1f} ms/step of {r['batch_size']}; mean "
                f"{r['pairs_per_s_mean']:.1f} pairs/s), "
                f"{100 * r['share_of_baseline']:.0f}% of the matmul baseline's "
                f"{r['baseline_gflop_per_s']:.0f} GFLOP/s, peak {mem:.0f} MB"
                + (" [bf16 autocast]" if args.amp else "")
            )
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    from training.cli import main

    sys.exit(main(["bench", *sys.argv[1:]]))
