"""Figures written next to evaluation results: ROC/PR, risk timeline, reliability, codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import numpy as np

from training.data import Samples


def _roc_points(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-s, kind="mergesort")
    y = y[order].astype(bool)
    tpr = np.r_[0.0, np.cumsum(y) / max(y.sum(), 1)]
    fpr = np.r_[0.0, np.cumsum(~y) / max((~y).sum(), 1)]
    return fpr, tpr


def _pr_points(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-s, kind="mergesort")
    tp = np.cumsum(y[order])
    k = np.arange(1, len(y) + 1)
    return tp / max(y.sum(), 1), tp / k


def roc_pr(
    path: Path, test: Samples, scores: dict[str, np.ndarray], rows: dict[str, Any]
) -> None:
    """ROC and PR curves of every row (seed-mean scores) on the test split."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name, s in scores.items():
        mean = s.mean(0)
        auc = rows[name]["all"]["roc_auc"]["mean"]
        ap = rows[name]["all"]["pr_auc"]["mean"]
        a.plot(
            *_roc_points(test.y, mean),
            label=f"{name} ({auc:.2f})",
            lw=2 if "SC-JEPA" in name else 1,
        )
        b.plot(
            *_pr_points(test.y, mean),
            label=f"{name} ({ap:.2f})",
            lw=2 if "SC-JEPA" in name else 1,
        )
    a.plot([0, 1], [0, 1], "k:", lw=0.8)
    b.axhline(test.y.mean(), color="k", ls=":", lw=0.8)
    a.set(
        xlabel="false positive rate",
        ylabel="true positive rate",
        title="ROC (test split)",
    )
    b.set(xlabel="recall", ylabel="precision", title="Precision-recall (test split)")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def risk_timeline(
    path: Path,
    test: Samples,
    risk: np.ndarray,
    threshold: float,
    entity_names: list[str],
    max_entities: int = 6,
) -> None:
    """Risk per test window over time, per entity, with anomalous next windows shaded."""
    ents = [e for e in np.unique(test.entity) if test.y[test.entity == e].any()][
        :max_entities
    ]
    ents = ents or list(np.unique(test.entity)[:max_entities])
    fig, axes = plt.subplots(len(ents), 1, figsize=(11, 1.8 * len(ents)), squeeze=False)
    for ax, e in zip(axes[:, 0], ents, strict=True):
        m = test.entity == e
        t, y, r = test.t[m], test.y[m], risk[m]
        for ti, yi in zip(t, y, strict=True):
            if yi:
                ax.axvspan(ti - 0.5, ti + 0.5, color="tab:red", alpha=0.25, lw=0)
        ax.plot(t, r, "-o", ms=3, color="tab:blue")
        ax.axhline(threshold, color="k", ls="--", lw=0.8)
        ax.set_ylim(0, 1)
        ax.set_ylabel(entity_names[e], fontsize=8)
    axes[-1, 0].set_xlabel(
        "window index t (risk that window t+1 is anomalous; red: it is)"
    )
    fig.suptitle("Risk timeline on the test split")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def reliability_plot(path: Path, rel: dict[str, list[float]], brier: float) -> None:
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], "k:", lw=0.8)
    ax.plot(rel["predicted"], rel["observed"], "o-")
    for p, o, n in zip(rel["predicted"], rel["observed"], rel["count"], strict=True):
        ax.annotate(
            str(n), (p, o), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set(
        xlabel="predicted risk",
        ylabel="observed frequency",
        title=f"Reliability (Brier {brier:.3f})",
        xlim=(0, 1),
        ylim=(0, 1),
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def code_usage(
    path: Path, codes_normal: np.ndarray, codes_anomalous: np.ndarray
) -> None:
    """Histogram of dominant codes for windows followed by normal vs anomalous windows."""
    k = max(int(codes_normal.max(initial=0)), int(codes_anomalous.max(initial=0))) + 1
    fig, ax = plt.subplots(figsize=(11, 3.5))
    for codes, label, color in (
        (codes_normal, "next window normal", "tab:blue"),
        (codes_anomalous, "next window anomalous", "tab:red"),
    ):
        h = np.bincount(codes.ravel(), minlength=k) / max(codes.size, 1)
        ax.bar(np.arange(k), h, alpha=0.55, label=label, color=color, width=1.0)
    ax.set(
        xlabel="code index",
        ylabel="share of patches",
        title="Dominant code usage (test split)",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def warning_curves(
    path: Path, dataset: str, rows: dict[str, Any], extra: dict[str, Any]
) -> None:
    """Warned-event rate against false alarms per 1,000 windows as the threshold
    sweeps (test split, seed-mean scores), every row on one figure; the dotted line is
    the false-alarm budget chosen on validation."""
    ev = extra.get("events", {})
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name, row in rows.items():
        c = row.get("curve")
        if not c:
            continue
        fa = np.asarray(c["false_alarms_per_1000_windows"], dtype=float)
        w = np.asarray(c["warned_rate"], dtype=float)
        order = np.lexsort((w, fa))  # by false alarms, then warned rate
        ax.step(
            np.maximum(fa[order], 1e-2),
            w[order],
            where="post",
            label=name,
            lw=2 if "SC-JEPA" in name else 1,
            ls="--" if name in ("random", "always-positive") else "-",
        )
    if ev.get("budget_per_1000"):
        ax.axvline(ev["budget_per_1000"], color="k", ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set(
        xlabel="false alarms per 1,000 scored windows (log; 0 drawn at 0.01)",
        ylabel="warned events / events",
        ylim=(-0.02, 1.02),
        title=f"{dataset.upper()}: early warning on the test split "
        f"({ev.get('test', {}).get('events', '?')} events, stride "
        f"{ev.get('stride', '?')}, look-back {ev.get('lookback', '?')} steps)",
    )
    ax.legend(fontsize=6.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
