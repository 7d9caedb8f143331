"""`scjepa data ...`: look at a data set the way the model will see it.

scjepa data stats --dataset msl --root ~/.cache/scjepa/datasets
scjepa data stats --dataset smd --root DIR --json stats.json
scjepa data stats --dataset csv --root my.csv --label-col fault --entity-col pump
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from training import strict_json
from training.data import DATASETS, WINDOW, load_dataset
from training.data.stats import dataset_stats
from training.errors import UserError
from training.usercsv import add_table_arguments as add_table_arguments
from training.usercsv import table_options as table_options


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse prints the refusal, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="action")
    s = sub.add_parser(
        "stats", help="windows, positives, prevalence, onset rate, split sizes"
    )
    s.add_argument("--dataset", required=True, choices=DATASETS)
    s.add_argument(
        "--root",
        type=Path,
        help="data folder (default $SCJEPA_DATA or ~/.cache/scjepa/datasets); for csv a file or folder",
    )
    s.add_argument("--window", type=positive_int, default=WINDOW, help="steps")
    s.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write JSON (to FILE, or stdout)",
    )
    s.add_argument(
        "--per-entity", action="store_true", help="print the per-entity table too"
    )
    add_table_arguments(s)
    g2 = s.add_argument_group("synthetic options")
    g2.add_argument("--seed", type=int, default=0)


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def print_stats(st: dict[str, Any], per_entity: bool) -> None:
    out = sys.stdout.write
    out(
        f"dataset {st['dataset']}: {st['entities']} entities, "
        f"{st['train_steps']} train / {st['test_steps']} test steps, "
        f"channels kept {st['channels_kept']}/{st['channels']}, imputed cells {st['imputed_cells']}\n"
    )
    if st.get("steps_per_day"):
        out(f"  sampling: {st['steps_per_day'] / 86400:g} steps per second\n")
    if st["channels_dropped"]:
        out(
            f"  dropped (zero variance on train): {', '.join(st['channels_dropped'])}\n"
        )
    for note in st["notes"]:
        out(f"  note: {note}\n")
    pp = st["pretrain_pairs"]
    if "per_fold" in pp:
        each = ", ".join(f"{p['train']}/{p['val']}" for p in pp["per_fold"])
        out(f"  pre-training pairs per fold (one channel each), train/val: {each}\n")
    else:
        out(
            f"  pre-training pairs (one channel each): train {pp['train']}, val {pp['val']}\n"
        )
    if "splits" in st:
        out(
            f"\n  {'view':<22}{'windows':>8}{'pos':>6}{'prev':>10}{'onsets':>8}{'onset rate':>12}\n"
        )
        rows = [
            ("per entity (used)", st["windows_per_entity"]),
            ("concatenated (quoted)", st["concatenated"]),
        ]
        rows += [(f"split {k}", v) for k, v in st["splits"].items()]
        for name, r in rows:
            out(
                f"  {name:<22}{r['windows']:>8}{r['positives']:>6}{_pct(r['prevalence']):>10}"
                f"{r['onsets']:>8}{_pct(r['onset_rate']):>12}\n"
            )
        p = st["splits"]["test"]["prevalence"]
        out(f"  always-positive F1 on the test split: {2 * p / (1 + p):.3f}\n")
    if per_entity:
        out(
            f"\n  {'entity':<16}{'train':>8}{'test':>8}{'windows':>8}{'pos':>5}{'prev':>9}{'onset':>9}  split\n"
        )
        for r in st["per_entity"]:
            if "windows" not in r:
                out(f"  {r['entity']:<16}{r['train_steps']:>8}{'-':>8}\n")
                continue
            sp = r.get("split") or {
                "train": "-",
                "val": "-",
                "test": f"fold {r['test_fold']}",
            }
            out(
                f"  {r['entity']:<16}{r['train_steps']:>8}{r['test_steps']:>8}{r['windows']:>8}"
                f"{r['positives']:>5}{_pct(r['prevalence']):>9}{_pct(r['onset_rate']):>9}"
                f"  {sp['train']}/{sp['val']}/{sp['test']}\n"
            )


def run(args: argparse.Namespace) -> int:
    kwargs = table_options(args, args.dataset)
    if args.dataset == "synthetic":
        kwargs = {"seed": args.seed}
    ds = load_dataset(args.dataset, args.root, **kwargs)
    st = dataset_stats(ds, args.window)
    if args.json:
        text = strict_json.dumps(st, indent=2)
        if args.json == "-":
            sys.stdout.write(text + "\n")
            return 0
        try:
            Path(args.json).write_text(text + "\n")
        except OSError as e:
            raise UserError(
                f"--json {args.json}: cannot write ({e.strerror or e})"
            ) from None
    print_stats(st, args.per_entity)
    return 0
