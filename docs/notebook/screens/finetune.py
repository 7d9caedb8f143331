"""Screen, out of fold on train + validation: SC-JEPA's encoder and codebook trained
further, end to end, with the probe on the next window's label, beside the window
statistics (results-notes.md, 2026-11-29, sixteenth session; criterion there).

    python docs/notebook/screens/finetune.py msl CKPT smd CKPT skab CKPT daphnet CKPT
    # $SCJEPA_DATA; CKPT may hold {fold} (SKAB, Daphnet: each fold's own pre-training)
    python docs/notebook/screens/finetune.py daphnet@1 CKPT ...   # another fold
    python docs/notebook/screens/finetune.py --oof OUT.npz daphnet@1 CKPT  # its risks
    python docs/notebook/screens/finetune.py --rules daphnet RESULTS_DIR 'OUT@{fold}.npz'

Every SC-JEPA candidate reads the pre-trained model frozen. Here the spec's probe input
(code probabilities, max over the channels, P * K) is computed with gradients and set
beside the 18 pooled window statistics the served candidates read (z-scored on the
fold's official train windows); an MLP head reads both, and encoder, codebook and head
are trained together: class-weighted BCE, AdamW (3e-4 for the model, 1e-3 for the
head), batches of 64 hop windows, up to 20 epochs, stopped on the next block's
class-weighted loss (patience 3), one seed (--seeds). Its floor: the same recipe from the
untrained model of the same shape (seed 0). Rows beside them: the statistics read by
the served trees and MLP. Harness: _screen.cv_table (fold 0, K = 4); no test window.

Each fine-tuning gives a second row (seventeenth session): the served trees
(training/evaluate/probe.py) reading what the head reads, the fine-tuned model's code
probabilities beside the statistics, fitted on the fit blocks' hop windows and stopped
and calibrated on the same next block.

--oof saves one fold's out-of-fold risks of both fine-tuned candidates (its blocks: the
served model's, select.cv_blocks); --rules offers them, every fold's, to the selection
rule beside the ten candidates of a `scjepa evaluate` run (rules.py's nested check);
with --untrained, --oof fine-tunes the untrained model of the same shape instead (the
floor's risks, to offer in their place).
--threads N: torch's threads (2). --seeds N: fine-tune N times per block (seeds 0 .. N-1),
each a row of the out-of-fold risks, as `scjepa evaluate` fits its MLP probes (1).

With --dense each epoch draws as many windows as the hop windows, at random, from the
fit blocks' dense windows (one every ``stride`` steps): the window's position as
augmentation, at the hop fit's cost per epoch.
"""

import sys
import time

import numpy as np
import torch
from _screen import cv_table, event_config, name_ds

from model import SCJEPA
from training.evaluate.baselines import WindowStatsFeatures
from training.evaluate.finetune import features, fine_tune, head_logits
from training.evaluate.probe import Probe, ProbeConfig
from training.evaluate.protocol import normal_windows
from training.evaluate.select import (
    OutOfFold,
    cv_blocks,
    read_out_of_fold,
    write_out_of_fold,
)
from training.pretrain.checkpoint import load_model

torch.set_num_threads(2)
SEEDS = (0,)  # --seeds N: 0 .. N-1
LABEL = "SC-JEPA fine-tuned + statistics"
HEADS = {"mlp": LABEL, "trees": f"{LABEL}, read by the trees"}
DENSE = False  # --dense
FLOOR = True  # --no-floor: without the untrained floor's rows (half the cost)


def fit_tuned(model0: SCJEPA, stats: WindowStatsFeatures, tag: str):
    """blocks -> {"mlp": OutOfFold of the fine-tuned model with its head, "trees":
    OutOfFold of the served trees reading the fine-tuned model's features}, a row per
    seed of SEEDS (one seed: repeated to 3 rows, as cv_table repeats the deterministic
    trees)."""

    def fit(blocks) -> dict[str, OutOfFold]:
        k = len(blocks)
        s_hop = [stats(b.hop.x).astype(np.float32) for b in blocks]
        s_dense = [stats(b.dense.x).astype(np.float32) for b in blocks]
        src, s_src = (
            ([b.dense for b in blocks], s_dense)
            if DENSE
            else ([b.hop for b in blocks], s_hop)
        )
        hop, dense = {h: [] for h in HEADS}, {h: [] for h in HEADS}
        for j in range(k):
            v = (j + 1) % k
            fit_ = [i for i in range(k) if i not in (j, v)]
            x = np.concatenate([src[i].x for i in fit_]).astype(np.float32)
            s = np.concatenate([s_src[i] for i in fit_])
            y = np.concatenate([src[i].y for i in fit_]).astype(np.float32)
            n_epoch = sum(len(blocks[i].hop) for i in fit_)
            got = {h: ([], []) for h in HEADS}
            for seed in SEEDS:
                t0 = time.time()
                net, epochs, best = fine_tune(
                    model0, x, s, y, (blocks[v].hop.x, s_hop[v], blocks[v].hop.y),
                    seed, per_epoch=n_epoch,
                )  # fmt: skip
                f = {i: features(net, blocks[i].hop.x, s_hop[i]) for i in (*fit_, v, j)}
                f_dense = features(net, blocks[j].dense.x, s_dense[j])
                got["mlp"][0].append(head_logits(net, f[j]))
                got["mlp"][1].append(head_logits(net, f_dense))
                trees = Probe(f[j].shape[1], ProbeConfig(kind="trees"), 0)
                trees.fit(
                    np.concatenate([f[i] for i in fit_]),
                    np.concatenate([blocks[i].hop.y for i in fit_]),
                    f[v],
                    blocks[v].hop.y,
                )
                got["trees"][0].append(trees.predict(f[j]))
                got["trees"][1].append(trees.predict(f_dense))
                print(
                    f"  {tag}: block {j}, seed {seed} fitted ({epochs} epochs, "
                    f"val loss {best:.3f}, {time.time() - t0:.0f} s)",
                    flush=True,
                )
            reps = 3 if len(SEEDS) == 1 else 1
            for h, (hs, ds) in got.items():
                hop[h].append(np.stack(hs * reps))
                dense[h].append(np.stack(ds * reps))
        # the rule's last key: what the head and the trees read (code probabilities and
        # statistics, as "SC-JEPA probe + window stats"), not the statistics alone
        n = int(f[j].shape[1])
        return {h: OutOfFold(hop[h], dense[h], n) for h in HEADS}

    return fit


def rows(fit, label_tag: str) -> dict:
    """cv_table ``extra`` rows of both heads from one fine-tuning per block set."""
    done: dict = {}

    def row(kind: str):
        def get(blocks) -> OutOfFold:
            if id(blocks) not in done:
                done[id(blocks)] = fit(blocks)
            return done[id(blocks)][kind]

        return get

    return {label_tag.format(HEADS[h]): row(h) for h in HEADS}


def _fold(arg: str) -> tuple[str, int, WindowStatsFeatures]:
    """DATASET[@FOLD] -> its name, fold and the statistics z-scored on its normal
    windows."""
    name, _, f = arg.partition("@")
    fold = int(f or 0)
    ds = name_ds(name)
    normal = normal_windows(ds, 100, fold if ds.folds else None)
    return name, fold, WindowStatsFeatures(normal)


def main(args: list[str]) -> None:
    for arg, ckpt in zip(args[::2], args[1::2], strict=True):
        name, fold, stats = _fold(arg)
        trained = load_model(ckpt.format(fold=fold))
        torch.manual_seed(0)
        untrained = SCJEPA(trained.cfg)  # evaluate's untrained twin (seed 0)
        tag = ", dense windows" if DENSE else ""
        cv_table(
            name,
            {"pooled statistics (served)": lambda s, stats=stats: stats(s.x)},
            [("trees", "every window"), ("mlp", "every window")],
            fold=fold,
            extra=rows(fit_tuned(trained, stats, "trained"), "{}" + tag)
            | (
                rows(
                    fit_tuned(untrained, stats, "untrained"),
                    "{}, from the untrained model" + tag,
                )
                if FLOOR
                else {}
            ),
        )


def save_oof(out: str, arg: str, ckpt: str, untrained: bool = False) -> None:
    """One fold's out-of-fold risks of the fine-tuned candidates, to ``out`` (in
    `scjepa evaluate`'s cv_scores.npz layout); ``untrained``: fine-tuned from the
    untrained model of the checkpoint's shape (seed 0) instead, labelled so."""
    from pathlib import Path

    name, fold, stats = _fold(arg)
    blocks = cv_blocks(name_ds(name), fold, 4, event_config(name).stride)
    model = load_model(ckpt.format(fold=fold))
    if untrained:
        torch.manual_seed(0)
        model = SCJEPA(model.cfg)
    o = fit_tuned(model, stats, arg)(blocks)
    tag = ", from the untrained model" if untrained else ""
    write_out_of_fold(Path(out), {HEADS[h] + tag: [o[h]] for h in HEADS})


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--threads" in args:
        i = args.index("--threads")
        torch.set_num_threads(int(args[i + 1]))
        del args[i : i + 2]
    if "--seeds" in args:
        i = args.index("--seeds")
        SEEDS = tuple(range(int(args[i + 1])))
        del args[i : i + 2]
    if args[0] == "--oof":
        untrained = "--untrained" in args
        save_oof(*[a for a in args[1:] if a != "--untrained"], untrained=untrained)
        sys.exit()
    if args[0] == "--rules":
        from pathlib import Path

        import rules

        name, results, pattern = args[1:]
        per_fold = [
            read_out_of_fold(Path(pattern.format(fold=f)))
            for f in range(len(name_ds(name).folds) or 1)
        ]
        rules.main(
            [name, results],
            lambda n, r: {
                label: [o[label][0] for o in per_fold] for label in per_fold[0]
            },
        )
        sys.exit()
    if "--dense" in args:
        DENSE = True
        args.remove("--dense")
    if "--no-floor" in args:
        FLOOR = False
        args.remove("--no-floor")
    main(args)
