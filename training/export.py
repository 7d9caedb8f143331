"""`scjepa export`: the model artifact the service runs from, without PyTorch.

    scjepa export --checkpoint runs/msl/best.pt --probe results/msl \\
        --out artifacts/msl [--dataset msl --root DIR --int8]

``--probe RESULTS_DIR`` serves the model `scjepa evaluate` chose on the non-test data
(probe-served.pt: cross-validation over train + validation, training/evaluate/select.py;
its leaderboard, train and validation figures only, goes into the manifest's
eval_metrics); a probe file serves that probe, `scjepa calibrate`'s label-free one
included (training/calibrate.py).

Writes ARTIFACT/model.onnx (window (B, T, V_in) -> risk, channel_contrib, codes, and
features, the probe's input; T = the model's seq_len) and ARTIFACT/manifest.json
(schema: service/manifest.py). Parity with PyTorch is checked and recorded
(:func:`parity`).

The input-drift monitor: where the probe file has a ``novelty`` record (`scjepa
evaluate` and `scjepa calibrate` write one), the graph has a fifth output,
``novelty`` (B,), and the manifest its ``novelty`` figures. It is the window's
smoothed rank among normal calibration windows (evaluate: the validation split's;
calibrate: its own) by its kNN and PCA scores (their reference: the normal windows
the probe was fitted on), `scjepa calibrate`'s label-free risk whatever the probe
reads (about 0.5 for a typical normal window, near 1 for one unlike any);
``expected_share`` of the calibration windows reach ``level`` (0.99), so a far
larger share of served windows says the streams no longer resemble the data the
model and its threshold were fitted and checked on. A probe file without the record
exports without the output (one line says so).

Two optional variants, each kept only if its metrics on the validation and test
splits stay within 0.5 points of fp32 (the deltas are recorded in the manifest) and,
with the monitor, its novelty within NOVELTY_TOLERANCE (0.01) of fp32's:

- ``--int8`` (CPU): model.int8.onnx, the encoder's Transformer MatMuls statically
  quantized (QDQ, int8 weights, uint8 activations with ranges calibrated on the probe's
  training windows). Static, not dynamic, quantization: dynamic ranges are taken per
  batch, so a window's risk would depend on which windows share its micro-batch
  (docs/notebook/benchmarks.md). The tokenizer, codebook and probe stay fp32: the
  cosine-softmax at tau = 0.1 amplifies any error in front of it.
- ``--fp16`` (GPU): model.fp16.onnx, every float tensor in fp16 except the float32
  input and outputs, for the CUDA execution provider.

The manifest's threshold, at which the service alerts, is by default set at the
false-alarm budget `scjepa evaluate` was run with (``--fa-budget``, 1 per 1,000
windows) three times, and the most cautious (highest) is served (``--threshold
cv-budget``; results.md's "What an operator gets"): on the probe's validation split,
on the out-of-fold risks of the served model's cross-validation (every train +
validation block, training/evaluate/select.py), and on those risks as quantiles
within their block, carried to the probe as that quantile of its validation risks
(results-notes.md, 2026-11-28, eleventh session). The
first alone (``--threshold budget``, the operating point of results.md's event
tables, and the default for a probe chosen on validation alone) lets through more
false alarms on data it was not set on (results-notes.md, 2026-11-28, tenth
session). ``--threshold f1`` serves the
F1-optimal threshold, which alerts far more often (2026-11-27, seventh session). The
manifest's eval_metrics.threshold says which, with every value and the budget.
``--fa-budget`` serves another of the served model's operating points (the budgets
`scjepa evaluate` set thresholds at) under the same rule, at each never below a looser
budget's threshold, and none where the out-of-fold risks held no threshold within it
(results-notes.md, 2026-11-28, twelfth session); the manifest lists them all with the
test split's figures at each (thirteenth session). The
manifest's hop (how often the service scores a stream) is by default the one the
threshold was set on: the evaluation's dense stride for the budget thresholds (so the
service pages on the windows the event figures count), the model's window for the F1
one (2026-11-27, eighth session).

:func:`export_artifact` does the work; `scjepa demo` calls it too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from training.data import Dataset, Samples
from training.errors import UserError
from training.evaluate.probe import SavedProbe
from training.evaluate.results import git_commit
from training.evaluate.select import (
    OPERATING_BUDGETS,
    cautious,
    served_at,
)
from training.strict_json import json_num

if TYPE_CHECKING:  # torch and the model load where they run: `--help` stays light
    import onnx

    from model import SCJEPA
    from model.export import ServedModel
    from service.manifest import Manifest

INT8_TOLERANCE = 0.005  # 0.5 points on every metric
# a variant's largest |novelty difference| from fp32 on validation and test windows:
# beyond it the variant would move windows across the monitor's level (0.99) and its
# drift warning with them, so it is refused as a metric drop would refuse it
NOVELTY_TOLERANCE = 0.01


def build_served(model: SCJEPA, probe: SavedProbe) -> ServedModel:
    """The served graph of ``model`` + ``probe`` (with the probe's fine-tuned weights
    in a copy of ``model``, where it has them); refuses a probe fitted on another
    model's features."""
    import copy

    from model.detectors import DETECTORS, Detectors
    from model.export import NoveltyMonitor, ServedModel
    from model.stats import N_STATS, WindowStats

    try:
        parts = probe.parts
    except ValueError as e:
        raise UserError(f"probe: {e}") from None
    codes = "codes" in parts
    expected = model.cfg.n_tokens * model.cfg.n_codes if codes else 0
    stats = None
    if "stats" in parts:
        scale = probe.stats_scale
        if scale is None:
            raise UserError(f"a {probe.features} probe without its statistics' scaling")
        stats = WindowStats(scale["mean"], scale["std"], model.cfg.seq_len)
        expected += N_STATS
    names = tuple(p for p in parts if p in DETECTORS)
    detectors = None
    if names:
        if probe.detectors is None:
            raise UserError(
                f"a {probe.features} probe without its detectors' constants"
            )
        detectors = Detectors(names, probe.detectors)
        expected += len(names)
    if probe.n_features != expected:
        raise UserError(
            f"probe expects {probe.n_features} features, checkpoint gives {expected} "
            f"({probe.features}): probe and checkpoint do not belong together"
        )
    if probe.encoder_state is not None:
        model = copy.deepcopy(model)
        try:
            model.load_state_dict(probe.encoder_state)
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(
                f"the probe's fine-tuned weights do not fit the checkpoint's model "
                f"({first}): probe and checkpoint do not belong together"
            ) from None
    novelty = (
        None if probe.novelty is None else NoveltyMonitor.from_record(probe.novelty)
    )
    return ServedModel(
        model, probe.build_net(), probe.mask, probe.platt, stats, detectors, codes,
        novelty,
    ).eval()  # fmt: skip


def onnx_outputs(
    path: Path, x: np.ndarray, outputs: tuple[str, ...], batch: int = 256
) -> list[np.ndarray]:
    """The graph's ``outputs`` on windows ``x``, run ``batch`` windows at a time."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    runs = [
        sess.run(list(outputs), {"window": x[i : i + batch]})
        for i in range(0, len(x), batch)
    ]
    return [np.concatenate([r[k] for r in runs]) for k in range(len(outputs))]


# The parity check (:func:`parity`). The probe's features are float32 outputs of a deep
# graph: PyTorch and onnxruntime order their sums differently, so they agree to about
# 4e-4 relative on the code probabilities and 3e-4 absolute on the detector scores
# (z-scored logs), measured on MSL's and SMD-19's real test windows. A wrong input,
# constant or op moves them far more: 1 % noise on a tiny model's codebook, 9 times the
# tolerance (its risk moved 9e-5, inside the end-to-end bar), its codebook permuted, 900.
RISK_ATOL = 1e-4
FEATURES_RTOL = 1e-3
FEATURES_ATOL = 1e-3
# channel_contrib: each channel's share of the variable-wise max (model/export.py),
# 1e-7 apart on MSL's and SMD's real test windows; a (token, code) maximum credited
# to another channel moves a share by its weight, orders of magnitude more. Recorded,
# not held: where every channel is nearly flat (std far below sqrt(RevIN's eps), the
# edge set's 1e-12 window) the channels tie on every maximum and float noise names
# the winner, in PyTorch as in onnxruntime
CONTRIB_ATOL = 1e-3
# flat channels at these levels (a forward-filled sensor): RevIN's float32 mean of
# one at 98765.43 missed it by an ulp, which PyTorch and onnxruntime each amplified
# into their own +-2.5 spikes (model/patching.py, revin)
EDGE_LEVELS = (0.0, -0.0, 0.1, 230.7, 98765.43, 1e6)


def edge_windows(rng: np.random.Generator, window: int, v_in: int) -> np.ndarray:
    """Windows where float32 arithmetic is fragile, for the parity check: one channel
    (and every channel) flat at each of :data:`EDGE_LEVELS`, forward-filled steps, a
    level of 1e6 under unit noise, magnitudes 1e-12 and 1e12."""
    base = (rng.normal(size=(2 * len(EDGE_LEVELS) + 4, window, v_in)) * 3 + 1).astype(
        np.float32
    )
    for i, level in enumerate(EDGE_LEVELS):
        base[2 * i, :, i % v_in] = level
        base[2 * i + 1] = level
    k = 2 * len(EDGE_LEVELS)
    base[k] = np.repeat(base[k, ::10], 10, axis=0)[:window]  # forward-filled
    base[k + 1] += 1e6
    base[k + 2] *= 1e-12
    base[k + 3] *= 1e12
    return base


def parity(
    served: ServedModel, path: Path, windows: dict[str, np.ndarray]
) -> dict[str, dict[str, float | int]]:
    """The ONNX graph against PyTorch, per named window set:

    - ``contrib_max_abs`` and ``contrib_windows_off``: max |channel_contrib_onnx -
      channel_contrib_torch| (the service's top channels) and the windows beyond
      CONTRIB_ATOL, recorded (near-flat windows tie, see CONTRIB_ATOL);
    - ``features_excess``: the largest |features_onnx - features_torch| as a multiple of
      its tolerance (FEATURES_ATOL + FEATURES_RTOL * |features_torch|): at most 1 passes;
    - ``head_max_abs``: max |risk_onnx - the PyTorch probe's risk on onnxruntime's
      features|, held to RISK_ATOL: the probe part, exactly;
    - ``risk_max_abs`` and ``risk_windows_off``: end to end, max |risk_onnx -
      risk_torch| and the windows beyond RISK_ATOL. Held to RISK_ATOL for a smooth
      probe; a tree probe's risk jumps where a feature crosses a split, so a window whose
      feature lies within its float noise of a split may take the other branch
      (results-notes.md, 2026-11-29, nineteenth and twentieth sessions): for trees the
      two checks above carry the bar, and these are recorded;
    - ``novelty_max_abs`` and ``novelty_windows_off`` (a graph with the input-drift
      monitor): the same end to end for its ``novelty`` output, held to RISK_ATOL as
      the label-free probe's risk, which is the same smooth rank of the same scores.
    """
    import torch

    from model.export import NOVELTY

    out: dict[str, dict[str, float | int]] = {}
    monitor = served.novelty is not None
    for name, x in windows.items():
        risk, contrib, feats, *novelty = onnx_outputs(
            path, x, ("risk", "channel_contrib", "features", NOVELTY)[: 3 + monitor]
        )
        with torch.no_grad():
            ref, ref_contrib, _, ref_feats, *ref_novelty = served(torch.from_numpy(x))
            head = served.head(torch.from_numpy(feats)).numpy()
        ref, ref_feats = ref.numpy(), ref_feats.numpy()
        off = np.abs(risk - ref)
        c_off = np.abs(contrib - ref_contrib.numpy())  # (B, V_in)
        tol = FEATURES_ATOL + FEATURES_RTOL * np.abs(ref_feats)
        out[name] = {
            "contrib_max_abs": float(c_off.max()),
            "contrib_windows_off": int((c_off.max(1) > CONTRIB_ATOL).sum()),
            "features_excess": float((np.abs(feats - ref_feats) / tol).max()),
            "head_max_abs": float(np.abs(risk - head).max()),
            "risk_max_abs": float(off.max()),
            "risk_windows_off": int((off > RISK_ATOL).sum()),
        }
        if monitor:
            n_off = np.abs(novelty[0] - ref_novelty[0].numpy())
            out[name]["novelty_max_abs"] = float(n_off.max())
            out[name]["novelty_windows_off"] = int((n_off > RISK_ATOL).sum())
    return out


def parity_failure(par: dict[str, dict[str, float | int]], trees: bool) -> str | None:
    """Why :func:`parity`'s figures fail the bar (None: they pass)."""
    for name, p in par.items():
        if p["features_excess"] > 1:
            return (
                f"{name}: the probe's features differ by {p['features_excess']:.2g} "
                f"times their tolerance ({FEATURES_ATOL:g} + {FEATURES_RTOL:g} * |x|)"
            )
        if p["head_max_abs"] > RISK_ATOL:
            return (
                f"{name}: on the same features the probe's risk differs by "
                f"{p['head_max_abs']:.2e} > {RISK_ATOL:g}"
            )
        if not trees and p["risk_max_abs"] > RISK_ATOL:
            return (
                f"{name}: max |risk difference| {p['risk_max_abs']:.2e} > {RISK_ATOL:g}"
            )
        if p.get("novelty_max_abs", 0.0) > RISK_ATOL:
            return (
                f"{name}: max |novelty difference| {p['novelty_max_abs']:.2e} > "
                f"{RISK_ATOL:g}"
            )
    return None


def block_matmuls(model: onnx.ModelProto, served: ServedModel) -> list[str]:
    """Names of the MatMul nodes that apply the encoder's Transformer-block weights.

    Found by content, not by name: the exporter renames and transposes weights, so each
    block Linear's weight (transposed, as ONNX's MatMul holds it) is matched against the
    graph's initializers byte for byte.
    """
    import torch
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

    # onnxruntime ships no type information: its base class is Any to mypy
    class Windows(CalibrationDataReader):  # type: ignore[misc]
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
    fp32: Path,
    variant: Path,
    splits: dict[str, Samples],
    threshold: float,
    novelty: bool = False,
) -> dict[str, Any]:
    """Metrics of both models on val and test (the splits that have windows); kept if
    no metric drops > 0.5 points. With ``novelty`` (a graph with the input-drift
    monitor) the largest |novelty difference| is recorded too, and above
    NOVELTY_TOLERANCE refuses the variant (it must carry the output: onnxruntime
    refuses a name the graph lacks)."""
    from training.evaluate.metrics import metrics

    report: dict[str, Any] = {}
    worst = moved = 0.0
    for split in ("val", "test"):
        s = splits[split]
        if not len(s):  # the serving split of a data set split by entity: no test
            continue
        names = ("risk", "novelty") if novelty else ("risk",)
        (ra, *na), (rb, *nb) = (onnx_outputs(m, s.x, names) for m in (fp32, variant))
        a, b = metrics(s.y, ra, threshold), metrics(s.y, rb, threshold)
        report[split] = {"fp32": a, "variant": b}
        report[f"{split}_max_abs_risk_diff"] = float(np.abs(ra - rb).max())
        if novelty:
            diff = float(np.abs(na[0] - nb[0]).max())
            report[f"{split}_max_abs_novelty_diff"] = diff
            moved = max(moved, diff)
        worst = max(
            worst, *(a[k] - b[k] for k in a if np.isfinite(a[k]) and np.isfinite(b[k]))
        )
    report["max_drop"] = worst
    if novelty:
        report["max_novelty_diff"] = moved
    report["kept"] = bool(worst <= INT8_TOLERANCE and moved <= NOVELTY_TOLERANCE)
    return report


class _Steps:
    """An export's progress on stderr: one line per step, numbered, with the time since
    the start (tracing, the parity run on the test windows and the variants' checks take
    seconds to minutes; a line per step reads the same in a terminal and in a log)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.perf_counter()

    def __call__(self, what: str) -> None:
        self.done += 1
        took = time.perf_counter() - self.t0
        print(
            f"export [{self.done}/{self.total}] {what} ({took:.1f} s)", file=sys.stderr
        )


def export_artifact(
    *,
    model: SCJEPA,
    probe: SavedProbe,
    out: Path,
    name: str | None = None,
    version: str | None = None,
    ds: Dataset | None = None,
    int8: bool = False,
    fp16: bool = False,
    hop: int | None = None,
    threshold: str | None = None,
    fa_budget: float | None = None,
) -> Manifest:
    """Write ``out``/model.onnx (+ the variants asked for and kept) and manifest.json.

    ``ds``: the probe's data set, for parity on its real test windows and the variants'
    metrics (the int8/fp16 variants need it). ``name`` defaults to scjepa-<dataset>,
    ``version`` to a UTC timestamp, ``hop`` to the windows the threshold was set on
    (:func:`served_hop`).
    ``threshold``: "cv-budget", "budget" or "f1" (:func:`served_threshold`; None:
    :func:`default_rule`), at the false-alarm budget ``fa_budget`` (one of the probe's
    operating points; None: the evaluation's). Returns the manifest
    as written. The files are written and checked in a folder inside ``out`` and
    moved over the served ones only once every check passed.
    """
    if (int8 or fp16) and probe.kind == "rarity":
        raise UserError(
            "--int8/--fp16: a variant is kept only where its metrics on labelled test "
            "windows stay within half a point; a label-free model (scjepa calibrate) "
            "has none to check it on: export it without them"
        )
    if (int8 or fp16) and ds is None:
        raise UserError(
            "--int8/--fp16 need --dataset (the metrics decide whether a variant is kept)"
        )
    if ds is not None and ds.channels != probe.channels:
        raise UserError(
            f"--dataset {ds.name}: channels differ from those the probe was trained on"
        )
    if (
        ds is not None
        and probe.kind == "rarity"
        and probe.data_fingerprint not in (None, ds.fingerprint())
    ):  # its parity windows are cut as the calibration windows: other data have none
        raise UserError(
            f"--dataset {ds.name}: not the data the label-free probe was calibrated "
            "on; give scjepa calibrate's --dataset and --root (and its csv options), "
            "or leave --dataset out"
        )
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file, not a folder")
    if hop is not None and hop < 1:
        raise UserError(f"--hop {hop}: a window is scored every hop >= 1 readings")
    alert_at, threshold_info = served_threshold(probe, threshold, fa_budget)
    window = model.cfg.seq_len
    hop = served_hop(threshold_info, window) if hop is None else hop
    step = _Steps(4 + int8 + fp16)
    step(f"building the served graph (probe reads {probe.features})")
    served = build_served(model, probe)
    if probe.novelty is None:
        print(
            "note: the probe file has no novelty record, so the artifact has no "
            "input-drift monitor (no novelty output); re-run `scjepa evaluate` or "
            "`scjepa calibrate` to get one",
            file=sys.stderr,
        )
    out.mkdir(parents=True, exist_ok=True)
    # written and checked beside the served files, moved over them only at the end:
    # a failed or interrupted export leaves the artifact being served as it was
    stage = Path(tempfile.mkdtemp(prefix=".export-", dir=out))
    try:
        return _export_into(
            stage, out, step, served, model, probe, name, version, ds, int8, fp16,
            hop, alert_at, threshold_info,
        )  # fmt: skip
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _export_into(
    stage: Path,
    out: Path,
    step: _Steps,
    served: ServedModel,
    model: SCJEPA,
    probe: SavedProbe,
    name: str | None,
    version: str | None,
    ds: Dataset | None,
    int8: bool,
    fp16: bool,
    hop: int,
    alert_at: float,
    threshold_info: dict[str, Any],
) -> Manifest:
    """:func:`export_artifact`'s work, written into ``stage`` and then published."""
    from model.export import export_onnx
    from service.manifest import (
        FP16_FILE,
        INT8_FILE,
        Manifest,
        Novelty,
        Quantization,
        now_utc,
        write_manifest,
    )
    from training.data import SERVE, downstream_splits, serving_view

    window = model.cfg.seq_len
    step("tracing it to ONNX")
    path = export_onnx(served, stage / "model.onnx")

    rng = np.random.default_rng(0)
    v_in = len(probe.mask)
    windows = {
        f"random_b{b}": (rng.normal(size=(b, window, v_in)) * 3 + 1).astype(np.float32)
        for b in (1, 64)
    }
    windows["edge"] = edge_windows(rng, window, v_in)
    # the served graph takes ALL input channels; the samples hold the kept ones
    full: dict[str, Samples] = {}
    if ds is not None and probe.kind == "rarity":  # the windows it was calibrated
        # on: unlabelled data have no test split
        from training.calibrate import split_normal

        lf = probe.metrics["label_free"]
        cal = np.concatenate(
            split_normal(ds, window, lf["stride"], lf["calibration_frac"])[1]
        )
        pick = np.linspace(0, len(cal) - 1, min(256, len(cal))).astype(int)
        windows["real_calibration"] = _unmask(cal[pick].astype(np.float32), probe.mask)
    elif ds is not None:
        # the model served for a data set split by entity may be fitted on every
        # entity but fold 0's validation ones: it has no test windows of its own
        serving = probe.metrics.get("fold", {}).get("fold") == SERVE
        splits = downstream_splits(serving_view(ds) if serving else ds, window)
        full = {k: _with_all_channels(s, probe.mask) for k, s in splits.items()}
        real = "val" if serving else "test"
        windows[f"real_{real}"] = full[real].x
    n = sum(len(w) for w in windows.values())
    step(f"parity with PyTorch on {n} windows ({', '.join(windows)})")
    par = parity(served, path, windows)
    failed = parity_failure(par, probe.kind == "trees")
    if failed is not None:
        raise UserError(f"ONNX parity with PyTorch failed: {failed}")

    quant = Quantization(dtype="fp32")
    metrics = probe.metrics | {"onnx_parity": par, "threshold": threshold_info}
    for flag, file, key in ((int8, INT8_FILE, "int8"), (fp16, FP16_FILE, "fp16")):
        v_path = stage / file
        if not flag:
            continue
        step(f"{key} variant: converting and checking its metrics")
        if key == "int8":
            how = quantize_int8(path, v_path, served, full["train"].x[:256])
        else:
            convert_fp16(path, v_path)
            how = {"method": "fp16 weights and activations, float32 input/outputs"}
        check = (
            variant_check(
                path, v_path, full, probe.threshold, served.novelty is not None
            )
            | how
        )
        metrics[f"{key}_check"] = check
        kept = "kept" if check["kept"] else "refused (file removed)"
        moved = check.get("max_novelty_diff")
        also = "" if moved is None else f", max novelty difference {moved:.4f}"
        print(f"{key}: max metric drop {check['max_drop']:.4f}{also} -> {kept}")
        if not check["kept"]:
            v_path.unlink()
            continue
        t = check["test" if "test" in check else "val"]
        deltas = {k: json_num(t["variant"][k] - t["fp32"][k]) for k in t["fp32"]}
        if key == "int8":
            # dtype and sha256: write_manifest, from the file
            update = {"metric_deltas": deltas, "int8_method": how["method"]}
        else:
            update = {"fp16_metric_deltas": deltas}
        quant = quant.model_copy(update=update)

    novelty = None
    if probe.novelty is not None:
        novelty = Novelty(**{k: probe.novelty[k] for k in Novelty.model_fields})
    manifest = Manifest(
        name=name or f"scjepa-{probe.dataset}",
        version=version or time.strftime("%Y%m%d%H%M%S", time.gmtime()),
        created_at=now_utc(),
        git_commit=git_commit(),
        model_config=model.cfg.to_dict(),
        channels=probe.channels,
        n_channels=len(probe.channels),
        channel_mask=probe.mask,
        window=window,
        hop=hop,
        threshold=alert_at,
        calibration=dict(probe.probe["calibration"]),
        probe_features=probe.features,
        encoder="pre-trained" if probe.encoder_state is None else "fine-tuned",
        eval_metrics=metrics,
        training_data_fingerprint=probe.data_fingerprint,
        quantization=quant,
        novelty=novelty,
    )
    step("writing manifest.json")
    written = write_manifest(stage, manifest)
    size = path.stat().st_size / 1e6
    _publish(stage, out, (path.name, INT8_FILE, FP16_FILE))
    print(f"wrote {out}/model.onnx ({size:.1f} MB) and manifest.json")
    worst = {k: f"{p['risk_max_abs']:.1e}" for k, p in par.items()}
    split = {k: p["risk_windows_off"] for k, p in par.items() if p["risk_windows_off"]}
    q = written.quantization
    variants = [
        k
        for k, sha in (("int8", q and q.int8_sha256), ("fp16", q and q.fp16_sha256))
        if sha
    ]
    print(
        f"parity max |risk diff|: {worst}"
        + (f" (windows at a split: {split})" if split else "")
        + f"; variants: {', '.join(variants) or 'none'}"
    )
    return written


def _publish(stage: Path, out: Path, graphs: tuple[str, ...]) -> None:
    """Move the checked files from ``stage`` over ``out``'s, the manifest last (each
    move atomic: a reader sees the old file or the new one); then remove a variant the
    new manifest does not list. A service reloading within the moves finds a graph
    its manifest does not hash, refuses it and keeps serving the old model."""
    from service.manifest import MANIFEST_FILE

    moved = [name for name in graphs if (stage / name).is_file()]
    for name in moved:
        os.replace(stage / name, out / name)
    os.replace(stage / MANIFEST_FILE, out / MANIFEST_FILE)
    for name in set(graphs) - set(moved):  # a variant of an earlier export
        (out / name).unlink(missing_ok=True)


THRESHOLDS = ("cv-budget", "budget", "f1")


def holds_budget(probe: SavedProbe) -> bool:
    """Whether the probe has a budget threshold (one held the budget on validation)."""
    b = probe.budget_threshold
    return b is not None and bool(np.isfinite(b))


def default_rule(probe: SavedProbe) -> str:
    """ "cv-budget" where `scjepa evaluate` set one (the served model chosen by
    cross-validation), else "budget"."""
    return "budget" if probe.cv_budget_threshold is None else "cv-budget"


def served_threshold(
    probe: SavedProbe, rule: str | None = None, fa_budget: float | None = None
) -> tuple[float, dict[str, Any]]:
    """The threshold the service alerts at, and the manifest's record of it.

    "budget": the lowest threshold that kept the probe's validation false alarms
    within the evaluation's budget; validation is the split the probe was stopped and
    calibrated on, and on data it was not set on such a threshold lets through more
    (results-notes.md, 2026-11-28, tenth session). "cv-budget" (the default where the
    probe has one, :func:`default_rule`): the most cautious (highest) of that one, the
    lowest that kept the out-of-fold false alarms of every train + validation CV block
    within the budget, and the quantile of the probe's validation risks that kept them
    within it in quantiles of each block (training.evaluate.select.cautious; older
    probe files lack the last). A probe file without
    the one asked for, or whose data no threshold kept within the budget, is refused
    with what to do. "f1": the F1-optimal threshold on validation.

    ``fa_budget`` (false alarms per 1,000 windows; None: the evaluation's) serves
    another of the probe's operating points (``probe.operating_points``, set by
    `scjepa evaluate` at training.evaluate.select.OPERATING_BUDGETS and its own
    budget) under the same rule. With operating points, "cv-budget" is
    training.evaluate.select.served_thresholds at each: also never below a looser
    budget's threshold, and refused where neither out-of-fold estimate held the
    budget. The record lists every operating point with the threshold the rule gives
    there and, under the served rule, the test split's figures there.
    """
    rule = default_rule(probe) if rule is None else rule
    if rule not in THRESHOLDS:
        raise UserError(f"--threshold {rule!r}: choose one of {', '.join(THRESHOLDS)}")
    if probe.kind == "rarity" and rule != "budget":
        raise UserError(
            f"--threshold {rule}: a label-free probe (scjepa calibrate) has only the "
            "thresholds its calibration windows set at each budget: leave --threshold "
            "out, or give --threshold budget"
        )
    own = (probe.budget or {}).get("false_alarms_per_1000")
    budget, cv = probe.budget_threshold, probe.cv_budget_threshold
    quantile = probe.cv_quantile_threshold
    if fa_budget is not None and (own is None or not np.isclose(fa_budget, own)):
        if rule == "f1":
            raise UserError(
                "--fa-budget sets a false-alarm budget, --threshold f1 serves none: "
                "use one of the two"
            )
        point = _operating_point(probe, fa_budget)
        budget, cv = point["budget_threshold"], point["cv_budget_threshold"]
        quantile = point["cv_quantile_threshold"]
        if rule == "budget":  # the out-of-fold thresholds are not served under it
            cv = quantile = None
        own = point["false_alarms_per_1000"]  # as the file spells it (3 for 3.00001)
    info: dict[str, Any] = {
        "rule": rule,
        # a label-free probe has no F1 threshold (no labels): its file's threshold
        # field holds the budget's, which the record would pass off as an F1 point
        "f1_threshold": None if probe.kind == "rarity" else float(probe.threshold),
        # None where there is none (JSON has no infinity)
        "budget_threshold": json_num(budget),
        "cv_budget_threshold": json_num(cv),
        "cv_quantile_threshold": json_num(quantile),
        **(probe.budget or {}),  # false_alarms_per_1000, lookback, stride
    }
    if own is not None:
        info["false_alarms_per_1000"] = float(own)
    # the threshold "cv-budget" serves at each operating point (none in older files)
    served = served_at(probe.operating_points or [])
    if probe.operating_points and rule != "f1":
        info["operating_points"] = [
            _point_record(p, p["budget_threshold"])
            if rule == "budget"  # (the test figures are the served rule's)
            else _point_record(p, served[p["false_alarms_per_1000"]], p.get("test"))
            for p in probe.operating_points
        ]
    within = f"{own:g} per 1,000 windows" if own else "the budget"
    if rule == "f1":
        f1 = (probe.metrics.get("val") or {}).get("f1")
        if f1 is None or not np.isfinite(f1):  # no anomalous validation window
            raise UserError(
                "--threshold f1: the probe's validation split has no anomalous "
                "window, so no F1 threshold was chosen on it: export with a "
                "false-alarm budget (leave --threshold out)"
            )
        value = probe.threshold
    elif rule == "cv-budget":
        if cv is None:
            raise UserError(
                "the probe file has no cross-fitted budget threshold (its served "
                "model was not chosen by cross-validation, or the file is older): "
                "evaluate again, or export with --threshold budget"
            )
        # the points' rule (a tighter budget never below a looser one's; none
        # where no out-of-fold estimate held it); older files: the three's highest
        value = (
            served[own]
            if served and own is not None
            else cautious(budget, cv, quantile)
        )
        if not np.isfinite(value):
            raise UserError(
                "the out-of-fold risks of the cross-validation held no threshold "
                f"within {within}, and validation's few windows do not certify one "
                "alone: export with a larger --fa-budget, or with --threshold f1"
            )
    elif budget is None:
        raise UserError(
            "the probe file has no false-alarm-budget threshold (written before "
            "scjepa evaluate recorded one): evaluate again, or export with "
            "--threshold f1"
        )
    elif info["budget_threshold"] is None:  # inf: none held the budget
        raise UserError(
            f"no threshold kept the probe's validation false alarms within {within}: "
            "export with a larger --fa-budget, or with --threshold f1"
        )
    else:
        value = budget
    return float(np.clip(value, 0.0, 1.0)), info


def _operating_point(probe: SavedProbe, fa_budget: float) -> dict[str, Any]:
    """The probe's operating point at ``fa_budget``; refused with the ones it has."""
    points = probe.operating_points or []
    for p in points:
        if np.isclose(p["false_alarms_per_1000"], fa_budget):
            return p
    have = {float(p["false_alarms_per_1000"]) for p in points}
    if (own := (probe.budget or {}).get("false_alarms_per_1000")) is not None:
        have.add(float(own))
    listed = ", ".join(f"{b:g}" for b in sorted(have)) or (
        "none (the file is older than operating points)"
    )
    raise UserError(
        f"--fa-budget {fa_budget:g}: the probe file has thresholds at {listed} false "
        "alarms per 1,000 windows; choose one of them, or evaluate again with "
        f"--fa-budget {fa_budget:g}"
    )


def _point_record(
    p: dict[str, Any], threshold: float, test: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One operating point as the manifest lists it: the threshold served there
    (None where none held the budget) and the test split's figures at it where the
    evaluation measured them (under the "cv-budget" rule: protocol.point_figures), and
    a label-free probe's calibration figures (training/calibrate.py)."""
    return (
        {
            "false_alarms_per_1000": p["false_alarms_per_1000"],
            "threshold": json_num(threshold),
        }
        | ({"test": test} if test else {})
        | ({"calibration": p["calibration"]} if "calibration" in p else {})
    )


def served_hop(threshold_info: dict[str, Any], window: int) -> int:
    """The windows the served threshold was set on, the manifest's default hop: the
    evaluation's dense stride for the budget threshold, the model's window for the F1
    one. At another hop the budget threshold keeps about its share of windows in false
    alert (every hop's windows are a sample of the dense ones), and a sparser hop warns
    of fewer incidents (results-notes.md, 2026-11-27, eighth session)."""
    stride = threshold_info.get("stride")
    budgeted = threshold_info["rule"] in ("budget", "cv-budget")
    return int(stride) if budgeted and stride else window


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="pre-training checkpoint (best.pt)",
    )
    p.add_argument(
        "--probe",
        type=Path,
        required=True,
        help="the results folder of `scjepa evaluate` (serves the model chosen on "
        "validation, probe-served.pt), or one probe file written there (probe.pt: "
        "the spec's probe; probe-stats.pt: codes + window statistics)",
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
        "--hop",
        type=int,
        default=None,
        help="serving hop recorded in the manifest (default: the windows the "
        "threshold was set on: the evaluation's stride for the budget threshold, the "
        "model's window for the F1 one)",
    )
    p.add_argument(
        "--threshold",
        choices=THRESHOLDS,
        default=None,
        help="the threshold the service alerts at: 'budget', the lowest that kept "
        "validation false alarms within scjepa evaluate's --fa-budget (the default "
        "for a probe chosen on validation alone); 'cv-budget' (the default "
        "otherwise), the highest of that, the same on the out-of-fold risks of "
        "every train + validation block, and the same in quantiles of each block "
        "carried to the probe's validation risks; 'f1', the F1-optimal one on "
        "validation (far more alerts)",
    )
    p.add_argument(
        "--fa-budget",
        type=float,
        default=None,
        help="false alarms per 1,000 scored windows the threshold keeps: one of the "
        "probe's operating points (scjepa evaluate sets them at "
        + ", ".join(f"{b:g}" for b in OPERATING_BUDGETS)
        + " and at its own --fa-budget, which is the default); the manifest lists "
        "them all with what the test split measured at each",
    )
    from training.data.cli import add_table_arguments

    add_table_arguments(p)


def run(args: argparse.Namespace) -> int:
    from training.data import load_dataset
    from training.data.cli import table_options
    from training.evaluate.protocol import SERVED_PROBE
    from training.pretrain.checkpoint import file_sha256, load_model

    path = args.probe / SERVED_PROBE if args.probe.is_dir() else args.probe
    probe = SavedProbe.load(path)
    model = load_model(args.checkpoint)
    if probe.checkpoint_sha256 not in (None, file_sha256(args.checkpoint)):
        raise UserError(
            f"--checkpoint {args.checkpoint}: not the checkpoint {path} was fitted on "
            f"({probe.checkpoint}, sha256 {probe.checkpoint_sha256[:12]}...): the "
            "probe reads that model's features; export with that checkpoint"
        )
    ds = (
        load_dataset(args.dataset, args.root, **table_options(args, args.dataset))
        if args.dataset
        else None
    )
    m = export_artifact(
        model=model,
        probe=probe,
        out=args.out,
        name=args.name,
        version=args.version,
        ds=ds,
        int8=args.int8,
        fp16=args.fp16,
        hop=args.hop,
        threshold=args.threshold,
        fa_budget=args.fa_budget,
    )
    if fold := probe.metrics.get("fold"):  # a data set split by entity
        which = (
            f"fold {fold['fold']}'s model, fitted on {len(fold['fitted_on'])} entities "
            f"and tested on {', '.join(fold['tested_on'])}"
            if fold["tested_on"]
            else f"the model fitted on {len(fold['fitted_on'])} entities, every one "
            f"but those it was validated on ({', '.join(fold['validated_on'])}); its "
            "test figures are the folds' models'"
        )
        print(
            f"note: {probe.dataset} is split by entity into {fold['of']} folds; this "
            f"is {which} (eval_metrics.fold)",
            file=sys.stderr,
        )
    elif held := probe.metrics.get("entities"):  # split in time within each entity
        print(
            f"note: {probe.dataset} is split in time within each entity; this model "
            f"was fitted on the earlier stretches of {len(held['fitted_on'])} entities "
            f"and tested on the latest stretches of {len(held['tested_on'])}: its "
            "figures are of these entities, not of new ones (eval_metrics.entities)",
            file=sys.stderr,
        )
    own = served_hop(m.eval_metrics["threshold"], m.window)
    if m.hop != own:
        print(
            f"note: --hop {m.hop}: the threshold was set on a window every {own} steps; "
            "it keeps about the same share of windows in false alert, and warns of "
            "fewer incidents the sparser the hop",
            file=sys.stderr,
        )
    return 0


def _unmask(x: np.ndarray, mask: list[bool]) -> np.ndarray:
    """(N, T, V_kept) -> (N, T, V_in) with zeros in the masked (constant) channels."""
    out = np.zeros((*x.shape[:2], len(mask)), dtype=np.float32)
    out[:, :, np.asarray(mask)] = x
    return out


def _with_all_channels(s: Samples, mask: list[bool]) -> Samples:
    return replace(s, x=_unmask(s.x, mask))
