"""What the input-drift monitor costs a served graph (results-notes.md, 2026-12-01,
thirty-second session): the `improved` preset's model on SMD-19's kept channels, a
codes probe, exported with and without a monitor fitted on SMD-19's official train
windows (the first 80 % the kNN bank and PCA, the rest the calibration); onnxruntime
on the CPU, one thread, batch 256, the two graphs run in turn (medians of 6 runs each,
a ratio measured in one run), with the artifact sizes, CPU model and load.

    PYTHONPATH=. python docs/notebook/bench/novelty_cost.py OUT_DIR   # $SCJEPA_DATA
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
import yaml
from torch import nn

from model.config import ModelConfig
from model.export import NoveltyMonitor, ServedModel, export_onnx
from model.scjepa import SCJEPA
from training.calibrate import novelty_record
from training.data import load_dataset
from training.evaluate.detectors import DetectorScores
from training.evaluate.protocol import normal_windows

torch.manual_seed(0)
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
m = yaml.safe_load(Path("configs/improved.yaml").read_text())["model"]
cfg = ModelConfig(
    **{k: v for k, v in m.items() if k in ModelConfig.__dataclass_fields__}
)
windows = normal_windows(load_dataset("smd")).astype(np.float32)
V = windows.shape[2]
cut = int(0.8 * len(windows))
ref, cal = windows[:cut], windows[cut:]
record = novelty_record(DetectorScores(ref, cal), cal, len(ref), "smd")
probe = nn.Sequential(nn.Linear(cfg.n_patches * cfg.n_codes, 1))
model = SCJEPA(cfg)
paths = {}
for name, monitor in (("with", NoveltyMonitor.from_record(record)), ("without", None)):
    served = ServedModel(model, probe, [True] * V, (1.0, 0.0), novelty=monitor).eval()
    paths[name] = export_onnx(served, out / f"{name}.onnx")
opts = ort.SessionOptions()
opts.intra_op_num_threads = opts.inter_op_num_threads = 1
sessions = {
    k: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"])
    for k, p in paths.items()
}
x = np.random.default_rng(0).normal(size=(256, 100, V)).astype(np.float32)
for s in sessions.values():
    s.run(None, {"window": x})  # warm-up
times: dict[str, list[float]] = {k: [] for k in sessions}
for _ in range(6):
    for k, s in sessions.items():
        t = time.perf_counter()
        s.run(None, {"window": x})
        times[k].append(time.perf_counter() - t)
wps = {k: 256 / float(np.median(v)) for k, v in times.items()}
cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
cpu = next(line for line in cpuinfo if line.startswith("model name"))
res = {
    "model": {k: getattr(cfg, k) for k in ("d_model", "n_layers", "n_codes")},
    "channels": V,
    "bank": len(ref),
    "pca_components": int(np.asarray(record["params"]["pca_components"]).shape[0]),
    "windows_per_s": wps,
    "ratio_with_over_without": wps["with"] / wps["without"],
    "artifact_mb": {k: os.path.getsize(p) / 1e6 for k, p in paths.items()},
    "cpu": cpu.split(":")[1].strip(),
    "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
}
print(json.dumps(res, indent=1))
(out / "novelty_cost.json").write_text(json.dumps(res, indent=1) + "\n")
