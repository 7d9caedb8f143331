"""`scjepa pretrain`: self-supervised SC-JEPA pre-training on (W_t, W_{t+1}) pairs.

    scjepa pretrain --dataset msl --root DIR --config configs/paper.yaml --out runs/msl
    scjepa pretrain --dataset msl,smap --root DIR --config configs/fast.yaml \\
        --set optim.epochs=3 --out runs/x [--resume]
    torchrun --nproc_per_node 2 -m training.pretrain.train --dataset synthetic ...   # DDP

The run dir gets config.yaml (resolved), metrics.jsonl (one line per epoch: every loss
term, codebook usage, collapse diagnostics), last.pt (resume), best.pt (model
selection on the val loss, from optim.select_from on; early stopping after
optim.patience epochs without improvement), usage.png and curves.png. A fresh run
refuses a directory that holds one (--resume continues it, --overwrite replaces it);
--resume refuses another config or data set (only run.device/amp/threads/progress may
change, and optim.epochs grow), and does nothing for a run that finished or stopped
early.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.errors import UserError

if TYPE_CHECKING:
    from training.pretrain.config import TrainConfig

# the loop's names (pretrain, train_step, ...) live in training.pretrain.loop, which
# imports PyTorch: they load on first use, so `scjepa pretrain --help` stays light
_LOOP = (
    "load_pairs",
    "make_optimizer",
    "pretrain",
    "resolve_device",
    "train_step",
    "estimate_val",
)


def __getattr__(name: str) -> Any:
    if name in _LOOP:
        from training.pretrain import loop

        return getattr(loop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset",
        required=True,
        help="name, or several: msl,smap,smd; a data set split by entity, one fold's "
        "train entities (skab@K) or the served model's (skab@serve)",
    )
    p.add_argument("--root", help="data folder (default $SCJEPA_DATA)")
    p.add_argument("--config", default="configs/paper.yaml",
                   help="YAML file, or a preset: paper, improved, fast")  # fmt: skip
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value, e.g. --set optim.epochs=3 (repeatable)",
    )
    p.add_argument("--out", required=True, type=Path, help="run directory")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT/last.pt, with the run's own config and data (only "
        "run.device/amp/threads/progress may change, and optim.epochs grow)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in OUT (its last.pt, best.pt, metrics.jsonl); without "
        "it a fresh run refuses a folder that holds one",
    )
    from training.data.cli import add_table_arguments

    add_table_arguments(p)


def run(args: argparse.Namespace) -> int:
    from training.pretrain.config import load_config
    from training.pretrain.loop import check_run_dir, load_pairs, pretrain

    cfg = load_config(args.config, args.set)  # every value checked (config.RULES)
    # before the data load and before any file is touched
    check_run_dir(args.out, args.resume, args.overwrite)
    names = [n.strip() for n in args.dataset.split(",") if n.strip()]
    pairs = load_pairs(names, args.root, cfg, args)
    row = pretrain(cfg, pairs, args.out, resume=args.resume, overwrite=args.overwrite)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    if row:
        print(
            f"epoch {row['epoch']}: val loss {row['val_loss']:.4f}, best {row['best']:.4f}"
            f" -> {args.out}/best.pt, last.pt, metrics.jsonl, curves.png"
        )
        print(stop_message(args.out, cfg))
    else:  # --resume of a run that had finished or stopped early
        print(f"nothing to do: {stop_message(args.out, cfg)}")
    return 0


def stop_message(out: Path, cfg: TrainConfig) -> str:
    """How the run ended (early stopping or not) and which epoch best.pt holds, from
    the run's metrics.jsonl (a resumed run included)."""
    log = out / "metrics.jsonl"
    rows = (
        [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
    )
    if not rows:
        return f"{log} logs no epoch"
    last = rows[-1]["epoch"]
    kept = [r for r in rows if r.get("improved")]
    o = cfg.optim
    if not kept:
        return (
            f"ran {last} of {o.epochs} epochs; no best.pt: model selection starts at "
            f"epoch {o.select_from} (evaluate last.pt)"
        )
    best = kept[-1]
    since = sum(
        1 for r in rows if r["epoch"] > best["epoch"] and r["epoch"] >= o.select_from
    )
    how = (
        f"early stopping: no better validation loss for {since} epochs (patience "
        f"{o.patience}), stopped at epoch {last} of {o.epochs}"
        if last < o.epochs and since >= o.patience
        else f"ran {last} of {o.epochs} epochs"
    )
    return (
        f"{how}; kept epoch {best['epoch']} in best.pt (validation loss "
        f"{best['val_select']:.4f}); last.pt holds epoch {last}"
    )


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="scjepa pretrain", description=__doc__.splitlines()[0]
    )
    add_arguments(p)
    try:
        return run(p.parse_args(argv))
    except UserError as e:
        print(f"scjepa pretrain: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
