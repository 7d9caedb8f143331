"""`scjepa demo`: the main job end to end on an embedded default.

Until the model and service stages land, the demo shows what the model will be trained
on: the synthetic benchmark (seeded, with precursors before every anomaly) seen through
the project's windowing and splitting rules.
"""

from __future__ import annotations

import argparse

from training.data import load_dataset
from training.data.cli import print_stats
from training.data.stats import dataset_stats


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data set")


def run(args: argparse.Namespace) -> int:
    ds = load_dataset("synthetic", seed=args.seed)
    print_stats(dataset_stats(ds), per_entity=True)
    return 0
