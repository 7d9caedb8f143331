"""SC-JEPA pre-training at the paper's size with the `improved` losses (D=256, 6 layers,
128 codes; up to 100 epochs) inside a GPU time budget (issue 20's remaining route).

Run on an H200 on 2026-11-28 (tenth session) with `loss.variance=1.0
loss.diversity=0.1`, the setting the CPU screens had left as the best (third and
fourth sessions of 2026-11-27): about 50,000 pairs/s at batch 2,048, a 100-epoch
SMD-19 schedule in 7 minutes. Neither run trained codes a probe can read: h moved
along one direction and the assignments went input-independent. With
`loss.covariance=0.04` beside them (eleventh session, screened on the CPU first), 89
epochs kept the codebook live (105-115 codes in use), but its codes read no more on
validation than the untrained twin's (results-notes.md, 2026-11-28, eleventh session).

    # here: SMD-19's pre-training pairs, the ones `scjepa pretrain --dataset smd` makes
    python docs/notebook/gpu/pretrain_gpu.py pairs DATA_ROOT .gpu5/smd_pairs.npz
    # on the GPU machine (the folder carried), output under $OUT
    PYTHONPATH=. python3 docs/notebook/gpu/pretrain_gpu.py train .gpu5/smd_pairs.npz 540
    # back here: one checkpoint that `scjepa evaluate` reads
    python docs/notebook/gpu/join_checkpoint.py FILES_AT runs/smd-paper-gpu/best.pt

`train` probes pairs/s at batch 128, 512 and 2048 (40 steps each), takes the smallest
batch that fits 100 epochs into the budget (lr 5e-4, 1e-3, 2e-3; the largest batch
otherwise, with as many epochs as fit), selects from half the epochs, and writes
metrics.jsonl, run.json, config.yaml and plan.json to $OUT, with the selected model
in files of at most 12 MB (model-a.pt, model-b.pt, ...: the device returns files of
at most 16 MiB, eight at most).
SIGTERM (`timeout`) stops it with the best checkpoint so far written out. Extra
arguments are `--set` style overrides (KEY=VALUE); `tiny` drops the paper size (a
CPU test of the script).
"""

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.data.windows import Pairs
from training.pretrain.config import load_config
from training.pretrain.loop import load_pairs, pretrain

PRESET = "configs/improved.yaml"
PAPER_SIZE = [
    "model.d_model=256",
    "model.n_layers=6",
    "model.n_heads=8",
    "model.n_codes=128",
    "model.pred_dim=128",
    "model.pred_layers=2",
]
RUN = Path("/tmp/pretrain-gpu-run")


def make_pairs(root: str, out: str) -> None:
    pairs = load_pairs(["smd"], root, load_config(PRESET, []), None)
    np.savez_compressed(out, train=pairs.train, val=pairs.val)
    print(out, pairs.train.shape, pairs.val.shape)


def _stop(signum: int, frame: Any) -> None:  # `timeout` sends SIGTERM
    raise KeyboardInterrupt


def train(path: str, budget: float, extra: list[str]) -> None:
    signal.signal(signal.SIGTERM, _stop)
    out = Path(os.environ.get("OUT", "/tmp/pretrain-gpu-out"))
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    size = [] if "tiny" in extra else PAPER_SIZE
    base = [*size, f"run.device={dev}", "run.progress=false", "run.threads=4"]
    base += [e for e in extra if e != "tiny"]
    d = np.load(path)
    pairs = Pairs(train=d["train"], val=d["val"])
    n = len(pairs.train)
    t0 = time.time()
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    plan: dict[str, Any] = {"device": name, "train_pairs": n, "budget_s": budget}
    usable = 0.8 * (budget - 60)  # probes, validation passes and the saving
    for batch, lr in ((128, 5e-4), (512, 1e-3), (2048, 2e-3)):
        probe = [f"optim.batch_size={batch}", f"optim.lr={lr}", "optim.epochs=1"]
        probe += ["optim.max_steps=40", "optim.select_from=1"]
        cfg = load_config(PRESET, [*base, *probe])
        small = Pairs(train=pairs.train[: 40 * batch], val=pairs.val[:256])
        rate = pretrain(cfg, small, f"/tmp/probe{batch}")["pairs_per_s"]
        plan[f"pairs_per_s_batch_{batch}"] = rate
        epochs = int(usable * rate / n)
        if epochs >= 100 or batch == 2048:
            break
    epochs = min(100, max(epochs, 2))
    plan |= {"batch_size": batch, "lr": lr, "epochs": epochs}
    plan |= {"select_from": max(1, epochs // 2), "probe_s": round(time.time() - t0, 1)}
    print("plan", json.dumps(plan), flush=True)
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    sets = [f"optim.batch_size={batch}", f"optim.lr={lr}", f"optim.epochs={epochs}"]
    cfg = load_config(
        PRESET, [*base, *sets, f"optim.select_from={plan['select_from']}"]
    )
    try:
        row = pretrain(cfg, pairs, RUN)
        print("last epoch", row.get("epoch"), "best", row.get("best"), flush=True)
    except KeyboardInterrupt:
        print("stopped by the time limit", flush=True)
    finally:
        for f in ("metrics.jsonl", "run.json", "config.yaml"):
            if (RUN / f).exists():
                shutil.copy(RUN / f, out)
        src = RUN / "best.pt" if (RUN / "best.pt").exists() else RUN / "last.pt"
        if src.exists():
            ck = torch.load(src, map_location="cpu", weights_only=False)
            parts: list[dict[str, Any]] = [{}]
            size = 0
            for k, v in ck["model"].items():  # parts of at most 12 MB
                n = v.numel() * v.element_size()
                if size and size + n > 12e6:
                    parts.append({})
                    size = 0
                parts[-1][k] = v
                size += n
            head = {"config": ck["config"], "from": src.name, "epoch": ck.get("epoch")}
            for i, part in enumerate(parts):
                extra = head if i == 0 else {}
                torch.save(extra | {"model": part}, out / f"model-{chr(97 + i)}.pt")
            print("saved", src, "epoch", ck.get("epoch"), flush=True)
        print("wall", round(time.time() - t0, 1), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "pairs":
        make_pairs(sys.argv[2], sys.argv[3])
    else:
        train(sys.argv[2], float(sys.argv[3]), sys.argv[4:])
