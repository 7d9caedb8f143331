"""At initialisation, how much do SC-JEPA's encoder outputs depend on the window?
(results-notes.md, 2026-11-27, third session: why the paper size goes uniform)

    python docs/notebook/screens/encoder_init.py .gpu5/smd_pairs.npz

PAIRS is `docs/notebook/gpu/pretrain_gpu.py pairs`' file (SMD-19's pre-training
pairs). For the served size and the paper's size, untrained (seed 0), on the first
2,048 validation windows: the variance of h across windows over its mean squared norm
(one patch position), the mean pairwise cosine of h, and the code assignments' row
entropy E[H(p)] and usage entropy H(E[p]) against log K.
"""

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from model import SCJEPA
from training.pretrain.config import load_config

sys.path.insert(0, str(Path(__file__).parents[1] / "gpu"))
from pretrain_gpu import PAPER_SIZE, PRESET

SIZES = {
    f"served ({PRESET})": load_config(PRESET).model,
    "paper": load_config(PRESET, PAPER_SIZE).model,
}

torch.set_num_threads(2)
x = torch.from_numpy(np.load(sys.argv[1])["val"][:2048, 0].astype(np.float32))
for name, size in SIZES.items():
    torch.manual_seed(0)
    model = SCJEPA(size).eval()
    with torch.no_grad():
        out = model(x, predict=False)
    h = out["h"][:, 2]  # (N, D), the middle patch
    spread = h.var(0).sum() / (h**2).sum(-1).mean()
    hn = F.normalize(h, dim=-1)
    p = out["probs"].flatten(0, 1)  # (N * P, K)
    row = -torch.xlogy(p, p).sum(-1).mean()
    usage = -torch.xlogy(p.mean(0), p.mean(0)).sum()
    print(
        f"{name:32s} var across windows / |h|^2 {spread:.4f}  mean cos {(hn @ hn.T).mean():.3f}"
        f"  E[H(p)] {row:.2f}  H(E[p]) {usage:.2f}  log K {np.log(p.shape[-1]):.2f}"
    )
