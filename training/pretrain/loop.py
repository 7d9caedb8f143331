"""The pre-training loop behind `scjepa pretrain` (training/pretrain/train.py holds the
command line and imports this module only when it runs, so `--help` needs no PyTorch).

The run dir gets config.yaml (resolved), metrics.jsonl (one line per epoch, strict
JSON: every loss term, null where not finite; codebook usage, collapse diagnostics;
``best``, null while no epoch is selected), last.pt (resume), best.pt (model
selection on the val loss, from optim.select_from on; early stopping after
optim.patience epochs without improvement), usage.png and curves.png.
"""

from __future__ import annotations

import argparse
import hashlib
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
from training import strict_json
from training.data import Pairs
from training.errors import UserError
from training.pretrain import distributed
from training.pretrain.checkpoint import load_checkpoint, load_weights, save_checkpoint
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


# what a run directory holds; a fresh run refuses a directory holding one of the first
# three unless told to overwrite (--overwrite)
RUN_FILES = ("last.pt", "best.pt", "metrics.jsonl")
PENDING_BEST = "best.next.pt"  # best.pt of an epoch whose last.pt is not yet written
_OWN_FILES = (*RUN_FILES, PENDING_BEST, "curves.png", "usage.png")
# keys of last.pt that --resume needs besides config/model
RESUME_KEYS = ("target", "optimizer", "train_config", "epoch", "step", "best", "bad")
# settings a resumed run may change: where and how fast it runs, not what it computes
RESUME_FREE = ("run.device", "run.amp", "run.threads", "run.progress")


def check_run_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse, before any file is touched, a fresh run into a directory that holds a
    run (unless ``overwrite``) and a resume with nothing to resume from."""
    if resume and overwrite:
        raise UserError("--resume continues the run in --out, --overwrite replaces it")
    if resume:
        if not (out / "last.pt").is_file():
            raise UserError(f"{out / 'last.pt'}: nothing to resume from")
        return
    held = [n for n in RUN_FILES if (out / n).exists()]
    if held and not overwrite:
        raise UserError(
            f"{out} holds a run ({', '.join(held)}): continue it with --resume, "
            "replace it with --overwrite, or give another --out"
        )


def pairs_fingerprint(pairs: Pairs) -> dict[str, Any]:
    """What a checkpoint records of its pairs, so --resume can refuse other data."""
    h = hashlib.sha256()
    for a in (pairs.train, pairs.val):
        h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
    return {"train_pairs": len(pairs.train), "val_pairs": len(pairs.val)} | {
        "sha256": h.hexdigest()
    }


def read_resume(path: Path) -> dict[str, Any]:
    """last.pt, every tensor on the CPU: torch.set_rng_state and
    torch.cuda.set_rng_state take CPU ByteTensors, and load_state_dict copies the
    weights and the optimiser's state onto the model's device itself."""
    ck = load_checkpoint(path, map_location="cpu")
    missing = [k for k in RESUME_KEYS if k not in ck]
    if missing:
        raise UserError(
            f"{path}: holds no training state ({', '.join(missing)} missing): a "
            "weights-only checkpoint cannot be resumed"
        )
    return ck


# what a checkpoint written before a setting existed was trained with
BEFORE_KEYS: dict[str, dict[str, Any]] = {"loss": {"reduce": "mean"}}


def resume_conflicts(
    ck: dict[str, Any], cfg: TrainConfig, pairs: Pairs, fingerprint: dict[str, Any]
) -> list[str]:
    """What differs between a run's last.pt and the config and data it is resumed
    with: every setting but ``RESUME_FREE`` and a larger optim.epochs, the data sets
    and entities (corpus) and the pairs themselves."""
    diffs = []
    defaults, new = TrainConfig().to_dict(), cfg.to_dict()
    old = ck.get("train_config") or {}
    for section in [*new, *(k for k in old if k not in new)]:
        o = defaults.get(section, {}) | BEFORE_KEYS.get(section, {})
        o |= old.get(section) or {}
        n = new.get(section, {})
        for k in [*o, *(k for k in n if k not in o)]:
            key, a, b = f"{section}.{k}", o.get(k, "(none)"), n.get(k, "(none)")
            if key in RESUME_FREE or a == b:
                continue
            if key == "optim.epochs" and isinstance(a, int) and b > a:
                continue  # more epochs: allowed (lambda_r: see pretrain)
            diffs.append(f"{key} {a} -> {b}")
    if ck.get("corpus") is not None and _norm(ck["corpus"]) != _norm(pairs.corpus):
        diffs.append(f"data {_corpus_change(ck['corpus'], pairs.corpus)}")
    elif ck.get("data") is not None and ck["data"] != fingerprint:
        o, n = ck["data"], fingerprint
        diffs.append(
            f"data: other pairs from the same entities ({o['train_pairs']} train, "
            f"{o['val_pairs']} validation -> {n['train_pairs']}, {n['val_pairs']})"
        )
    return diffs


def _norm(corpus: dict[str, list[str]]) -> dict[str, set[str]]:
    return {k: set(v) for k, v in corpus.items() if v}


def _corpus_change(old: dict[str, list[str]], new: dict[str, list[str]]) -> str:
    """'msl: +[B-1] -[A-2]' for each data set whose entities differ."""

    def few(xs: list[str]) -> str:
        return ", ".join(xs[:3]) + (f" +{len(xs) - 3} more" if len(xs) > 3 else "")

    parts = []
    o, n = _norm(old), _norm(new)
    for name in [*o, *(k for k in n if k not in o)]:
        add = sorted(n.get(name, set()) - o.get(name, set()))
        drop = sorted(o.get(name, set()) - n.get(name, set()))
        parts.append(
            f"{name}:"
            + (f" new entities [{few(add)}]" if add else "")
            + (f" dropped entities [{few(drop)}]" if drop else "")
        )
    return "; ".join(p for p in parts if not p.endswith(":"))


def restore(
    ck: dict[str, Any],
    path: Path,
    model: SCJEPA,
    target: TargetEncoder,
    opt: torch.optim.Optimizer,
    device: torch.device,
) -> None:
    """Weights, optimiser state and RNG states of ``ck`` (read by :func:`read_resume`,
    on the CPU) into a model, target and optimiser on ``device``."""
    load_weights(model, ck["model"], f"{path}: its model weights")
    load_weights(target, ck["target"], f"{path}: its target weights")
    try:
        opt.load_state_dict(ck["optimizer"])  # its state moves to the params' device
    except (ValueError, KeyError, RuntimeError) as e:
        raise UserError(f"{path}: its optimiser state does not fit ({e})") from e
    rng = ck.get("rng") or {}
    if rng.get("torch") is not None:
        torch.set_rng_state(rng["torch"].cpu())
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"].cpu(), device)


def _settle(out: Path, epoch: int) -> None:
    """Make a run directory agree with its last.pt (epoch ``epoch``) after a kill at
    the end of an epoch: an epoch's best.pt is written as best.next.pt and its
    metrics line appended before its last.pt, then best.next.pt becomes best.pt. So
    a best.next.pt of epoch ``epoch`` is renamed, one of a later epoch dropped, and so
    are metrics lines past ``epoch`` (and a half-written last line)."""
    pending = out / PENDING_BEST
    if pending.is_file():
        if load_checkpoint(pending).get("epoch") == epoch:
            os.replace(pending, out / "best.pt")
        else:
            pending.unlink()
    log = out / "metrics.jsonl"
    if not log.is_file():
        return
    lines = log.read_text().splitlines()
    kept = [x for x in lines if 0 < (_epoch_of(x) or 0) <= epoch]
    if kept != lines:
        tmp = log.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        os.replace(tmp, log)


def _epoch_of(line: str) -> int | None:
    try:
        e = json.loads(line).get("epoch")
    except (json.JSONDecodeError, AttributeError):
        return None
    return e if isinstance(e, int) else None


def pretrain(
    cfg: TrainConfig,
    pairs: Pairs,
    out: str | Path,
    resume: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Train on ``pairs`` (.train/.val arrays (N, 2, T)); returns the last metrics row
    ({} when a resumed run has nothing left to do).

    A fresh run refuses an ``out`` that holds a run unless ``overwrite``. ``resume``
    continues from out/last.pt and refuses any change of config but the run section's
    device/amp/threads/progress and a larger optim.epochs, and any other data: then
    lambda_r anneals on linearly from its value at the resume step to loss.rec_end at
    the new last step (the run's first part keeps the old schedule).
    """
    out = Path(out)
    check_run_dir(out, resume, overwrite)
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
    per_rank = cfg.optim.batch_size // dd.world  # the global batch stays batch_size
    steps_per_epoch = math.ceil(len(pairs.train) // dd.world / per_rank)
    total_steps = _total_steps(cfg.optim.epochs, cfg.optim.max_steps, steps_per_epoch)
    fingerprint = pairs_fingerprint(pairs)
    corpus: dict[str, list[str]] | None = pairs.corpus

    # -- model, EMA target, optimiser (all ranks start from the same seed)
    model = SCJEPA(cfg.model).to(device)
    target = make_target(model)
    opt = make_optimizer(model, cfg)
    start_epoch, step, best, bad = 0, 0, math.inf, 0
    # lambda_r's anneal: linear from (from_step, from) to (total_steps - 1, rec_end)
    lam_from: dict[str, Any] = {"from_step": 0, "from": cfg.loss.rec_start}
    if resume:
        ck = read_resume(out / "last.pt")
        conflicts = resume_conflicts(ck, cfg, pairs, fingerprint)
        if conflicts:
            raise UserError(
                f"{out / 'last.pt'}: cannot resume with another config or data: "
                + "; ".join(conflicts)
                + " (resume with the run's own, or start a run with --overwrite or "
                "another --out)"
            )
        restore(ck, out / "last.pt", model, target, opt, device)
        start_epoch, step, best, bad = ck["epoch"], ck["step"], ck["best"], ck["bad"]
        corpus = ck.get("corpus")  # a checkpoint without one stays without one
        lam_from = ck.get("lambda_r") or lam_from
        o = ck["train_config"]["optim"]
        before = _total_steps(o["epochs"], o.get("max_steps", 0), steps_per_epoch)
        if total_steps != before:  # more epochs: anneal on from where it is
            now = _lambda(step, before, lam_from, cfg)
            lam_from = {"from_step": step, "from": now}
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
    if dd.main:
        out.mkdir(parents=True, exist_ok=True)
        if resume:
            _settle(out, start_epoch)
        else:  # a fresh run (--overwrite) in an old directory starts a fresh log
            for stale in _OWN_FILES:
                (out / stale).unlink(missing_ok=True)
        save_config(cfg, out / "config.yaml")
        log = {"amp": use_amp, "device": str(device), "world": dd.world}
        log |= {"threads": threads, "train_pairs": len(train), "val_pairs": len(val)}
        (out / "run.json").write_text(strict_json.dumps(log, indent=1))

    row: dict[str, Any] = {}
    for epoch in range(start_epoch, cfg.optim.epochs):
        # early stopping or the step budget: checked first, so a resumed run that
        # stopped does nothing
        if step >= total_steps or bad >= cfg.optim.patience:
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
            lam = _lambda(step, total_steps, lam_from, cfg)
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
            state |= {"lambda_r": lam_from, "data": fingerprint}
            if corpus is not None:
                state["corpus"] = corpus
            # one unit: best.next.pt and the metrics line, then last.pt (the commit:
            # --resume settles the rest against it, _settle), then best.pt
            if improved:
                save_checkpoint(out / PENDING_BEST, **state)
            with open(out / "metrics.jsonl", "a") as f:
                f.write(strict_json.dumps(row) + "\n")
            save_checkpoint(out / "last.pt", **state)
            if improved:
                os.replace(out / PENDING_BEST, out / "best.pt")
            _plots(out)
        distributed.barrier()
    distributed.cleanup()
    return row


def _total_steps(epochs: int, max_steps: int, steps_per_epoch: int) -> int:
    total = epochs * steps_per_epoch
    return min(total, max_steps) if max_steps > 0 else total


def _lambda(step: int, total_steps: int, at: dict[str, Any], cfg: TrainConfig) -> float:
    """lambda_r at ``step``: linear from ``at`` (from_step, from) to loss.rec_end at
    the last step (from 0 and loss.rec_start unless --resume added epochs)."""
    s0 = at["from_step"]
    return lambda_r(step - s0, total_steps - s0, at["from"], cfg.loss.rec_end)


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
