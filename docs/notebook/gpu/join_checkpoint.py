"""Join model-a.pt + model-b.pt (docs/notebook/gpu/pretrain_gpu.py) into a checkpoint
that `scjepa evaluate` and `scjepa export` read.

    python docs/notebook/gpu/join_checkpoint.py DIR_WITH_PARTS OUT.pt
"""

import sys
from pathlib import Path

import torch

parts, out = Path(sys.argv[1]), Path(sys.argv[2])
a = torch.load(parts / "model-a.pt", weights_only=False)
b = torch.load(parts / "model-b.pt", weights_only=False)
out.parent.mkdir(parents=True, exist_ok=True)
state = {"config": a["config"], "model": a["model"] | b["model"], "epoch": a["epoch"]}
torch.save(state, out)
print(out, "from", a["from"], "epoch", a["epoch"])
