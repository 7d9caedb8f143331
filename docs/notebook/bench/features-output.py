"""Serving cost of model.onnx's fourth output ("features", the probe's input, added for
the export's parity check; results-notes.md, 2026-11-29, twentieth session).

    python docs/notebook/bench/features-output.py ARTIFACT > features-output-DS.json

The same artifact with and without the "features" graph output, each run as the
service runs it (its three outputs by name, one intra-op thread), alternating call by
call in one process; median seconds per call and their ratio, with the CPU model and
the load.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

SERVED = ["risk", "channel_contrib", "codes"]


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), so, providers=["CPUExecutionProvider"]
    )


def main(art: Path) -> dict:
    four = onnx.load(art / "model.onnx")
    three = onnx.ModelProto()
    three.CopyFrom(four)
    kept = [o for o in three.graph.output if o.name != "features"]
    del three.graph.output[:]
    three.graph.output.extend(kept)
    runs = {"with": session(four), "without": session(three)}
    n = json.loads((art / "manifest.json").read_text())["n_channels"]
    out: dict = {"artifact": art.name}
    for b in (1, 64):
        x = np.random.default_rng(0).normal(size=(b, 100, n)).astype(np.float32)
        times: dict[str, list[float]] = {k: [] for k in runs}
        for i in range(43):
            for k, s in runs.items():
                t = time.perf_counter()
                s.run(SERVED, {"window": x})
                if i >= 3:  # warm-up
                    times[k].append(time.perf_counter() - t)
        med = {k: float(np.median(v)) for k, v in times.items()}
        out[f"batch{b}"] = med | {
            "ratio_with_over_without": med["with"] / med["without"]
        }
    with open("/proc/cpuinfo") as f:
        out["cpu"] = next(ln for ln in f if ln.startswith("model name")).split(":")[1]
    out["cpu"] = out["cpu"].strip()
    out["uptime"] = subprocess.check_output(["uptime"], text=True).strip()
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), indent=1))
