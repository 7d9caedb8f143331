"""Results files and the markdown tables made from them (evaluation.md, item 8).

results.json's shape is :class:`Results` (rows: :class:`Row`); `scjepa report` and
docs/results/*/results.json read it as plain JSON.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

if TYPE_CHECKING:  # `scjepa report` reads results without PyTorch or the loaders
    from training.data import Samples
    from training.evaluate.probe import ProbeState


class Stat(TypedDict):
    """A metric over seeds."""

    mean: float
    std: float


class Row(TypedDict):
    """One method's row of results.json: every seed's threshold, then metrics."""

    thresholds: list[float]  # per seed, chosen on validation
    val: dict[str, Stat]  # metric -> mean/std over seeds, validation split
    # test split: metric -> Stat, plus "n" (windows) and "positives" (ints)
    all: dict[str, Any]
    onset: dict[str, Any]  # the same on windows whose current window is normal
    continuation: dict[str, Any]  # ... whose current window is already anomalous
    ci95: dict[str, tuple[float, float]]  # bootstrap interval of each metric's mean
    probe: NotRequired[list[ProbeState]]  # calibrated probes only: one per seed
    brier: NotRequired[float]  # of the seed-mean risk
    reliability: NotRequired[dict[str, list[float]]]


class SplitSummary(TypedDict):
    windows: int
    positives: int
    prevalence: float
    onsets: int  # positives whose current window is normal
    onset_windows: int  # windows whose current window is normal


class RunInfo(TypedDict):
    """What `scjepa evaluate` adds about the run itself."""

    checkpoint: str | None
    config: dict[str, Any]  # {"probe": ProbeConfig, "model": ModelConfig, "window"}
    git_commit: str
    command: str
    created: str  # UTC, ISO 8601


class Results(TypedDict):
    """results.json, keys in the order written."""

    dataset: str
    splits: dict[str, SplitSummary]
    seeds: list[int]
    rows: dict[str, Row]
    wall_time_s: float
    checkpoint: NotRequired[str | None]
    config: NotRequired[dict[str, Any]]
    git_commit: NotRequired[str]
    command: NotRequired[str]
    created: NotRequired[str]


# The paper's reported F1 / ROC AUC (%, mean of 5 seeds), method.md; its own protocol.
PAPER = {
    "msl": (33.58, 66.08),
    "smap": (33.64, 65.41),
    "swat": (72.89, 84.95),
    "psm": (61.61, 77.85),
    "smd": (20.82, 62.29),
}

# Bars quoted by the project's evaluation issue for this protocol (test split): the
# strongest simple baselines someone else measured. Shown beside ours, not recomputed.
REFERENCE = {
    "msl": "logistic on pooled stats F1 0.47 / AUC 0.71; MLP on the same AUC 0.73; "
    "kNN distance to train windows AUC 0.72; best onset AUC 0.73 (7 onset positives)",
    "smd": "logistic on pooled stats F1 0.35 / AUC 0.77; PCA reconstruction error "
    "F1 0.43 / AUC 0.72; best onset AUC 0.62 (47 onset positives)",
}


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_results(
    out: Path, results: Results, scores: Mapping[str, np.ndarray], test: Samples
) -> Path:
    """results.json, scores.npz (test scores per row and seed, (seeds, N)), results.md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(
        json.dumps(results, indent=2, default=float) + "\n"
    )
    arrays: dict[str, Any] = {"y": test.y, "cur": test.cur, "entity": test.entity}
    arrays |= {"t": test.t} | {f"score/{name}": s for name, s in scores.items()}
    np.savez_compressed(out / "scores.npz", **arrays)
    (out / "results.md").write_text(markdown(results) + "\n")
    return out / "results.json"


def _cell(stat: dict[str, float]) -> str:
    return (
        f"{stat['mean']:.3f} ± {stat['std']:.3f}"
        if np.isfinite(stat["mean"])
        else "n/a"
    )


def merge(parts: list[tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """One result from several runs on the same data set: the first run's rows, then
    each later run's rows (SC-JEPA rows suffixed with its label, e.g. "(paper)")."""
    res = dict(parts[0][0])
    res["rows"], res["runs"] = {}, []
    for r, label in parts:
        if r["splits"]["test"] != res["splits"]["test"]:
            raise ValueError(
                f"{r['dataset']}: runs on different test splits cannot share a table"
            )
        for name, row in r["rows"].items():
            if label and name.startswith("SC-JEPA"):
                name = f"{name} ({label})"
            res["rows"].setdefault(name, row)
        res["runs"].append(r)
    return res


def markdown(res: Mapping[str, Any]) -> str:
    """One data set's table: every row, test split, mean ± std over seeds, 95 % CI."""
    sp = res["splits"]["test"]
    lines = [
        f"### {res['dataset'].upper()}: test split {sp['windows']} windows, "
        f"{sp['positives']} positive ({100 * sp['prevalence']:.1f} %), "
        f"{sp['onsets']} onset positives; {len(res['seeds'])} seeds",
        "",
        "| method | F1 | ROC AUC | PR AUC | precision | recall | F1 95 % CI | AUC 95 % CI | onset AUC | continuation AUC |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in res["rows"].items():
        a, ci = row["all"], row["ci95"]
        lines.append(
            f"| {name} | {_cell(a['f1'])} | {_cell(a['roc_auc'])} | {_cell(a['pr_auc'])} | "
            f"{_cell(a['precision'])} | {_cell(a['recall'])} | "
            f"[{ci['f1'][0]:.3f}, {ci['f1'][1]:.3f}] | [{ci['roc_auc'][0]:.3f}, {ci['roc_auc'][1]:.3f}] | "
            f"{_cell(row['onset']['roc_auc'])} | {_cell(row['continuation']['roc_auc'])} |"
        )
    paper = PAPER.get(res["dataset"])
    if paper:
        lines.append(
            f"| *paper (its own protocol)* | {paper[0] / 100:.4f} | {paper[1] / 100:.4f} | | | | | | | |"
        )
    lines.append("")
    if res["dataset"] in REFERENCE:
        lines.append(
            f"Reference bars (quoted, same protocol): {REFERENCE[res['dataset']]}."
        )
    cal = [(n, r["brier"]) for n, r in res["rows"].items() if "brier" in r]
    if cal:
        lines.append(
            "Calibrated probes, Brier score on the test split: "
            + ", ".join(f"{n} {b:.4f}" for n, b in cal)
            + "."
        )
    for run in res.get("runs", [res]):
        meta = f"commit `{run.get('git_commit', '?')}`, wall time {run['wall_time_s']:.0f} s"
        if run.get("command"):
            meta += f", command `{run['command']}`"
        lines.append(meta + ".")
    return "\n".join(lines)
