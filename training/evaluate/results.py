"""Results files and the markdown tables made from them (evaluation.md, item 8).

results.json's shape is :class:`Results` (rows: :class:`Row`); `scjepa report` and
docs/results/*/results.json read it as plain JSON. It is strict JSON
(:mod:`training.strict_json`): an undefined figure (no positive or no event to rate it
on) is null and reads n/a; a threshold at which no alert fires (none kept the
false-alarm budget) is null and compares as +inf (:func:`served_any`). Older files hold
NaN and Infinity there; `scjepa report` reads them alike.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from training import strict_json
from training.data.windows import SERVE
from training.evaluate.power import MIN_POSITIVES

if TYPE_CHECKING:  # `scjepa report` reads results without PyTorch or the loaders
    from training.data import Samples
    from training.evaluate.probe import ProbeState


class Stat(TypedDict):
    """A metric over seeds; null where undefined (no positive or event to rate)."""

    mean: float
    std: float


class Row(TypedDict):
    """One method's row of results.json: every seed's threshold, then metrics.

    Results files written since event metrics exist (evaluation.md items 9-11) add the
    NotRequired keys after ``reliability``; older files load without them.
    """

    # per seed, chosen on validation (per seed and fold: folds); null: never alerts
    thresholds: list[Any]
    val: dict[str, Stat]  # metric -> mean/std over seeds, validation split
    # test split: metric -> Stat, plus "n" (windows) and "positives" (ints)
    all: dict[str, Any]
    onset: dict[str, Any]  # the same on windows whose current window is normal
    continuation: dict[str, Any]  # ... whose current window is already anomalous
    ci95: dict[str, tuple[float, float]]  # bootstrap interval of each metric's mean
    probe: NotRequired[list[ProbeState]]  # calibrated probes only: one per seed
    brier: NotRequired[float]  # of the seed-mean risk
    reliability: NotRequired[dict[str, list[float]]]
    # block-bootstrap interval (with seed variance) of each window metric, test split
    block_ci95: NotRequired[dict[str, tuple[float, float]]]
    # validation warned rate / false alarms at the budget: how rows are chosen
    val_events: NotRequired[dict[str, Any]]
    # "val_threshold" / "budget" (and CV_KIND for the served-model candidates) ->
    # event counts, rates, quartiles, intervals, chance
    events: NotRequired[dict[str, Any]]
    # warned rate and false alarms per 1,000 windows as the threshold sweeps
    curve: NotRequired[dict[str, list[float]]]
    # "window" / "events" -> {"vs": best baseline, metric: {"diff", "ci95"}}
    paired: NotRequired[dict[str, Any]]
    external: NotRequired[dict[str, Any]]  # SKAB leaderboard / Daphnet pre-freeze


# the served-model candidates' third threshold kind, the one `scjepa export` serves:
# the highest of the budget's thresholds on validation and on the out-of-fold risks,
# in risks and in quantiles (training.evaluate.warning.add_cv_budget)
CV_KIND = "cv_budget"


class SplitSummary(TypedDict):
    windows: int
    positives: int
    prevalence: float
    onsets: int  # positives whose current window is normal
    onset_windows: int  # windows whose current window is normal


class RunInfo(TypedDict):
    """What `scjepa evaluate` adds about the run itself."""

    checkpoint: str | None
    # each fold's checkpoint file's SHA-256 (empty without one): the path alone does
    # not say which weights a re-made checkpoint held
    checkpoint_sha256: list[str]
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
    checkpoint_sha256: NotRequired[list[str]]  # in files since 2026-11-29
    config: NotRequired[dict[str, Any]]
    git_commit: NotRequired[str]
    command: NotRequired[str]
    created: NotRequired[str]
    # evaluation.md items 9-11 (absent from older files)
    folds: NotRequired[int]
    # several folds: the fold whose model the served files hold (since 2026-11-30;
    # before, such a run wrote none), or "serve": every entity but fold 0's
    # validation ones (`--serve-checkpoint`, whose path and SHA-256 follow)
    served_fold: NotRequired[int | str]
    serve_checkpoint: NotRequired[dict[str, str]]
    events: NotRequired[dict[str, Any]]  # stride, look-back, budget, event counts
    bootstrap: NotRequired[dict[str, Any]]
    best_baseline: NotRequired[dict[str, Any]]


# The paper's reported F1 / ROC AUC (%, mean of 5 seeds), method.md; its own protocol.
PAPER = {
    "msl": (33.58, 66.08),
    "smap": (33.64, 65.41),
    "swat": (72.89, 84.95),
    "psm": (61.61, 77.85),
    "smd": (20.82, 62.29),
}

# Bars quoted by the project's evaluation issue for this protocol: the strongest simple
# baselines someone else measured, shown beside ours, not recomputed; each with the
# onset positives of the test split it was measured on (MSL's, SMD-19's: not the full
# SMD or another cut of either)
REFERENCE = {
    "msl": (
        "logistic on pooled stats F1 0.47 / AUC 0.71; MLP on the same AUC 0.73; "
        "kNN distance to train windows AUC 0.72; best onset AUC 0.73",
        7,
    ),
    "smd": (
        "logistic on pooled stats F1 0.35 / AUC 0.77; PCA reconstruction error "
        "F1 0.43 / AUC 0.72; best onset AUC 0.62",
        47,
    ),
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
    out: Path,
    results: Results,
    scores: Mapping[str, np.ndarray],
    test: Samples,
    dense_scores: Mapping[str, np.ndarray] | None = None,
    dense_test: Samples | None = None,
) -> Path:
    """results.json, scores.npz (test scores per row and seed, (seeds, N); the dense
    windows' under dense/), results.md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(strict_json.dumps(results, indent=2) + "\n")
    arrays: dict[str, Any] = {"y": test.y, "cur": test.cur, "entity": test.entity}
    arrays |= {"t": test.t, "end": test.end}
    arrays |= {f"score/{name}": s for name, s in scores.items()}
    if dense_scores and dense_test is not None:
        arrays |= {"dense/entity": dense_test.entity, "dense/end": dense_test.end}
        arrays |= {f"dense/score/{name}": s for name, s in dense_scores.items()}
    np.savez_compressed(out / "scores.npz", **arrays)
    (out / "results.md").write_text(markdown(results) + "\n")
    return out / "results.json"


def _num(x: Any) -> bool:
    """A defined figure: results.json writes an undefined one (NaN) as null; older
    files hold NaN, and both read n/a."""
    return x is not None and bool(np.isfinite(x))


def _cell(stat: dict[str, float]) -> str:
    return f"{stat['mean']:.3f} ± {stat['std']:.3f}" if _num(stat["mean"]) else "n/a"


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
    for key in ("folds", "events", "bootstrap", "best_baseline"):
        have = next((r[key] for r, _ in parts if key in r), None)
        if key not in res and have is not None:
            res[key] = have
    # the served-model leaderboard of the first run that has one, its rows named as
    # this table names them (SC-JEPA rows carry that run's label)
    board = next(
        ((r["leaderboard"], lab) for r, lab in parts if "leaderboard" in r), None
    )
    if board is not None:
        res["leaderboard"] = _relabel(board[0], board[1])
    return res


def _relabel(board: dict[str, Any], label: str) -> dict[str, Any]:
    def name(n: str | None) -> str | None:
        return f"{n} ({label})" if n and label and n.startswith("SC-JEPA") else n

    out = dict(board)
    out["rows"] = [e | {"row": name(e["row"])} for e in board["rows"]]
    out["winner"] = name(board["winner"])
    out["winner_without_scjepa"] = name(board.get("winner_without_scjepa"))
    return out


def markdown(res: Mapping[str, Any], figure: str | None = None) -> str:
    """One data set's section: every row, test split, mean ± std over seeds, 95 % CI.

    Results with event metrics (evaluation.md items 9-11) get both metric families,
    block-bootstrap intervals, paired differences and the operator's line
    (:func:`markdown_events`); older results keep their one table, unchanged.
    """
    if any("events" in r for r in res.get("runs", [res])):
        return markdown_events(res, figure)
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
    lines += subset_lines(res)
    lines += _footer(res)
    return "\n".join(lines)


def _footer(res: Any) -> list[str]:
    """Reference bars, Brier scores and each run's provenance, under a table."""
    lines = []
    bars, onsets = REFERENCE.get(res["dataset"], ("", None))
    if bars and res.get("splits", {}).get("test", {}).get("onsets") == onsets:
        lines.append(
            f"Reference bars (quoted, same protocol): {bars} ({onsets} onset positives)."
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
    return lines


# -- results with event metrics (evaluation.md items 9-11) ----------------------------

TOO_SMALL = "n too small"
PUBLISHED = {
    "skab": "SKAB's README leaderboards (their protocol: each detector fitted per run "
    "on its first 400 rows and scored point-wise on the rest): outlier detection, best "
    "F1: Conv-AE F1 0.78 / FAR 13.55 % / MAR 28.02 %; changepoint detection: MSCRED "
    "NAB (standard) 32.42",
    "daphnet": "published pre-freeze detection: sensitivity 66.5 % / specificity "
    "73.9 % (2 s windows; quoted by the evaluation issue, its own subjects, features "
    "and pre-freeze definition)",
}


def _f(x: float, nd: int = 3) -> str:
    return f"{x:.{nd}f}" if _num(x) else "n/a"


def _ci(pair: Any, nd: int = 3) -> str:
    if not pair or not all(_num(v) for v in pair):
        return "n/a"
    return f"[{pair[0]:.{nd}f}, {pair[1]:.{nd}f}]"


def _diff(d: Mapping[str, Any] | None, nd: int = 3) -> str:
    if not d:
        return ""
    if not _num(d["diff"]):
        return "n/a"
    lo, hi = d["ci95"]
    mark = "" if not (_num(lo) and _num(hi)) or lo <= 0 <= hi else " *"
    return f"{d['diff']:+.{nd}f} {_ci(d['ci95'], nd)}{mark}"


def _vs(paired: Mapping[str, Any] | None, best: str | None) -> str:
    """ " (vs NAME)" when a row's paired difference is with another row than the
    table's named best baseline (a page merging runs: each run's rows are compared
    with that run's own best baseline), else ""."""
    vs = (paired or {}).get("vs")
    return f" (vs {vs})" if vs and vs != best else ""


def subset_lines(res: Mapping[str, Any]) -> list[str]:
    """Evaluation.md item 6: the window metrics on the onsets (current window normal)
    and the continuations (current window anomalous) of the test split, with their
    window and positive counts ("n too small" below MIN_EVENTS positives)."""
    rows = res["rows"]
    if not rows:
        return []
    first = next(iter(rows.values()))
    head = "; ".join(
        f"{s}s: {first[s]['n']} windows, {first[s]['positives']} positive"
        for s in ("onset", "continuation")
    )
    metrics = ("f1", "roc_auc", "pr_auc", "precision", "recall")
    label = {"f1": "F1", "roc_auc": "ROC AUC", "pr_auc": "PR AUC"}
    cols = [
        f"{s} {label.get(m, m)}" for s in ("onset", "continuation") for m in metrics
    ]
    lines = [
        f"Onsets (current window normal) and continuations (current window already "
        f"anomalous), item 6: {head}; the same metrics at the same thresholds, mean ± "
        f"std over seeds; '{TOO_SMALL}' below {MIN_EVENTS} positives.",
        "",
        "| method | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for name, row in rows.items():
        cells = []
        for s in ("onset", "continuation"):
            r = row[s]
            small = r.get("positives", 0) < MIN_EVENTS
            cells += [TOO_SMALL if small else _cell(r[m]) for m in metrics]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _quart(q: list[float] | None) -> str:
    return "/".join(f"{v:.0f}" for v in q) if q else "-"


def _steps(n: float, steps_per_day: float | None) -> str:
    """Steps, with seconds where the sampling rate is known."""
    if steps_per_day:
        sec = n * 86400 / steps_per_day
        return (
            f"{n:.0f} steps ({sec:.0f} s)"
            if sec < 600
            else f"{n:.0f} steps ({sec / 60:.0f} min)"
        )
    return f"{n:.0f} steps"


def operator_line(res: Mapping[str, Any]) -> str:
    """'What an operator gets' from the served model (the leaderboard's winner), or
    else the row chosen on validation (warned rate at the false-alarm budget, then
    fewer false alarms), at its budget threshold."""
    rows = {n: r for n, r in res["rows"].items() if "events" in r}
    if not rows:
        return ""
    ev = res["events"]
    served = _merged_name(rows, (res.get("leaderboard") or {}).get("winner"))

    def key(n: str) -> tuple[float, float]:
        v = rows[n].get("val_events", {})
        w = v.get("warned_rate", {}).get("mean", float("nan"))
        fa = v.get("false_alarms_per_1000_windows", {}).get("mean", float("nan"))
        return (w if _num(w) else -1.0, -fa if _num(fa) else -1e9)

    name = served or max(rows, key=key)
    cross = CV_KIND in rows[name]["events"]  # runs since 2026-11-28
    b = rows[name]["events"][CV_KIND if cross else "budget"]
    n = b["events"]
    spd = ev.get("steps_per_day")
    w = b["warned"]["mean"]
    how = "the served model" if served else "chosen on validation"
    board_rows = (res.get("leaderboard") or {}).get("rows", [])
    if not cross:
        at = "at its budget threshold"
    elif any("cv_budget_quantiles" in e for e in board_rows):  # since 2026-11-28 (11th)
        at = (
            "at the threshold it is served at (the highest of those keeping the budget "
            "on validation and out of fold, in risks and in quantiles)"
        )
    else:
        at = (
            "at the threshold it is served at (the higher of those keeping the budget "
            "on validation and out of fold)"
        )
    text = f"with **{name}** ({how}), {at}: warns {w:.3g} of {n} incidents"
    if b["lead_quartiles"]:
        text += f", median {_steps(b['lead_quartiles'][1], spd)} ahead"
    text += f"; {b['late']['mean']:.3g} more caught late"
    if b["delay_quartiles"]:
        text += f", median {_steps(b['delay_quartiles'][1], spd)} after onset"
    text += f"; {b['missed']['mean']:.3g} missed; {b['false_alarms_per_1000_windows']['mean']:.2f} false alarms per 1,000 windows"
    if "false_pages_per_day" in b:  # runs since the eleventh session of 2026-11-28
        text += (
            f" ({b['false_alarms_per_day']['mean']:.2f} per day, "
            f"{b['false_pages_per_day']['mean']:.2f} false pages a day: alerts "
            "that start with a false alarm)"
        )
    elif "false_alarms_per_day" in b:
        text += f" ({b['false_alarms_per_day']['mean']:.2f} per day)"
    if cross and n:  # no event: no chance to compare with
        text += f"; chance p = {b['chance']['p']:.3f}"
    text += f" (means over {len(res['seeds'])} seeds"
    if n < MIN_EVENTS:
        text += f"; {TOO_SMALL}: {n} events cannot separate methods"
    return text + ")."


MIN_EVENTS = MIN_POSITIVES  # fewer events or positives than this: "n too small"


def chance_line(res: Mapping[str, Any]) -> str:
    """Which rows warn more events than their own alerts would by chance (circular
    shift null, p < 0.05 at the budget threshold)."""
    rows = {n: r for n, r in res["rows"].items() if "events" in r}
    if not rows:
        return ""
    n = next(iter(rows.values()))["events"]["budget"]["events"]
    if n < MIN_EVENTS:
        return f"With {n} test events the data cannot say whether any method warns better than chance."
    better = [
        name
        for name, r in rows.items()
        if r["events"]["budget"]["chance"]["p"] < 0.05 and name != "random"
    ]
    if not better:
        return "**No method warns better than chance** at the budget threshold (circular-shift null, p >= 0.05 for every row)."
    tested = [n for n in rows if n != "random"]
    bonf = 0.05 / len(tested)
    p_of = {n: rows[n]["events"]["budget"]["chance"]["p"] for n in better}
    listed = ", ".join(f"{n} (p = {p:.4f})" for n, p in p_of.items())
    kept = [n for n, p in p_of.items() if p < bonf]
    # results files before 2026-11-27 ran 200 rotations: p >= 1 / 201
    rotations = min(
        rows[n]["events"]["budget"]["chance"].get("rotations", 200) for n in better
    )
    floor = 1 / (1 + rotations)
    undecided = [n for n, p in p_of.items() if p <= floor and floor >= bonf]
    if undecided:
        verdict = (
            f"{len(undecided)} at the smallest p that {rotations} rotations can give "
            f"({floor:.4f}) cannot be decided"
            + (f", {len(kept)} survive" if kept else "")
        )
    elif len(better) == 1:
        verdict = "it survives" if kept else "it does not survive"
    else:
        verdict = f"{len(kept)} of them survive" if kept else "none survives"
    return (
        "Warns better than chance at the budget threshold (circular-shift null, "
        f"p < 0.05): {listed}; every other row does not. Corrected for the "
        f"{len(tested)} rows tested (Bonferroni, p < {bonf:.4f}), {verdict}."
    )


def _merged_name(rows: Mapping[str, Any], name: str | None) -> str | None:
    """``name`` if the table has that row (:func:`merge` relabels the leaderboard)."""
    return name if name is not None and name in rows else None


def served_lines(res: Mapping[str, Any]) -> list[str]:
    """The served-model leaderboard (issue 20): the candidates ranked on validation,
    their test figures beside (read once, after the choice), and the winner against
    its refit without SC-JEPA's inputs. Empty for results without a leaderboard."""
    board = res.get("leaderboard")
    rows = res["rows"]
    if not board or not board.get("rows"):
        return []
    winner = _merged_name(rows, board["winner"])
    how = (
        "`scjepa export --probe RESULTS_DIR`"
        if res.get("folds", 1) == 1
        else "`scjepa export --probe RESULTS_DIR` serves the model fitted on every "
        "entity but fold 0's validation ones, with the checkpoint pre-trained on them "
        "(`--dataset NAME@serve`); the figures pool every fold's model"
        if res.get("served_fold") == SERVE
        else f"`scjepa export --probe RESULTS_DIR` serves fold {res['served_fold']}'s "
        "model, with that fold's checkpoint; the figures pool every fold's model"
        if "served_fold" in res
        else "one model per fold, none exported: the candidate that would be served"
    )
    cv = board.get("cv")
    # runs before the cross-fitted threshold (2026-11-28) have no such column
    cross = any(CV_KIND in r.get("events", {}) for r in rows.values())
    if cv:
        budgets = ", ".join(f"{b:g}" for b in cv["budgets_per_1000"])
        columns = [
            "candidate",
            "reads",
            "inputs",
            f"CV warned rate ({budgets} FA / 1,000)",
            "CV warned rate at 1 / 1,000",
            "CV PR AUC",
            "kept",
            "val warned rate",
            "val PR AUC",
            "test PR AUC",
            "test ROC AUC",
            "test warned / events (FA / 1,000)",
            *(["the same at the served threshold"] if cross else []),
            "Δ test PR AUC",
            "Δ test warned rate",
        ]
        lines = [
            f"**Served model** ({how}; chosen on {board['chosen_on']}): "
            f"**{winner}**. The cross-validation: {cv['blocks']} blocks per fold, "
            f"{cv['seeds']} probe seeds; pooled out-of-fold {cv['events']} events, "
            f"{cv['positives']} positive windows, {cv['bootstrap_units']} bootstrap "
            "units. Candidates, the winner first, then by the cross-validated keys; "
            "gap = below the best, ± the bootstrap SD of that paired difference; kept "
            "= within one SD on warned rate (1) and then on PR AUC (2); test columns "
            "read once after the choice; Δ = paired difference with the best baseline "
            "(chosen on validation), * where its interval excludes 0:",
            "",
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
        ]
    else:
        lines = [
            f"**Served model** ({how}; chosen on {board['chosen_on']}): "
            f"**{winner}**. Candidates, ranked on validation; test columns read once "
            "after the choice; Δ = paired difference with the best baseline (chosen on "
            "validation), * where its interval excludes 0:",
            "",
            "| candidate | reads | val warned rate | val FA / 1,000 | val PR AUC | val ROC AUC | test PR AUC | test ROC AUC | test warned / events (FA / 1,000) | Δ test PR AUC | Δ test warned rate |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    best = res.get("best_baseline") or {}
    for e in board["rows"]:
        name = _merged_name(rows, e["row"])
        if name is None:
            continue
        r = rows[name]
        b = r.get("events", {}).get("budget")
        paired = r.get("paired", {})
        warned = _warned_cell(b)
        small_w = r["all"]["positives"] < MIN_EVENTS
        small_e = not b or b["events"] < MIN_EVENTS
        if cv:

            def gap(key: str, of: str, e: Mapping[str, Any] = e) -> str:
                g, sd = e[f"{of}_gap"], e[f"{of}_gap_sd"]
                return (
                    f"{_f(e[key])} (-{_f(g)} ± {_f(sd)})"
                    if g is not None and g > 0
                    else _f(e[key])
                )

            head = [
                f"`{e['features']}`",
                str(e["n_inputs"]),
                gap("cv_warned_rate", "cv_warned"),
                _f(e["cv_warned_rate_at_budget"]),
                gap("cv_pr_auc", "cv_pr_auc") if e["cv_stage"] else _f(e["cv_pr_auc"]),
                {2: "1, 2", 1: "1"}.get(e["cv_stage"], "-"),
                _f(e["val_warned_rate"]),
                _f(e["val_pr_auc"]),
            ]
        else:
            head = [
                f"`{e['features']}`",
                _f(e["val_warned_rate"]),
                _f(e["val_false_alarms_per_1000"], 2),
                _f(e["val_pr_auc"]),
                _f(e["val_roc_auc"]),
            ]
        cells = [
            *head,
            _cell(r["all"]["pr_auc"]),
            _cell(r["all"]["roc_auc"]),
            warned,
            *([_warned_cell(r.get("events", {}).get(CV_KIND))] if cv and cross else []),
            TOO_SMALL
            if small_w
            else _diff(paired.get("window", {}).get("pr_auc"))
            + _vs(paired.get("window"), best.get("window"))
            or "(best baseline)",
            TOO_SMALL
            if small_e
            else _diff(paired.get("events", {}).get("warned_rate"))
            + _vs(paired.get("events"), best.get("events"))
            or "(best baseline)",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    abl = _merged_name(rows, board.get("winner_without_scjepa"))
    if winner and abl:
        w, a = rows[winner], rows[abl]

        def fig(r: Mapping[str, Any]) -> str:
            b = r.get("events", {}).get("budget")
            ev = f", warned {b['warned']['mean']:.3g} / {b['events']}" if b else ""
            return (
                f"val PR AUC {_f(r['val']['pr_auc']['mean'])} / ROC AUC "
                f"{_f(r['val']['roc_auc']['mean'])}; test PR AUC "
                f"{_cell(r['all']['pr_auc'])} {_ci(r['block_ci95']['pr_auc']) if 'block_ci95' in r else ''}, "
                f"ROC AUC {_cell(r['all']['roc_auc'])}{ev}"
            )

        lines += [
            "",
            f"SC-JEPA's contribution: the winner refitted the same way without its "
            f"SC-JEPA inputs ({abl}): {fig(a)}; the winner: {fig(w)}.",
        ]
    elif winner:
        won = next(e for e in board["rows"] if e["row"] == board["winner"])
        parts = won["features"].split("+")
        own = [p for p in parts if p in ("codes", "surprise", "recon")]
        lines += [
            "",
            "SC-JEPA's contribution: none in the served model (it reads no SC-JEPA "
            "input)."
            if not own
            else "SC-JEPA's contribution: without its SC-JEPA inputs the winner reads "
            "nothing (its floor is the always-positive row).",
        ]
    return [*lines, ""]


def served_any(figures: Mapping[str, Any]) -> bool:
    """Whether a threshold was served at an operating point (its test figures'
    per-seed and fold thresholds: inf, null in JSON (Infinity in older files), where
    none held the budget)."""
    return any(
        v is not None and np.isfinite(v)
        for v in np.ravel(np.array(figures["thresholds"], dtype=object))
    )


def operating_lines(res: Mapping[str, Any]) -> list[str]:
    """The served model's operating points (`scjepa export --fa-budget`): at each
    budget the test figures at the threshold served there. Empty for runs without
    operating points (before 2026-11-28, twelfth session)."""
    board = res.get("leaderboard") or {}
    won = [e for e in board.get("rows", []) if e["row"] == board.get("winner")]
    points = won[0].get("operating_points") if won else None
    name = _merged_name(res["rows"], board.get("winner"))
    if not points or name is None:
        return []
    test = {
        p["false_alarms_per_1000"]: p
        for p in res["rows"][name].get("events", {}).get("operating_points", [])
    }
    per_day = bool(res["events"].get("steps_per_day"))
    lines = [
        "**Operating points of the served model** (`scjepa export --fa-budget B`; "
        "its threshold at each budget B is the highest of those keeping B on "
        "validation and out of fold, in risks and in quantiles, never below a looser "
        "budget's; none where the out-of-fold risks held no threshold within B). "
        "Test split, read once, at the threshold served; means over seeds, 95 % "
        "intervals by block bootstrap; the manifest lists the same figures:",
        "",
        "| false alarms / 1,000 windows (B) | warned / events | warned rate [95 %] | "
        "caught late | false alarms / 1,000 windows [95 %] | false pages / 1,000 "
        "windows [95 %] | false pages a day [95 %] | chance p (warned) |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def ci(t: Mapping[str, Any], key: str, nd: int) -> str:
        lo, hi = t.get("ci95", {}).get(key, (None, None))
        if not (_num(lo) and _num(hi)):
            return ""
        return f" [{lo:.{nd}f}, {hi:.{nd}f}]"

    for p in points:
        b = p["false_alarms_per_1000"]
        t = test.get(b)
        cells = [f"{b:g}"]
        if t is not None and served_any(t):
            fa, fp = "false_alarms_per_1000_windows", "false_pages_per_1000_windows"
            cells += [
                f"{t['warned']['mean']:.3g} / {t['events']}",
                f"{_f(t['warned_rate']['mean'])}{ci(t, 'warned_rate', 3)}",
                f"{t['late']['mean']:.3g}",
                f"{t[fa]['mean']:.2f}{ci(t, fa, 2)}",
                f"{t[fp]['mean']:.2f}{ci(t, fp, 2)}" if fp in t else "-",
                f"{t['false_pages_per_day']['mean']:.2f}"
                + ci(t, "false_pages_per_day", 2)
                if per_day
                else "-",
                f"{t['chance']['p']:.3f}" if t["events"] else "-",
            ]
        else:
            cells += ["none held B out of fold"] + ["-"] * 6
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _warned_cell(b: Mapping[str, Any] | None) -> str:
    """ "warned / events (false alarms per 1,000 windows)" at one threshold kind."""
    if not b:
        return "-"
    return (
        f"{b['warned']['mean']:.3g} / {b['events']} "
        f"({b['false_alarms_per_1000_windows']['mean']:.1f})"
    )


def markdown_events(res: Mapping[str, Any], figure: str | None = None) -> str:
    """Both metric families of one data set (evaluation.md items 5-11)."""
    sp = res["splits"]["test"]
    ev = res["events"]
    folds = res.get("folds", 1)
    how = (
        f"{folds} folds by entity, test splits pooled (each labelled entity tested once)"
        if folds > 1
        else "test split"
    )
    lines = [
        f"### {res['dataset'].upper()}: {how}: {sp['windows']} windows, "
        f"{sp['positives']} positive ({100 * sp['prevalence']:.1f} %), "
        f"{sp['onsets']} onset positives; {ev['test']['events']} events; "
        f"{len(res['seeds'])} seeds",
        "",
    ]
    op = operator_line(res)
    if op:
        lines += [f"**What an operator gets**: {op}", "", chance_line(res), ""]
    lines += served_lines(res)
    lines += operating_lines(res)
    best = res.get("best_baseline", {})
    lines += [
        f"Window metrics (hop {res.get('config', {}).get('window', 100)}, items 5-6): "
        "mean ± std over seeds; 95 % intervals by block bootstrap over events and "
        "entities with a seed drawn per resample († = an older run: windows resampled, "
        "seed mean); Δ = paired difference with the best baseline on validation PR AUC "
        f"({best.get('window') or '-'}), * where its interval excludes 0; "
        f"'{TOO_SMALL}' below {MIN_EVENTS} positives.",
        "",
        "| method | F1 | ROC AUC | PR AUC | precision | recall | F1 95 % CI | ROC AUC 95 % CI | PR AUC 95 % CI | Δ PR AUC vs best baseline | onset AUC | continuation AUC |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in res["rows"].items():
        a = row["all"]
        ci = row.get("block_ci95")
        mark = "" if ci else " †"
        ci = ci or row["ci95"]
        sub = []
        for s in ("onset", "continuation"):
            r = row[s]
            sub.append(
                TOO_SMALL if r["positives"] < MIN_EVENTS else _cell(r["roc_auc"])
            )
        small = a["positives"] < MIN_EVENTS
        pw = row.get("paired", {}).get("window", {})
        delta = (
            "(best baseline)"
            if name == best.get("window")
            else TOO_SMALL
            if small
            else _diff(pw.get("pr_auc")) + (_vs(pw, best.get("window")) if pw else "")
        )
        cells = [
            _cell(a["f1"]),
            _cell(a["roc_auc"]),
            _cell(a["pr_auc"]),
            _cell(a["precision"]),
            _cell(a["recall"]),
            *(
                [TOO_SMALL] * 3
                if small
                else [
                    _ci(ci["f1"]) + mark,
                    _ci(ci["roc_auc"]) + mark,
                    _ci(ci["pr_auc"]) + mark,
                ]
            ),
            delta or "-",
            *sub,
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    paper = PAPER.get(res["dataset"])
    if paper:
        lines.append(
            f"| *paper (its own protocol)* | {paper[0] / 100:.4f} | {paper[1] / 100:.4f} |"
            + " |" * 9
        )
    lines += ["", *subset_lines(res)[:-1]]
    spd = ev.get("steps_per_day")
    t = ev["test"]
    lines += [
        "",
        f"Event metrics (items 9-10): windows every {ev['stride']} steps, look-back "
        f"{_steps(ev['lookback'], spd)}; threshold = the lowest keeping validation "
        f"false alarms within {ev['budget_per_1000']:g} per 1,000 windows. Test: "
        f"{t['events']} events ({t['censored_events']} censored: already running "
        f"when scoring began), {t['windows']} windows, {t['blocks']} bootstrap blocks. "
        "Counts are means over seeds; lead and delay quartiles pool the seeds; chance = "
        "the warned rate of the same alerts rotated in time (p: share of rotations "
        "warning as many); Δ = paired difference with the best baseline on validation "
        f"warned rate ({best.get('events') or '-'}).",
        "",
        "| method | warned / events | warned rate 95 % CI | chance (p) | lead q25/q50/q75 | late (delay q25/q50/q75) | missed | false alarms / 1,000 windows [95 % CI] | per day | Δ warned rate vs best baseline | at the val F1 threshold: warned, FA / 1,000 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    old = []
    for name, row in res["rows"].items():
        if "events" not in row:
            old.append(name)
            continue
        b, v = row["events"]["budget"], row["events"]["val_threshold"]
        n = b["events"]
        small = n < MIN_EVENTS
        warned = f"{b['warned']['mean']:.3g} / {n}"
        rate_ci = TOO_SMALL if small else _ci(b["ci95"]["warned_rate"])
        chance = (
            TOO_SMALL
            if small
            else f"{_f(b['chance']['warned_rate'], 2)} ({b['chance']['p']:.2f})"
        )
        fa = b["false_alarms_per_1000_windows"]
        fa_cell = (
            f"{fa['mean']:.2f} {_ci(b['ci95']['false_alarms_per_1000_windows'], 2)}"
        )
        day = (
            f"{b['false_alarms_per_day']['mean']:.2f}"
            if "false_alarms_per_day" in b
            else "-"
        )
        pe = row.get("paired", {}).get("events", {})
        delta = (
            "(best baseline)"
            if name == best.get("events")
            else (
                TOO_SMALL
                if small
                else _diff(pe.get("warned_rate"))
                + (_vs(pe, best.get("events")) if pe else "")
            )
        )
        at_val = (
            f"{v['warned']['mean']:.3g} / {v['events']}, "
            f"{v['false_alarms_per_1000_windows']['mean']:.1f}"
        )
        cells = [
            warned,
            rate_ci,
            chance,
            _quart(b["lead_quartiles"]),
            f"{b['late']['mean']:.3g} ({_quart(b['delay_quartiles'])})",
            f"{b['missed']['mean']:.3g}",
            fa_cell,
            day,
            delta or "-",
            at_val,
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if old:
        lines.append("")
        lines.append("No event metrics (older results files): " + ", ".join(old) + ".")
    if figure:
        lines += [
            "",
            f"![warned-event rate against false alarms, {res['dataset']}]({figure})",
        ]
    ext = [(n, r["external"]) for n, r in res["rows"].items() if "external" in r]
    if ext and res["dataset"] == "skab":
        lines += [
            "",
            "SKAB's own metrics (waico/SKAB core/metrics.py, `chp_score`: point-wise "
            "F1 / FAR / MAR on the `anomaly` column; NAB on the `changepoint` column, "
            "60 s windows to the right of each change point), on our alerts at the "
            "validation F1 threshold: a step is predicted anomalous while the last "
            "window scored before it is in alert. Our windows PREDICT the next 100 s "
            "and the models are fitted on other runs (5 folds), so the protocols "
            "differ; " + PUBLISHED["skab"] + ".",
            "",
            "| method | F1 | FAR, % | MAR, % | NAB standard | NAB LowFP | NAB LowFN | at the budget threshold: F1 / FAR / MAR / NAB standard |",
            "|---|---|---|---|---|---|---|---|",
        ]

        def pm(m: Mapping[str, Any]) -> str:
            return f"{m['mean']:.2f} ± {m['std']:.2f}"

        for name, e in ext:
            m, b = e["val_threshold"], e["budget"]
            cells = [_cell(m["f1"])] + [
                pm(m[k])
                for k in ("far", "mar", "nab_standard", "nab_lowfp", "nab_lowfn")
            ]
            budget = " / ".join(
                f"{b[k]['mean']:.{2 if k == 'f1' else 1}f}"
                for k in ("f1", "far", "mar", "nab_standard")
            )
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {budget} |")
    if ext and res["dataset"] == "daphnet":
        lines += [
            "",
            "Pre-freeze classification (windows without freeze steps; pre-freeze: a "
            f"freeze begins within {_steps(ev['lookback'], spd)} after the window; "
            "normal: no freeze step within that span), next to the "
            + PUBLISHED["daphnet"]
            + ". "
            "Our windows are 100 samples (1.56 s) and every subject is tested on models "
            "fitted on the others.",
            "",
            "| method | sensitivity (val F1 threshold) | specificity (val F1 threshold) | sensitivity (budget) | specificity (budget) |",
            "|---|---|---|---|---|",
        ]
        for name, e in ext:
            v, b = e["val_threshold"], e["budget"]
            lines.append(
                f"| {name} | {_cell(v['sensitivity'])} | {_cell(v['specificity'])} | "
                f"{_cell(b['sensitivity'])} | {_cell(b['specificity'])} |"
            )
    lines.append("")
    lines += _footer(res)
    return "\n".join(lines)
