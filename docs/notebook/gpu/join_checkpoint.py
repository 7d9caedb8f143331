"""Join model-a.pt, model-b.pt, ... (docs/notebook/gpu/pretrain_gpu.py) into a checkpoint
that `scjepa evaluate` and `scjepa export` read.

    python docs/notebook/gpu/join_checkpoint.py DIR_WITH_PARTS OUT.pt
"""

import sys
from pathlib import Path

import torch

parts, out = Path(sys.argv[1]), Path(sys.argv[2])
files = sorted(parts.glob("model-*.pt"))
loaded = [torch.load(f, weights_only=False) for f in files]
a = loaded[0]
model = {k: v for part in loaded for k, v in part["model"].items()}
out.parent.mkdir(parents=True, exist_ok=True)
torch.save({"config": a["config"], "model": model, "epoch": a["epoch"]}, out)
print(out, "from", a["from"], "epoch", a["epoch"], "in", len(files), "parts")
