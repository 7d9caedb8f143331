"""`scjepa export`: the model artifact the service runs from, without PyTorch.

    scjepa export --checkpoint runs/msl/best.pt --probe results/msl/probe.pt --out artifacts/msl \
        [--dataset msl --root DIR --int8]

Writes ARTIFACT/model.onnx (window (B, 100, V_in) -> risk, channel_contrib, codes) and
ARTIFACT/manifest.json (schema: service/manifest.py). Parity with PyTorch is measured
and recorded. Two optional variants, each kept only if its metrics on the validation and
test splits stay within 0.5 points of fp32 (the deltas are recorded in the manifest):

- ``--int8`` (CPU): model.int8.onnx, the encoder's Transformer MatMuls statically
  quantized (QDQ, int8 weights, uint8 activations with ranges calibrated on the probe's
  training windows). Static, not dynamic, quantization: dynamic ranges are taken per
  batch, so a window's risk would depend on which windows share its micro-batch
  (measured: up to 0.008 on MSL). The tokenizer, codebook and probe stay fp32: the
  cosine-softmax at tau = 0.1 amplifies any error in front of it.
- ``--fp16`` (GPU): model.fp16.onnx, every float tensor in fp16 except the float32
  input and outputs, for the CUDA execution provider.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.export import ServedModel, export_onnx
from training.errors import UserError
from training.evaluate.probe import build_probe_net
from training.evaluate.results import git_commit
from training.pretrain.checkpoint import load_checkpoint, load_model

INT8_TOLERANCE = 0.005  # 0.5 points on every metric


def load_probe(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(
            f"{path}: probe file not found (written by `scjepa evaluate --checkpoint ...`)"
        )
    try:
        probe = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch raises many types for a bad file
        raise UserError(f"{path}: not a readable probe file ({e})") from e
    for key in ("state_dict", "probe", "threshold", "channels", "mask"):
        if key not in probe:
            raise UserError(f"{path}: not a served-probe file (no {key!r})")
    return probe


def build_served(checkpoint: Path, probe: dict[str, Any]) -> ServedModel:
    from model.stats import N_STATS, WindowStats

    model = load_model(checkpoint)
    cfg = probe["probe"]["config"]
    features = probe.get("features", "codes")
    expected = model.cfg.n_tokens * model.cfg.n_codes
    stats = None
    if features == "codes+stats":
        scale = probe["stats_scale"]
        stats = WindowStats(scale["mean"], scale["std"], model.cfg.seq_len)
        expected += N_STATS
    elif features != "codes":
        raise UserError(f"probe reads unknown features {features!r}")
    if probe["n_features"] != expected:
        raise UserError(
            f"probe expects {probe['n_features']} features, checkpoint gives {expected} "
            f"({features}): probe and checkpoint do not belong together"
        )
    net = build_probe_net(probe["n_features"], cfg["hidden"], cfg["dropout"])
    net.load_state_dict(probe["state_dict"])
    cal = probe["probe"]["calibration"]
    platt = (cal["a"], cal["b"]) if cal["method"] == "platt" else (1.0, 0.0)
    return ServedModel(model, net, probe["mask"], platt, stats).eval()


def onnx_scores(path: Path, x: np.ndarray, batch: int = 256) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate(
        [
            sess.run(["risk"], {"window": x[i : i + batch]})[0]
            for i in range(0, len(x), batch)
        ]
    )


def parity(
    served: ServedModel, path: Path, windows: dict[str, np.ndarray]
) -> dict[str, float]:
    """max |risk_onnx - risk_torch| per named window set."""
    out = {}
    for name, x in windows.items():
        with torch.no_grad():
            ref = served(torch.from_numpy(x))[0].numpy()
        out[name] = float(np.abs(onnx_scores(path, x) - ref).max())
    return out


def block_matmuls(model: Any, served: ServedModel) -> list[str]:
    """Names of the MatMul nodes that apply the encoder's Transformer-block weights.

    Found by content, not by name: the exporter renames and transposes weights, so each
    block Linear's weight (transposed, as ONNX's MatMul holds it) is matched against the
    graph's initializers byte for byte.
    """
    from onnx import numpy_helper

    wanted = {
        np.ascontiguousarray(m.weight.detach().numpy().T).tobytes()
        for block in served.model.encoder.blocks
        for m in block.modules()
        if isinstance(m, torch.nn.Linear)
    }
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return [
        n.name
        for n in model.graph.node
        if n.op_type == "MatMul"
        and any(
            i in inits and np.ascontiguousarray(inits[i]).tobytes() in wanted
            for i in n.input
        )
    ]


def quantize_int8(
    fp32: Path, out: Path, served: ServedModel, calibration: np.ndarray
) -> dict[str, Any]:
    """Static QDQ int8 of the encoder blocks' MatMuls, calibrated on ``calibration``."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    nodes = block_matmuls(onnx.load(str(fp32)), served)
    if not nodes:
        raise UserError(f"{fp32}: no encoder MatMul found to quantize")

    class Windows(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(
                {"window": calibration[i : i + 32]}
                for i in range(0, len(calibration), 32)
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantize_static(
        str(fp32),
        str(out),
        Windows(),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=["MatMul"],
        nodes_to_quantize=nodes,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=False,
    )
    return {
        "method": "static QDQ, per-tensor, MinMax calibration",
        "nodes": len(nodes),
        "calibration_windows": len(calibration),
    }


def convert_fp16(fp32: Path, out: Path) -> None:
    """fp16 weights and activations inside, float32 input and outputs (the contract)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), out)


def variant_check(
    fp32: Path, variant: Path, splits: dict[str, Any], threshold: float
) -> dict[str, Any]:
    """Metrics of both models on val and test; kept if no metric drops > 0.5 points."""
    from training.evaluate.metrics import metrics

    report: dict[str, Any] = {}
    worst = 0.0
    for split in ("val", "test"):
        s = splits[split]
        ra, rb = onnx_scores(fp32, s.x), onnx_scores(variant, s.x)
        a, b = metrics(s.y, ra, threshold), metrics(s.y, rb, threshold)
        report[split] = {"fp32": a, "variant": b}
        report[f"{split}_max_abs_risk_diff"] = float(np.abs(ra - rb).max())
        worst = max(
            worst, *(a[k] - b[k] for k in a if np.isfinite(a[k]) and np.isfinite(b[k]))
        )
    report["max_drop"] = worst
    report["kept"] = bool(worst <= INT8_TOLERANCE)
    return report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="pre-training checkpoint (best.pt)",
    )
    p.add_argument(
        "--probe", type=Path, required=True, help="probe.pt written by scjepa evaluate"
    )
    p.add_argument("--out", type=Path, required=True, help="artifact folder")
    p.add_argument(
        "--name", default=None, help="model name (default: scjepa-<dataset>)"
    )
    p.add_argument(
        "--version", default=None, help="model version (default: UTC timestamp)"
    )
    p.add_argument(
        "--dataset", help="data set for parity on real windows and the int8 check"
    )
    p.add_argument("--root", type=Path, help="data folder")
    p.add_argument(
        "--int8",
        action="store_true",
        help="also write a statically quantized int8 model for the CPU (needs --dataset)",
    )
    p.add_argument(
        "--fp16",
        action="store_true",
        help="also write an fp16 model for the CUDA provider (needs --dataset)",
    )
    p.add_argument(
        "--hop", type=int, default=100, help="serving hop recorded in the manifest"
    )


def run(args: argparse.Namespace) -> int:
    from service.manifest import (
        FP16_FILE,
        INT8_FILE,
        Manifest,
        Quantization,
        now_utc,
        write_manifest,
    )
    from training.data import downstream_splits, load_dataset

    probe = load_probe(args.probe)
    ckpt = load_checkpoint(args.checkpoint)
    served = build_served(args.checkpoint, probe)
    args.out.mkdir(parents=True, exist_ok=True)
    path = export_onnx(served, args.out / "model.onnx")

    rng = np.random.default_rng(0)
    v_in = len(probe["mask"])
    windows = {
        f"random_b{b}": (rng.normal(size=(b, 100, v_in)) * 3 + 1).astype(np.float32)
        for b in (1, 64)
    }
    splits = None
    if args.dataset:
        ds = load_dataset(args.dataset, args.root)
        if ds.channels != probe["channels"]:
            raise UserError(
                f"--dataset {args.dataset}: channels differ from those the probe was trained on"
            )
        splits = downstream_splits(ds)
        # the served graph takes ALL input channels; the samples hold the kept ones
        windows["real_test"] = _unmask(splits["test"].x, probe["mask"])
    par = parity(served, path, windows)
    if max(par.values()) > 1e-4:
        raise UserError(
            f"ONNX parity failed: max |risk difference| {max(par.values()):.2e} > 1e-4 ({par})"
        )

    quant = Quantization(dtype="fp32")
    metrics = probe["metrics"] | {"onnx_parity_max_abs": par}
    if (args.int8 or args.fp16) and splits is None:
        raise UserError(
            "--int8/--fp16 need --dataset (the metrics decide whether a variant is kept)"
        )
    full = (
        {k: _with_all_channels(s, probe["mask"]) for k, s in splits.items()}
        if splits
        else {}
    )
    for flag, name, key in (
        (args.int8, INT8_FILE, "int8"),
        (args.fp16, FP16_FILE, "fp16"),
    ):
        v_path = args.out / name
        if not flag:
            v_path.unlink(missing_ok=True)  # stale file from an earlier export
            continue
        if key == "int8":
            how = quantize_int8(path, v_path, served, full["train"].x[:256])
        else:
            convert_fp16(path, v_path)
            how = {"method": "fp16 weights and activations, float32 input/outputs"}
        check = variant_check(path, v_path, full, probe["threshold"]) | how
        metrics[f"{key}_check"] = check
        kept = "kept" if check["kept"] else "refused (file removed)"
        print(f"{key}: max metric drop {check['max_drop']:.4f} -> {kept}")
        if not check["kept"]:
            v_path.unlink()
            continue
        t = check["test"]
        deltas = {k: t["variant"][k] - t["fp32"][k] for k in t["fp32"]}
        if key == "int8":
            quant = quant.model_copy(
                update={
                    "metric_deltas": deltas,  # dtype/sha: write_manifest, from the file
                    "int8_method": how["method"],
                }
            )
        else:
            quant = quant.model_copy(update={"fp16_metric_deltas": deltas})

    manifest = Manifest(
        name=args.name or f"scjepa-{probe['dataset']}",
        version=args.version or time.strftime("%Y%m%d%H%M%S", time.gmtime()),
        created_at=now_utc(),
        git_commit=git_commit(),
        model_config=ckpt["config"],
        channels=probe["channels"],
        n_channels=len(probe["channels"]),
        channel_mask=probe["mask"],
        window=100,
        hop=args.hop,
        threshold=float(np.clip(probe["threshold"], 0.0, 1.0)),
        calibration=probe["probe"]["calibration"],
        probe_features=probe.get("features", "codes"),
        eval_metrics=metrics,
        training_data_fingerprint=probe.get("data_fingerprint", "unknown"),
        quantization=quant,
    )
    written = write_manifest(args.out, manifest)
    size = path.stat().st_size / 1e6
    print(f"wrote {args.out}/model.onnx ({size:.1f} MB) and manifest.json")
    print(f"parity max |risk diff|: {par}; variants: {written.quantization or 'none'}")
    return 0


def _unmask(x: np.ndarray, mask: list[bool]) -> np.ndarray:
    """(N, T, V_kept) -> (N, T, V_in) with zeros in the masked (constant) channels."""
    out = np.zeros((*x.shape[:2], len(mask)), dtype=np.float32)
    out[:, :, np.asarray(mask)] = x
    return out


def _with_all_channels(s: Any, mask: list[bool]) -> Any:
    from dataclasses import replace

    return replace(s, x=_unmask(s.x, mask))
