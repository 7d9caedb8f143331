"""`scjepa bench cv`: the cross-validation that chooses the served model, run one fit
after another on one thread, then in N forked workers of one thread each
(training/evaluate/parallel.py), on one fold of a real data set; wall time of each, the
speed-up, and whether the out-of-fold risks are equal to the bit.

    scjepa bench cv --dataset daphnet --checkpoint 'runs/daphnet@0/best.pt' --jobs 2 \\
        --json docs/notebook/bench/cv-daphnet.json

Three candidates stand for the served family: the window statistics read by the trees,
the detector-score MLP (kNN, PCA, SC-JEPA's surprise and reconstruction error) and
SC-JEPA fine-tuned with the probe, read by the trees (the slowest). Without
``--checkpoint`` the model is untrained, of the ``improved`` size: the same work.
Each candidate runs four times, its features computed anew each time: one fit after
another on one thread, the same on N threads (what `scjepa evaluate --threads N` did
before the workers), N workers with the features computed here on N threads (what it
does now), and N workers with the features on one thread, whose out-of-fold risks must
equal the first run's to the bit (features on N threads may differ in the last bits).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from training.bench import nonneg_int, positive_int

CANDIDATES = (  # cheapest first
    "stats (trees)",
    "detectors (mlp)",
    "fine-tuned + stats (trees)",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="synthetic", help="as `scjepa evaluate`'s")
    p.add_argument("--root", type=Path, help="data root (default $SCJEPA_DATA)")
    p.add_argument(
        "--checkpoint",
        help="the fold's pre-trained model (default: an untrained `improved` one)",
    )
    p.add_argument("--fold", type=nonneg_int, default=0)
    p.add_argument(
        "--jobs", type=positive_int, default=2, help="worker processes (>= 2)"
    )
    p.add_argument("--cv-blocks", type=positive_int, default=4)
    p.add_argument("--cv-seeds", type=positive_int, default=3)
    p.add_argument(
        "--candidates",
        default=",".join(CANDIDATES),
        help=f"comma-separated, of: {', '.join(CANDIDATES)}",
    )
    p.add_argument("--json", type=Path, help="write the results here")


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from model import SCJEPA
    from training.bench import check_json, load_after, machine, write_json
    from training.data import load_dataset, n_folds
    from training.errors import UserError
    from training.evaluate.baselines import window_stats
    from training.evaluate.detectors import DetectorScores, ProbeInputs
    from training.evaluate.encode import CodeFeatures
    from training.evaluate.finetune import TunedCandidate
    from training.evaluate.parallel import usable_cores
    from training.evaluate.probe import ProbeConfig
    from training.evaluate.protocol import load_encoders, prepare_fold
    from training.evaluate.select import cv_blocks, out_of_fold
    from training.evaluate.warning import event_config
    from training.pretrain.config import load_config

    names = [n.strip() for n in args.candidates.split(",") if n.strip()]
    for n in names:
        if n not in CANDIDATES:
            raise UserError(
                f"--candidates: {n!r} is not one of {', '.join(CANDIDATES)}"
            )
    if args.jobs < 2:
        raise UserError(f"--jobs {args.jobs}: compares 1 worker with N >= 2")
    if args.cv_blocks < 3:
        raise UserError(f"--cv-blocks {args.cv_blocks}: at least 3")
    if args.checkpoint and not Path(args.checkpoint).is_file():
        raise UserError(f"--checkpoint {args.checkpoint}: not found")
    check_json(args.json)
    ds = load_dataset(args.dataset, args.root)
    events = event_config(ds)
    if not 0 <= args.fold < n_folds(ds):
        raise UserError(f"--fold {args.fold}: {ds.name} has {n_folds(ds)} fold(s)")
    fd = prepare_fold(ds, args.fold, events)  # the one fold timed
    if args.checkpoint:
        model = load_encoders(Path(args.checkpoint))[0]
    else:
        torch.manual_seed(0)
        model = SCJEPA(load_config("configs/improved.yaml", []).model)
    blocks = cv_blocks(ds, fd.fold, args.cv_blocks, events.stride)
    if len(blocks) < 3:
        raise UserError(f"{ds.name}: fewer than 3 blocks with windows")
    stats = window_stats(fd.normal)
    seeds = range(args.cv_seeds)
    probe = ProbeConfig()

    def cross_fit(name: str, jobs: int) -> Any:
        """One candidate's cross-validation from scratch: its featurizers built anew
        (they cache per array), so every run pays for the features too."""
        if name == "stats (trees)":
            f = ProbeInputs("stats", None, stats, None)
            return out_of_fold(blocks, f, replace(probe, kind="trees"), seeds, jobs)
        if name == "detectors (mlp)":
            codes = CodeFeatures(model)
            dets = DetectorScores(fd.normal, fd.train.x, codes)
            f = ProbeInputs("knn+pca+surprise+recon", codes, None, dets)
            return out_of_fold(blocks, f, probe, seeds, jobs)
        return TunedCandidate(model, stats).out_of_fold(blocks, probe, seeds, jobs)

    def timed(name: str, threads: int, jobs: int) -> tuple[Any, float]:
        torch.set_num_threads(threads)
        with threadpool_limits(threads):
            t0 = time.perf_counter()
            got = cross_fit(name, jobs)
            return got, time.perf_counter() - t0

    n = args.jobs
    out: dict[str, Any] = {
        "target": "cv",
        "dataset": ds.name,
        "fold": fd.fold,
        "checkpoint": args.checkpoint,
        "blocks": len(blocks),
        "seeds": args.cv_seeds,
        "fits_per_candidate": len(blocks) * args.cv_seeds,
        "windows": {
            "hop": int(sum(len(b.hop) for b in blocks)),
            "dense": int(sum(len(b.dense) for b in blocks)),
        },
        "jobs": n,
        **machine(),  # cpu, cores, load_before, commit
        "cores": usable_cores(),
        "torch": torch.__version__,
        "baseline": "serial_n (and serial_1): the same fits one after another in "
        "this process; ratios speedup_vs_serial_n, speedup_vs_serial_1",
        "runs": "serial_1: one fit after another on 1 thread; serial_n: the same on "
        "N threads (evaluate --threads N before the workers); forked_n: N workers "
        "of 1 thread, the features computed here on N threads (evaluate --threads N "
        "now); forked_1: the same with the features on 1 thread, whose risks must "
        "equal serial_1's to the bit (risks_equal)",
        "candidates": {},
    }
    # warm-up, untimed (imports, first allocations): the cheapest candidate named
    timed(min(names, key=CANDIDATES.index), 1, 1)
    for name in names:
        serial, t_1 = timed(name, 1, 1)
        _, t_n = timed(name, n, 1)
        same, t_f1 = timed(name, 1, n)
        _, t_f = timed(name, n, n)
        equal = all(
            np.array_equal(a, b)
            for kind in ("hop", "dense", "cal")
            for a, b in zip(getattr(serial, kind), getattr(same, kind), strict=True)
        )
        r = {
            "serial_1_s": round(t_1, 2),
            "serial_n_s": round(t_n, 2),
            "forked_1_s": round(t_f1, 2),
            "forked_n_s": round(t_f, 2),
            "speedup_vs_serial_n": round(t_n / t_f, 2),
            "speedup_vs_serial_1": round(t_1 / t_f, 2),
            "risks_equal": equal,
        }
        out["candidates"][name] = r
        print(
            f"cv {name:<28} 1 thread {t_1:7.1f} s, {n} threads {t_n:7.1f} s, "
            f"{n} workers {t_f:7.1f} s: x{r['speedup_vs_serial_n']:.2f} against "
            f"{n} threads; out-of-fold risks "
            + ("equal" if equal else "DIFFER")
            + " to the bit (features on 1 thread)",
            flush=True,
        )
    out["load_after"] = load_after()
    # peak resident memory (Linux: KiB): this process, and the largest worker
    out["peak_rss_mb"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out["worker_peak_rss_mb"] = round(kids / 1024)
    if args.json:
        write_json(args.json, out)
    return 0 if all(r["risks_equal"] for r in out["candidates"].values()) else 1


if __name__ == "__main__":
    from training.cli import main

    sys.exit(main(["bench", "cv", *sys.argv[1:]]))
