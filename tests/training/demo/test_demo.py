"""`scjepa demo` end to end with a tiny model: train, export, serve, replay, summary."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from training.cli import main as scjepa
from training.data import load_dataset
from training.demo import demo

TINY = [
    "optim.epochs=1", "model.d_model=16", "model.n_layers=1", "model.n_heads=2",
    "model.n_codes=16", "model.pred_dim=16", "run.threads=2",
]  # fmt: skip


def test_held_out_streams_skip_every_probe_input() -> None:
    from training.data import downstream_splits

    ds = load_dataset("synthetic", seed=0)
    streams = demo.held_out_streams(ds, 4)
    assert [s.name for s in streams] == ["unit-1", "unit-2", "unit-3", "unit-4"]
    splits = downstream_splits(ds)
    seen = np.r_[splits["train"].t, splits["val"].t]  # windows the probe trained on
    for i, s in enumerate(streams):
        assert s.first_step % demo.WINDOW == 0
        first = s.first_step // demo.WINDOW
        used = seen[np.r_[splits["train"].entity, splits["val"].entity] == i]
        assert first > used.max()  # no replayed window was a probe input
        assert first == splits["test"].t[splits["test"].entity == i].min() - 1
        np.testing.assert_array_equal(s.values, ds.entities[i].test[s.first_step :])


def test_outcome_counts_hits_leads_and_false_alerts() -> None:
    labels = np.zeros(600, dtype=np.int8)
    labels[330:360] = 1  # onset in window 3
    labels[520:540] = 1  # onset in window 5
    s = demo.Stream("s", np.zeros((600, 2)), labels, first_step=0)
    s.risks = [0.1, 0.9, 0.9, 0.9, 0.1, 0.1]
    s.alerts = [False, True, True, True, False, False]
    o = demo.outcome(s)
    assert (o.windows, o.anomalies, o.caught) == (6, 2, 1)
    assert o.leads == [330 - 200]  # the alert run started at the end of window 1
    assert o.false_alerts == 2  # windows 1 and 3: their next window is normal
    assert o.alerts == 3


def test_summary_counts_false_alerts_in_words() -> None:
    labels = np.zeros(500, dtype=np.int8)
    labels[250:260] = 1  # onset in window 2
    s = demo.Stream("s", np.zeros((500, 2)), labels, first_step=0)
    s.risks = [0.9, 0.9, 0.1, 0.9, 0.1]
    s.alerts = [True, True, False, False, False]  # window 0: false; 1: caught
    assert demo.summary([s]).endswith(
        "Caught 1 of 1 anomaly before it started, with 1 false alert in 5 windows."
    )
    s.alerts = [True, True, False, True, False]  # and window 3: false
    assert demo.summary([s]).endswith("with 2 false alerts in 5 windows.")


@pytest.mark.slow
def test_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    art = tmp_path / "artifact"
    args = ["demo", "--artifact", str(art), "--rate", "0", "--port", "0", "--plain"]
    args += [x for kv in TINY for x in ("--set", kv)]
    assert scjepa(args) == 0
    out = capsys.readouterr().out
    manifest = json.loads((art / "manifest.json").read_text())
    assert (art / "model.onnx").is_file()
    ds = load_dataset("synthetic", seed=0)
    assert manifest["training_data_fingerprint"] == ds.fingerprint()
    assert "[1/3] pre-training" in out and "[3/3] exporting" in out
    # it alerts at the threshold of its false-alarm budget (not the F1-optimal one)
    rule = manifest["eval_metrics"]["threshold"]
    assert rule["rule"] == "budget" and rule["false_alarms_per_1000"] == 20.0
    # its replay shows non-overlapping windows: served at hop = the window, not the
    # stride the threshold was set on
    assert manifest["hop"] == manifest["window"] == 100 != rule["stride"]
    threshold = manifest["threshold"]
    assert threshold == pytest.approx(rule["budget_threshold"]) != rule["f1_threshold"]
    assert "within 20 false alarms per 1,000 validation windows" in out
    # one plain line per scored window: 4 streams x 26 windows (steps 9400-11999)
    assert len(re.findall(r"^unit-\d +window steps", out, re.M)) == 4 * 26
    assert "unit-4     window steps 9400-9499" in out
    assert "Summary" in out
    rows = re.findall(r"^  (unit-\d) +26 +(\d+) +(\d+) ", out, re.M)
    assert [r[0] for r in rows] == ["unit-1", "unit-2", "unit-3", "unit-4"]
    assert sum(int(r[1]) for r in rows) == 7  # the anomaly onsets in the replay
    url = re.search(r"Service up at (http://127\.0\.0\.1:\d+)", out)
    assert url is not None
    # stopped: no URL after the summary, and it says so
    assert (
        "http://" not in out[out.index("Summary") :] and "Stopping the service" in out
    )
    with pytest.raises(OSError):  # the server was stopped
        urllib.request.urlopen(url.group(1) + "/healthz", timeout=2)

    # second run: the cached model is reused, nothing is trained
    assert scjepa(["demo", "--artifact", str(art), "--rate", "0", "--port", "0",
                   "--plain", "--no-train", "--streams", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "Using the cached model" in out and "[1/3]" not in out
    assert len(re.findall(r"^unit-\d +window steps", out, re.M)) == 2 * 26
    # a --set the cached model was not trained with is not silently ignored
    base = ["demo", "--artifact", str(art), "--port", "0", "--plain"]
    assert scjepa([*base, "--no-train", "--set", "optim.epochs=1"]) == 2
    assert "add --retrain" in capsys.readouterr().err
    assert scjepa([*base, "--no-train", "--retrain"]) == 2
    assert "--no-train and --retrain" in capsys.readouterr().err


def test_demo_no_train_without_cache_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert scjepa(["demo", "--artifact", str(tmp_path), "--no-train"]) == 2
    assert "no cached model" in capsys.readouterr().err
