"""What the results page must carry under docs/evaluation.md: a paired difference
names the best baseline it is with (item 11), the onset and continuation subsets get
the window metrics and their positive counts (item 6), and every results file records
its data set and code version (item 8)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from training.evaluate import skab_protocol
from training.evaluate.results import markdown, merge

RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name / "results.json").read_text())


def _table(text: str, head: str) -> list[str]:
    """The rows of the table whose header line starts with ``head``."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(head))
    out = []
    for ln in lines[i + 2 :]:
        if not ln.startswith("|"):
            break
        out.append(ln)
    return out


def _row(table: list[str], name: str) -> list[str]:
    line = next(ln for ln in table if ln.startswith(f"| {name} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_a_merged_rows_difference_names_the_baseline_it_is_with() -> None:
    """Two runs on one data set chose different best baselines on validation (Daphnet:
    the raw-feature trees, and in the MLP-only run the raw-feature MLP for the window
    metrics, the logistic row for the events). The page names the first; a later run's
    row compared with its own run's best must say so, not pass for a difference with
    the named one."""
    first, later = _load("daphnet-trees200"), _load("daphnet")
    assert first["best_baseline"]["window"] != later["best_baseline"]["window"]
    assert first["best_baseline"]["events"] != later["best_baseline"]["events"]
    text = markdown(merge([(first, "a"), (later, "b")]))
    name = "SC-JEPA probe on detector scores (b)"
    win = _row(_table(text, "| method | F1 | ROC AUC | PR AUC"), name)
    vs_w = later["best_baseline"]["window"]
    assert win[9].endswith(f"(vs {vs_w})"), win[9]
    ev = _row(_table(text, "| method | warned / events"), name)
    vs_e = later["best_baseline"]["events"]
    assert ev[9] == "n too small" or ev[9].endswith(f"(vs {vs_e})"), ev[9]
    # the first run's rows are with the named baseline: no such note
    own = _row(_table(text, "| method | F1 | ROC AUC | PR AUC"), "SC-JEPA probe (a)")
    assert "(vs " not in own[9] and re.match(r"[+-]\d", own[9]), own[9]


def test_onsets_and_continuations_get_every_window_metric_and_count() -> None:
    """Item 6: precision, recall, F1, ROC AUC and PR AUC on the onsets (current window
    normal) and the continuations (current window anomalous), with their positives."""
    res = _load("smd-trees200")
    text = markdown(res)
    first = next(iter(res["rows"].values()))
    for s in ("onset", "continuation"):
        assert f"{s}s: {first[s]['n']} windows, {first[s]['positives']} positive" in (
            text
        )
    table = _table(text, "| method | onset F1")
    assert len(table) == len(res["rows"])
    cells = _row(table, "kNN to train windows")
    row = res["rows"]["kNN to train windows"]
    metrics = ("f1", "roc_auc", "pr_auc", "precision", "recall")
    want = [
        f"{row[s][m]['mean']:.3f} ± {row[s][m]['std']:.3f}"
        for s in ("onset", "continuation")
        for m in metrics
    ]
    assert cells[1:] == want
    # fewer than 10 positives (MSL's 7 onset positives): not a number with a std
    msl = markdown(_load("msl-trees200"))
    onset_cells = _row(_table(msl, "| method | onset F1"), "kNN to train windows")[1:6]
    assert onset_cells == ["n too small"] * 5


def test_skab_protocol_results_record_data_set_and_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scjepa skab-protocol`'s results.json, a table on the results page, records
    its data set and the code version (git commit) like every results file."""
    fake = {
        "kind": skab_protocol.KIND,
        "protocol": "p",
        "runs": 1,
        "points": 10,
        "anomaly_share": 0.5,
        "checkpoint": None,
        "n_boot": 1,
        "published": "x",
        "rows": {},
    }
    monkeypatch.setattr(skab_protocol, "evaluate", lambda *a, **k: dict(fake))
    args = argparse.Namespace(
        root=None, checkpoint=None, train_rows=400, n_boot=1, out=tmp_path
    )
    assert skab_protocol.run(args) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["dataset"] == "skab"
    assert res["git_commit"] and isinstance(res["git_commit"], str)
    assert "wall_s" in res and "command" in res


def test_reference_bars_only_on_the_split_they_were_measured_on() -> None:
    """evaluation.md's bars were measured on SMD-19's test split (47 onset
    positives): before, any `--dataset smd` run (the full 28 machines too) quoted them."""
    from training.evaluate.results import _footer

    res = _load("smd")
    assert any("Reference bars" in ln for ln in _footer(res))
    res["splits"]["test"]["onsets"] = 60  # another cut of SMD
    assert not any("Reference bars" in ln for ln in _footer(res))
