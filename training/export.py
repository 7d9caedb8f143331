"""`scjepa export`: the model artifact the service runs from, without PyTorch.

    scjepa export --checkpoint runs/msl/best.pt --probe results/msl/probe.pt --out artifacts/msl \
        [--dataset msl --root DIR --int8]

Writes ARTIFACT/model.onnx (window (B, 100, V_in) -> risk, channel_contrib, codes) and
ARTIFACT/manifest.json (schema: service/manifest.py). Parity with PyTorch is measured
and recorded. With --int8 a dynamically quantized model.int8.onnx is written and kept
only if its metrics on the validation and test splits stay within 0.5 points of fp32.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from model.export import ServedModel, export_onnx
from training.checkpoint import load_checkpoint, load_model
from training.errors import UserError
from training.probe import build_probe_net
from training.results import git_commit

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
    model = load_model(checkpoint)
    cfg = probe["probe"]["config"]
    expected = model.cfg.n_patches * model.cfg.n_codes
    if probe["n_features"] != expected:
        raise UserError(
            f"probe expects {probe['n_features']} features, checkpoint gives P*K = {expected}: probe and checkpoint do not belong together"
        )
    net = build_probe_net(probe["n_features"], cfg["hidden"], cfg["dropout"])
    net.load_state_dict(probe["state_dict"])
    cal = probe["probe"]["calibration"]
    platt = (cal["a"], cal["b"]) if cal["method"] == "platt" else (1.0, 0.0)
    return ServedModel(model, net, probe["mask"], platt).eval()


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


def int8_check(
    fp32: Path, int8: Path, splits: dict[str, Any], threshold: float
) -> dict[str, Any]:
    """Metrics of both models on val and test; int8 kept if no metric drops > 0.5 points."""
    from training.metrics import metrics

    report: dict[str, Any] = {}
    worst = 0.0
    for split in ("val", "test"):
        s = splits[split]
        a = metrics(s.y, onnx_scores(fp32, s.x), threshold)
        b = metrics(s.y, onnx_scores(int8, s.x), threshold)
        report[split] = {"fp32": a, "int8": b}
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
        help="also write a dynamically quantized model (needs --dataset)",
    )
    p.add_argument(
        "--hop", type=int, default=100, help="serving hop recorded in the manifest"
    )


def run(args: argparse.Namespace) -> int:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from service.manifest import Manifest, Quantization, now_utc, write_manifest
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
    if args.int8:
        if splits is None:
            raise UserError(
                "--int8 needs --dataset (the metrics decide whether int8 is kept)"
            )
        q_path = args.out / "model.int8.onnx"
        quantize_dynamic(str(path), str(q_path), weight_type=QuantType.QInt8)
        full = {k: _with_all_channels(s, probe["mask"]) for k, s in splits.items()}
        check = int8_check(path, q_path, full, probe["threshold"])
        metrics["int8_check"] = check
        if check["kept"]:
            t = check["test"]
            deltas = {k: t["int8"][k] - t["fp32"][k] for k in t["fp32"]}
            quant = Quantization(dtype="int8", metric_deltas=deltas)
        else:
            q_path.unlink()
    elif (args.out / "model.int8.onnx").exists():
        (args.out / "model.int8.onnx").unlink()  # stale file from an earlier export

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
        eval_metrics=metrics,
        training_data_fingerprint=probe.get("data_fingerprint", "unknown"),
        quantization=quant,
    )
    write_manifest(args.out, manifest)
    size = path.stat().st_size / 1e6
    print(f"wrote {args.out}/model.onnx ({size:.1f} MB) and manifest.json")
    print(f"parity max |risk diff|: {par}; weights: {quant.dtype}")
    return 0


def _unmask(x: np.ndarray, mask: list[bool]) -> np.ndarray:
    """(N, T, V_kept) -> (N, T, V_in) with zeros in the masked (constant) channels."""
    out = np.zeros((*x.shape[:2], len(mask)), dtype=np.float32)
    out[:, :, np.asarray(mask)] = x
    return out


def _with_all_channels(s: Any, mask: list[bool]) -> Any:
    from dataclasses import replace

    return replace(s, x=_unmask(s.x, mask))
