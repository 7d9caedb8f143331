"""The pre-training loop behind `scjepa pretrain` (training/pretrain/train.py holds the
command line and imports this module only when it runs, so `--help` needs no PyTorch).

The run dir gets config.yaml (resolved), metrics.jsonl (one line per epoch: every loss
term, codebook usage, collapse diagnostics), last.pt (resume), best.pt (model
selection on the val loss, from optim.select_from on; early stopping after
optim.patience epochs without improvement), usage.png and curves.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model import SCJEPA, TargetEncoder
from model.codebook import pca_variance_ratio, usage_stats
from training.data import Pairs
from training.errors import UserError
from training.pretrain import distributed
from training.pretrain.checkpoint import load_checkpoint, save_checkpoint
from training.pretrain.config import TrainConfig, save_config
from training.pretrain.ema import ema_update, make_target
from training.pretrain.losses import lambda_r, scjepa_loss


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("run.device=cuda but no CUDA device is available")
    return torch.device(name)


def load_pairs(
    names: list[str],
    root: str | None,
    cfg: TrainConfig,
    args: argparse.Namespace | None = None,
) -> Pairs:
    """Pre-training pairs of one or several data sets (cross-domain: pooled); ``args``
    carries the ``--dataset csv`` options (training.data.cli.add_table_arguments)."""
    from training.data import load_dataset, pretrain_pairs
    from training.data.cli import table_options

    def kwargs(n: str) -> dict[str, Any]:
        if n == "synthetic":
            return {"seed": cfg.data.seed}
        return table_options(args, n) if args is not None else {}

    sets = [load_dataset(n, root=root, **kwargs(n)) for n in names]
    return pretrain_pairs(
        sets,
        window=cfg.data.window,
        val_frac=cfg.data.val_frac,
        min_train=cfg.optim.batch_size,
    )


def make_optimizer(model: SCJEPA, cfg: TrainConfig) -> torch.optim.Adam:
    """Adam over the trainable parameters; fused kernel (one op for all tensors)."""
    params = [p for p in model.parameters() if p.requires_grad]
    o = cfg.optim
    return torch.optim.Adam(params, lr=o.lr, weight_decay=o.weight_decay, fused=True)


def train_step(
    model: nn.Module,
    target: TargetEncoder,
    opt: torch.optim.Optimizer,
    batch: Tensor,
    cfg: TrainConfig,
    lam: float,
    amp: AbstractContextManager[Any],
) -> dict[str, Tensor]:
    """One optimiser step on a (B, 2, T) batch of pairs; returns the named loss terms.

    ``model``: the SCJEPA, or its DistributedDataParallel wrapper under torchrun.
    """
    x, x_next = batch[:, 0], batch[:, 1]  # (B, T) each
    # Step 1. Forward: online branch on W_t, EMA target on W_{t+1} (one pass)
    with amp:
        online = model(x, predict=cfg.loss.pred, reconstruct=cfg.loss.rec)
        tgt = target(x_next) if cfg.loss.pred else None
        terms = scjepa_loss(online, tgt, x, cfg.loss, lam)
    # Step 2. Backward & step
    opt.zero_grad(set_to_none=True)
    terms["loss"].backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
    opt.step()
    # Step 3. EMA update of the target encoder and codebook
    ema_update(target, _unwrap(model), cfg.optim.ema)
    return terms


def _unwrap(model: nn.Module) -> SCJEPA:
    """The SCJEPA inside a DistributedDataParallel wrapper (or the model itself)."""
    inner = getattr(model, "module", model)
    if not isinstance(inner, SCJEPA):
        raise TypeError(f"expected an SCJEPA model, got {type(inner).__name__}")
    return inner


@torch.no_grad()
def estimate_val(
    model: SCJEPA, target: TargetEncoder, val: Tensor, cfg: TrainConfig, lam: float
) -> dict[str, Any]:
    """Mean loss terms over the validation pairs, plus codebook/collapse diagnostics.

    ``val_select`` (model selection) is the total loss with lambda_r fixed at its final
    value, so epochs stay comparable while lambda_r anneals.
    """
    model.eval()
    sums: dict[str, float] = {}
    probs, zs, hs = [], [], []
    bs = cfg.optim.batch_size * 4
    for i in range(0, len(val), bs):
        b = val[i : i + bs]
        online = model(b[:, 0], predict=cfg.loss.pred, reconstruct=cfg.loss.rec)
        tgt = target(b[:, 1]) if cfg.loss.pred else None
        t = scjepa_loss(online, tgt, b[:, 0], cfg.loss, lam)
        t["select"] = t["loss"] - lam * t["rec"] + cfg.loss.rec_end * t["rec"]
        for k, v in t.items():
            sums[k] = sums.get(k, 0.0) + v.item() * len(b)
        zs.append(online["z"].float().cpu())
        hs.append(online["h"].float().cpu())
        if "probs" in online:
            probs.append(online["probs"].float().cpu())
    model.train()
    out: dict[str, Any] = {f"val_{k}": v / max(len(val), 1) for k, v in sums.items()}
    if zs:
        out |= pca_variance_ratio(torch.cat(zs)[:20000])
        # the encoder's h itself: near 1 = every window's h on one line
        out["h_pc1_var"] = pca_variance_ratio(torch.cat(hs)[:20000], (1,))["pc1_var"]
    if probs:
        out |= usage_stats(torch.cat(probs))
    return out


def pretrain(
    cfg: TrainConfig, pairs: Pairs, out: str | Path, resume: bool = False
) -> dict[str, Any]:
    """Train on ``pairs`` (.train/.val arrays (N, 2, T)); returns the last metrics row."""
    out = Path(out)
    dd = distributed.setup(cfg.run.device)
    device = resolve_device(cfg.run.device)
    if device.type == "cuda" and dd.world > 1:
        device = torch.device("cuda", dd.local_rank)
    threads = cfg.run.threads or max((os.cpu_count() or 1) // dd.world, 1)
    torch.set_num_threads(threads)
    torch.manual_seed(cfg.run.seed)
    if len(pairs.train) < cfg.optim.batch_size or len(pairs.val) == 0:
        raise UserError(
            f"too few pre-training pairs: {len(pairs.train)} train (one batch is "
            f"{cfg.optim.batch_size}), {len(pairs.val)} validation; give longer "
            "series or a smaller optim.batch_size"
        )

    # -- model, EMA target, optimiser (all ranks start from the same seed)
    model = SCJEPA(cfg.model).to(device)
    target = make_target(model)
    opt = make_optimizer(model, cfg)
    start_epoch, step, best, bad = 0, 0, math.inf, 0
    if resume and (out / "last.pt").is_file():
        ck = load_checkpoint(out / "last.pt", map_location=str(device))
        model.load_state_dict(ck["model"])
        target.load_state_dict(ck["target"])
        opt.load_state_dict(ck["optimizer"])
        start_epoch, step, best, bad = ck["epoch"], ck["step"], ck["best"], ck["bad"]
        torch.set_rng_state(ck["rng"]["torch"])
        if device.type == "cuda" and ck["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(ck["rng"]["cuda"], device)
    elif resume:
        raise UserError(f"{out / 'last.pt'}: nothing to resume from")
    ddp: nn.Module = model
    if dd.world > 1:
        unused = not (cfg.loss.pred and cfg.loss.rec)
        ids = [device.index] if device.type == "cuda" else None
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=ids, find_unused_parameters=unused
        )
    # bf16 autocast: CUDA, or CPUs with AVX512-BF16/AMX (docs/notebook/benchmarks.md)
    use_amp = cfg.run.amp
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp)

    train = torch.from_numpy(np.ascontiguousarray(pairs.train, dtype=np.float32))
    val = torch.from_numpy(np.ascontiguousarray(pairs.val, dtype=np.float32)).to(device)
    per_rank = cfg.optim.batch_size // dd.world  # the global batch stays batch_size
    steps_per_epoch = math.ceil(len(train) // dd.world / per_rank)
    total_steps = cfg.optim.epochs * steps_per_epoch
    if cfg.optim.max_steps > 0:
        total_steps = min(total_steps, cfg.optim.max_steps)
    if dd.main:
        out.mkdir(parents=True, exist_ok=True)
        if not resume:  # a fresh run in an old directory starts a fresh log
            for stale in ("metrics.jsonl", "best.pt", "last.pt"):
                (out / stale).unlink(missing_ok=True)
        save_config(cfg, out / "config.yaml")
        log = {"amp": use_amp, "device": str(device), "world": dd.world}
        log |= {"threads": threads, "train_pairs": len(train), "val_pairs": len(val)}
        (out / "run.json").write_text(json.dumps(log, indent=1))

    row: dict[str, Any] = {}
    for epoch in range(start_epoch, cfg.optim.epochs):
        if step >= total_steps:
            break
        # the epoch's order depends only on (seed, epoch): identical after --resume
        g = torch.Generator().manual_seed(cfg.run.seed * 100_003 + epoch)
        perm = torch.randperm(len(train), generator=g)
        perm = perm[: len(perm) // dd.world * dd.world][dd.rank :: dd.world]
        t0, n_seen = time.time(), 0
        sums: Tensor | None = None  # per-term sums over the epoch's pairs
        terms: dict[str, Tensor] = {}
        bar = _bar(steps_per_epoch, epoch, cfg, dd.main)
        for i in range(0, len(perm), per_rank):
            if step >= total_steps:
                break
            batch = train[perm[i : i + per_rank]].to(device, non_blocking=True)
            lam = lambda_r(step, total_steps, cfg.loss.rec_start, cfg.loss.rec_end)
            terms = train_step(ddp, target, opt, batch, cfg, lam, amp)
            vec = torch.stack([v.detach().float() for v in terms.values()])
            sums = vec * len(batch) if sums is None else sums + vec * len(batch)
            n_seen, step = n_seen + len(batch), step + 1
            if bar is not None and step % 10 == 0:
                shown = dict(zip(terms, vec.tolist(), strict=True))
                bar.set_postfix({k: f"{shown[k]:.3g}" for k in _SHOWN})
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        elapsed = time.time() - t0
        assert sums is not None, "an epoch without a step"  # len(train) >= batch size

        # -- end of epoch: validation, diagnostics, selection, checkpoints
        row = {"epoch": epoch + 1, "step": step, "time_s": round(elapsed, 2)}
        row["pairs_per_s"] = round(n_seen * dd.world / max(elapsed, 1e-9), 1)
        row |= {
            f"train_{k}": v / max(n_seen, 1)
            for k, v in zip(terms, sums.tolist(), strict=True)
        }
        row |= estimate_val(model, target, val, cfg, lam)
        improved = epoch + 1 >= cfg.optim.select_from and row["val_select"] < best
        if improved:
            best, bad = row["val_select"], 0
        elif epoch + 1 >= cfg.optim.select_from:
            bad += 1
        row |= {"best": best, "improved": improved}
        if dd.world > 1:  # DDP sanity check: every replica holds the same weights
            tensors = [*model.parameters(), *target.parameters()]
            row["replica_spread"] = distributed.replica_spread(tensors)
        if dd.main:
            state = _state(model, target, opt, cfg, epoch + 1, step, best, bad, device)
            state["corpus"] = pairs.corpus
            save_checkpoint(out / "last.pt", **state)
            if improved:
                save_checkpoint(out / "best.pt", **state)
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            _plots(out)
        distributed.barrier()
        if bad >= cfg.optim.patience:
            break
    distributed.cleanup()
    return row


_SHOWN = ("loss", "kl_fine", "kl_coarse", "code", "rec")


def _bar(total: int, epoch: int, cfg: TrainConfig, main: bool) -> Any:
    """The epoch's tqdm bar on the main rank, when ``run.progress``; else None."""
    if not (main and cfg.run.progress):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"epoch {epoch + 1}/{cfg.optim.epochs}", leave=False)


def _state(
    model: SCJEPA,
    target: TargetEncoder,
    opt: torch.optim.Optimizer,
    cfg: TrainConfig,
    epoch: int,
    step: int,
    best: float,
    bad: int,
    device: torch.device,
) -> dict[str, Any]:
    """What a checkpoint holds (layout: checkpoint.py)."""
    rng: dict[str, Tensor | None] = {"torch": torch.get_rng_state()}
    rng["cuda"] = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {
        "config": cfg.model.to_dict(),
        "model": model.state_dict(),
        "target": target.state_dict(),
        "train_config": cfg.to_dict(),
        "optimizer": opt.state_dict(),
        "epoch": epoch,
        "step": step,
        "best": best,
        "bad": bad,
        "rng": rng,
    }


def _plots(out: Path) -> None:
    """curves.png (loss terms, codebook health) and usage.png (last epoch's histogram)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
    ]
    ep = [r["epoch"] for r in rows]
    panels = [
        ("total loss", ["train_loss", "val_loss", "val_select"]),
        (
            "prediction",
            ["train_kl_fine", "train_kl_coarse", "train_mse_fine", "val_pred"],
        ),
        ("codebook / rec", ["train_code", "train_rec", "val_rec"]),
        ("codes in use", ["perplexity", "active_codes"]),
        (
            "collapse: PC variance share",
            ["pc1_var", "pc5_var", "pc10_var", "z_spread", "h_pc1_var"],
        ),
        ("confidence", ["max_prob", "train_ent_sample"]),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (title, keys) in zip(axes.flat, panels, strict=True):
        for k in keys:
            if k in rows[-1]:
                ax.plot(ep, [r.get(k, np.nan) for r in rows], marker=".", label=k)
        ax.set_title(title)
        ax.set_xlabel("epoch")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=90)
    plt.close(fig)
    if "usage" in rows[-1]:
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.bar(range(len(rows[-1]["usage"])), rows[-1]["usage"], width=1.0)
        ax.set_title(f"code usage (argmax counts, val), epoch {rows[-1]['epoch']}")
        ax.set_xlabel("code")
        fig.tight_layout()
        fig.savefig(out / "usage.png", dpi=90)
        plt.close(fig)
