"""`scjepa calibrate`: a served model for data without incident labels.

    scjepa calibrate --dataset csv --root plant.csv --checkpoint runs/plant/best.pt \\
        --out results/plant/probe-label-free.pt
    scjepa export --checkpoint runs/plant/best.pt \\
        --probe results/plant/probe-label-free.pt --out artifacts/plant

A probe that predicts the next window's incidents needs labelled incidents to learn
from. Until an operator has them, the service can still say how unusual each window
is: model/rarity.py's head ranks the mean of the window's z-scored detector scores
(model/detectors.py) among calibration windows, and serves that rank as the risk. It
detects; it does not predict (docs/notebook/results-notes.md, 2026-11-28, fifteenth
session, measures what it gives on the labelled benchmarks).

Every entity's normal series (the data set's train split; a CSV without labels is all
train) is cut in time: the first ``1 - calibration_frac`` is the detectors' reference
(the kNN bank, the PCA basis), and after a one-window gap the rest gives the calibration
windows, one every ``stride`` steps as the service scores. The detectors' z-scaling
and the ranks come from the calibration windows, which the reference never saw (a
window in the kNN bank is its own nearest neighbour). The threshold at each budget B
(false alarms per 1,000 windows) is the lowest calibration risk that keeps at most B of
every 1,000 calibration windows at or above it (:func:`budget_threshold`); the file
records the alerts and pages there (:func:`calibration_figures`), which the service's
paging monitor compares the live pages with. Calibration windows that all score
alike (a stuck stretch) are refused: no window can be ranked among them. No test
figures: there are no labels to measure them. On the labelled benchmarks the budget
held within 2.3 times where the ranks were calibrated on the recent past of the same
streams, and not on SMD-19's fleet (33 times over): calibrate on recent rows of the
streams to be served.

Writes a probe file `scjepa export --probe` serves like `scjepa evaluate`'s (its
threshold rule is "budget"; ``--fa-budget`` serves another operating point).

The same machinery is every served graph's input-drift monitor (:func:`novelty_record`;
model/export.py NoveltyMonitor): kNN + PCA, ranked the same way, fitted by `scjepa
evaluate` on the normal windows the served probe was fitted and checked on
(protocol.served_novelty), and here on this probe's own split (its own head where it
reads knn+pca), so the ``novelty`` output means the same in every artifact.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from training.errors import UserError

if TYPE_CHECKING:
    from model import SCJEPA
    from model.rarity import Rarity
    from training.data import Dataset
    from training.evaluate.detectors import DetectorScores
    from training.evaluate.probe import SavedProbe

DEFAULT_DETECTORS = "knn+pca"
MAX_RANKS = 10_001  # calibration scores kept in the graph (quantiles beyond it)
MIN_WINDOWS = 200  # calibration windows below which the ranks mean little
# the least spread (std, in log units) of a detector's calibration scores: below it
# float32 rounding in the served graph, magnified by the z-scaling, moves the rank
MIN_SPREAD = 1e-4
# the input-drift monitor every served graph carries (model/export.py NoveltyMonitor):
# the same detectors whatever the probe reads, so its output means the same in every
# artifact; a window at or above NOVELTY_LEVEL counts as unlike the training data
NOVELTY_DETECTORS = "knn+pca"
NOVELTY_NAMES = tuple(NOVELTY_DETECTORS.split("+"))
NOVELTY_LEVEL = 0.99


def split_normal(
    ds: Dataset, window: int, stride: int, frac: float
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Every entity's normal (train) series, kept channels: the reference windows
    (hop ``window``) of the first ``1 - frac`` and, after a one-window gap, the
    calibration windows (every ``stride`` steps) of the rest, per entity."""
    from training.data.windows import cut_windows, dense_windows

    ref, cal = [], []
    for e in ds.entities:
        x = np.asarray(e.train[:, ds.mask], dtype=np.float32)
        cut = int(len(x) * (1.0 - frac))
        ref.append(cut_windows(x[:cut], window))
        cal.append(dense_windows(x[cut + window :], window, stride))
    reference = np.concatenate(ref)
    n_cal = sum(len(c) for c in cal)
    if len(reference) < 2 or n_cal < MIN_WINDOWS:
        # each shortfall has its own remedy: a larger frac gives more calibration
        # windows and fewer reference ones (a smaller one the other way round)
        fixes = ["give more normal rows"]
        if n_cal < MIN_WINDOWS:
            fixes.append("a smaller --stride")
        if (n_cal < MIN_WINDOWS) != (len(reference) < 2):
            fixes.append(
                "a larger --calibration-frac"
                if n_cal < MIN_WINDOWS
                else "a smaller --calibration-frac"
            )
        raise UserError(
            f"{ds.name}: {len(reference)} reference and {n_cal} calibration windows "
            f"of {window} steps in the normal data; calibrating needs at least 2 and "
            f"{MIN_WINDOWS}: " + ", or ".join(fixes)
        )
    return reference, [c for c in cal if len(c)]


def budget_threshold(risk: np.ndarray, budget: float, top: float) -> float:
    """The lowest of the calibration windows' risks at or above which at most
    ``budget`` per 1,000 of them are; where even the highest alone is too many, half
    way from it to ``top`` (the risk of a window above every calibration window)."""
    allowed = int(np.floor(budget / 1000.0 * len(risk) + 1e-9))
    values = np.unique(risk)[::-1]  # descending
    at_or_above = np.searchsorted(np.sort(-risk), -values, side="right")
    ok = values[at_or_above <= allowed]
    if len(ok):
        return float(ok[-1])
    return float((values[0] + top) / 2.0)


def calibration_figures(
    series: list[np.ndarray], threshold: float, window: int, stride: int
) -> dict[str, Any]:
    """What the calibration windows (each series' risks, a window every ``stride``
    steps) show at ``threshold``, counted as the event figures count them
    (training/evaluate/events.py) with every step normal: false alarms and false pages
    (runs of alerting windows) per 1,000 windows, pages with an exact Poisson 95 %
    interval, under the test figures' keys. The service's paging monitor reads them
    where a model has no test figures."""
    from scipy.stats import chi2

    from training.evaluate.events import Segment, event_counts

    segments = [
        Segment(np.zeros(window + stride * (len(r) - 1), np.int8),
                window + stride * np.arange(len(r)), r)
        for r in series if len(r)
    ]  # fmt: skip
    c = event_counts(segments, threshold, window)
    low = chi2.ppf(0.025, 2 * c.false_pages) / 2 if c.false_pages else 0.0
    high = chi2.ppf(0.975, 2 * c.false_pages + 2) / 2
    return {
        "windows": c.windows,
        "false_alarms_per_1000": c.false_alarms_per_1000,
        "false_pages_per_1000": c.false_pages_per_1000,
        "false_pages_per_1000_ci95": [
            1000.0 * low / c.windows,
            1000.0 * high / c.windows,
        ],
    }


def fit_rarity(
    dets: DetectorScores, names: tuple[str, ...], cal: np.ndarray, source: str
) -> tuple[Rarity, np.ndarray]:
    """The label-free head ranking the mean of ``names``' z-scored scores among the
    calibration windows ``cal`` (kept channels), and their z-scores (N, n) as the
    graph reads them; calibration windows that all score alike are refused
    (``source`` names their data)."""
    import torch

    from model.rarity import Rarity, bandwidth

    flat = [n for n in names if dets.std[dets.names.index(n)] - 1e-6 < MIN_SPREAD]
    if flat:  # every calibration window alike: nothing to rank a window among
        raise UserError(
            f"{source}: the {len(cal)} calibration windows all score alike on "
            f"{'+'.join(flat)} (spread below {MIN_SPREAD:g}): the rows they are cut "
            "from repeat one pattern (a stuck or constant stretch?); calibrate on "
            "rows that vary as the served streams do, or a larger --calibration-frac"
        )
    z = dets.columns(names)(cal)  # (N, n) float32, as the graph reads them
    score = z.mean(1)
    ranks = np.sort(score)
    if len(ranks) > MAX_RANKS:  # its quantiles: ranks to 1 / (MAX_RANKS - 1)
        ranks = np.quantile(ranks, np.linspace(0.0, 1.0, MAX_RANKS))
    width = bandwidth(torch.from_numpy(score))
    head = Rarity.from_state(
        {"calibration": torch.tensor(ranks), "bandwidth": torch.tensor(width)}
    )
    return head, z


def novelty_record(
    dets: DetectorScores,
    cal: np.ndarray,
    reference_windows: int,
    source: str,
    head: Rarity | None = None,
) -> dict[str, Any]:
    """A probe file's ``novelty`` record (SavedProbe.novelty), the served graph's
    input-drift monitor: the :data:`NOVELTY_DETECTORS`' constants of ``dets`` (fitted
    on ``reference_windows`` reference windows, z-scaled on the calibration windows
    ``cal``), their label-free head (``head``, where the caller fitted it: `scjepa
    calibrate`'s own), and the manifest's figures: :data:`NOVELTY_LEVEL` and the share
    of the calibration windows at or above it, as the graph computes it."""
    if head is None:
        head, _ = fit_rarity(dets, NOVELTY_NAMES, cal, source)
    record: dict[str, Any] = {
        "detectors": NOVELTY_DETECTORS,
        "params": dets.saved(NOVELTY_NAMES),
        "rarity": {k: v.clone() for k, v in head.state_dict().items()},
        "level": NOVELTY_LEVEL,
        "reference_windows": int(reference_windows),
        "calibration_windows": len(cal),
    }
    novelty = novelty_of(record, cal)
    record["expected_share"] = float(np.mean(novelty >= NOVELTY_LEVEL))
    return record


def novelty_of(record: dict[str, Any], windows: np.ndarray) -> np.ndarray:
    """(N,) float32: the novelty output of ``record``'s monitor (model/export.py
    NoveltyMonitor) on ``windows`` (N, T, V kept channels), as the graph computes it,
    256 windows at a time."""
    import torch

    from model.export import NoveltyMonitor

    monitor = NoveltyMonitor.from_record(record)
    with torch.no_grad():
        return np.concatenate(
            [
                monitor(
                    torch.from_numpy(np.ascontiguousarray(windows[i : i + 256]))
                ).numpy()
                for i in range(0, len(windows), 256)
            ]
        )


def calibrate(
    model: SCJEPA,
    ds: Dataset,
    features: str = DEFAULT_DETECTORS,
    calibration_frac: float = 0.2,
    stride: int | None = None,
    checkpoint: str | None = None,
    windows: tuple[np.ndarray, list[np.ndarray]] | None = None,
) -> SavedProbe:
    """The label-free probe of ``ds``'s normal data (module docstring). ``windows``:
    the (reference, calibration) windows, kept channels, in place of
    :func:`split_normal`'s."""
    import torch

    from model.detectors import DETECTORS, SCJEPA_DETECTORS
    from training.evaluate.detectors import DetectorScores
    from training.evaluate.encode import CodeFeatures
    from training.evaluate.probe import SavedProbe, feature_parts
    from training.evaluate.select import OPERATING_BUDGETS
    from training.evaluate.warning import event_config

    try:
        names = feature_parts(features)
    except ValueError as e:
        raise UserError(f"--detectors {features}: {e}") from None
    if not set(names) <= set(DETECTORS):
        raise UserError(
            f"--detectors {features}: detector scores only ({', '.join(DETECTORS)})"
        )
    if not 0.0 < calibration_frac < 1.0:
        raise UserError(f"--calibration-frac {calibration_frac}: between 0 and 1")
    if stride is not None and stride < 1:  # 0 would fall back on the default
        raise UserError(f"--stride {stride}: a window every stride >= 1 steps")
    if model.codebook is None and set(names) - {"knn", "pca"}:
        raise UserError(
            f"--detectors {features}: the checkpoint has no codebook, so no "
            "surprise or recon; use knn and pca"
        )
    window = model.cfg.seq_len
    ev = event_config(ds, stride)
    reference, cal_windows = windows or split_normal(
        ds, window, ev.stride, calibration_frac
    )
    cal = np.concatenate(cal_windows)
    own = bool(set(names) & set(SCJEPA_DETECTORS))
    # the detectors fitted on the reference, z-scaled on the calibration windows
    dets = DetectorScores(reference, cal, CodeFeatures(model) if own else None)
    head, z = fit_rarity(dets, names, cal, ds.name)
    with torch.no_grad():
        risk = torch.sigmoid(head(torch.from_numpy(z))).squeeze(1).numpy()
        top = float(torch.sigmoid(head(torch.full((1, len(names)), 1e9))).item())
    # the input-drift monitor: this head where it reads knn+pca, else their own
    try:
        novelty = novelty_record(
            dets, cal, len(reference), ds.name,
            head if names == NOVELTY_NAMES else None,
        )  # fmt: skip
    except UserError as e:
        print(f"note: no input-drift monitor: {e}", file=sys.stderr)
        novelty = None
    series = np.split(risk, np.cumsum([len(w) for w in cal_windows])[:-1])
    points = []
    thresholds = {
        b: budget_threshold(risk, b, top)
        for b in sorted({*OPERATING_BUDGETS, ev.budget})
    }
    for budget, threshold in thresholds.items():
        points.append(
            {
                "false_alarms_per_1000": float(budget),
                "budget_threshold": threshold,
                "cv_budget_threshold": None,
                "cv_quantile_threshold": None,
                "calibration": calibration_figures(
                    series, threshold, window, ev.stride
                ),
            }
        )
    return SavedProbe(
        state_dict=head.state_dict(),
        n_features=len(names),
        probe={
            "config": {"kind": "rarity"},
            "seed": 0,
            "best_epoch": 0,
            "calibration": {"method": "none"},
        },
        threshold=thresholds[ev.budget],
        dataset=ds.name,
        channels=list(ds.channels),
        mask=[bool(m) for m in ds.mask],
        metrics={
            "label_free": {
                "detectors": features,
                "reference_windows": len(reference),
                "calibration_windows": len(cal),
                "calibration_frac": calibration_frac,
                "stride": ev.stride,
            }
        },
        checkpoint=checkpoint,
        data_fingerprint=ds.fingerprint(),
        features=features,
        detectors=dets.saved(names),
        budget_threshold=thresholds[ev.budget],
        budget={
            "false_alarms_per_1000": float(ev.budget),
            "lookback": float(ev.lookback),
            "stride": float(ev.stride),
        },
        operating_points=points,
        novelty=novelty,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="data set (csv: your own file)")
    p.add_argument("--root", type=Path, help="data folder or file")
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="pre-training checkpoint (best.pt) the artifact will run",
    )
    p.add_argument(
        "--out", type=Path, required=True, help="probe file to write (probe.pt)"
    )
    p.add_argument(
        "--detectors",
        default=DEFAULT_DETECTORS,
        help="detector scores averaged, '+'-joined: knn, pca, surprise, recon "
        f"(default: {DEFAULT_DETECTORS})",
    )
    p.add_argument(
        "--calibration-frac",
        type=float,
        default=0.2,
        help="the last share of each series' normal rows that calibrates the ranks "
        "(default: 0.2)",
    )
    p.add_argument(
        "--stride",
        type=int,
        default=None,
        help="steps between calibration windows, the hop the artifact scores at "
        "(default: the data set's event stride, 5 steps; 8 on Daphnet)",
    )
    from training.data.cli import add_table_arguments

    add_table_arguments(p)


def run(args: argparse.Namespace) -> int:
    from training.data import load_dataset
    from training.data.cli import table_options
    from training.pretrain.checkpoint import file_sha256, load_model

    if args.out.is_dir():
        raise UserError(f"--out {args.out}: a folder; give the probe file to write")
    model = load_model(args.checkpoint)
    ds = load_dataset(args.dataset, args.root, **table_options(args, args.dataset))
    held = sum(len(e.test) for e in ds.entities if e.test is not None)
    if table_options(args, args.dataset) and held:
        # a labelled file is cut into train and test: its later rows, the recent
        # past the ranks should come from, are not read here
        print(
            f"note: {args.root}: calibrating on the train part of each series only; "
            f"its {held} labelled test rows are left out (--train-frac sets the cut)",
            file=sys.stderr,
        )
    probe = calibrate(
        model,
        ds,
        args.detectors,
        args.calibration_frac,
        args.stride,
        checkpoint=str(args.checkpoint),
    )
    probe.checkpoint_sha256 = file_sha256(args.checkpoint)
    try:
        probe.save(args.out)
    except OSError as e:  # a file where its folder should be, no permission
        raise UserError(f"--out {args.out}: cannot write it ({e.strerror})") from None
    lf = probe.metrics["label_free"]
    print(
        f"wrote {args.out}: {lf['detectors']} on {lf['reference_windows']} reference "
        f"and {lf['calibration_windows']} calibration windows",
    )
    for p in probe.operating_points or []:
        print(
            f"  budget {p['false_alarms_per_1000']:g} / 1,000 windows: risk >= "
            f"{p['budget_threshold']:.4f} alerts on "
            f"{p['calibration']['false_alarms_per_1000']:.2f} of 1,000 calibration "
            f"windows, pages on {p['calibration']['false_pages_per_1000']:.2f}"
        )
    return 0
