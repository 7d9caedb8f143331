"""`scjepa demo`: the whole job end to end, on one machine, in a few minutes.

    make demo                      # = scjepa demo --keep-serving
    scjepa demo --rate 500         # faster replay; --no-train uses the cached model only

1. **Model.** Reuses the artifact cached in ``artifacts/demo/`` when it was trained on
   the same data; otherwise pre-trains SC-JEPA (the fast preset, codebook diversity 1.0,
   see configs/improved.yaml), fits the anomaly-prediction probe on the train split of
   the test series (calibration on the validation split, and there the alert threshold
   at a false-alarm budget of :data:`BUDGET` per 1,000 windows) and exports encoder +
   codebook + probe to ONNX.
2. **Service.** Starts ``uvicorn service.main:create_app`` in a subprocess on the
   embedded in-memory store (no Redis, no Docker) and waits for ``/readyz``.
3. **Replay.** Streams the held-out part of 2-4 entities' test series through
   ``POST /ingest`` concurrently (one batched request per tick), drawing a live view of
   the risk per scored window, the alert state and where the true anomalies are; the
   page ``/ui`` shows the same in a browser.
4. **Summary.** Per stream: anomalies preceded by an alert in the window before (and the
   lead time), false alerts.

Held out: per entity the downstream split is 6:2:2 over the test windows (the probe
trains on the first 60 %, its threshold and calibration come from the next 20 %). The
replay starts at the one-window gap before the test split (a window that is no split's
input) and runs to the end of the series, so the probe never saw any replayed window as
an input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import numpy as np

from training.data import WINDOW, Dataset
from training.demo.replay import json_values
from training.errors import UserError

REPO = Path(__file__).resolve().parents[2]
FAST = REPO / "configs" / "fast.yaml"
SPARK = "▁▂▃▄▅▆▇█"
MAX_BATCH = WINDOW  # readings per stream and request: at most one window per response
WAIT_S = 30.0  # POST /ingest?wait=: how long a request waits for its windows' scores


def _say(line: str) -> None:
    print(line, flush=True)


# -- the model ------------------------------------------------------------------------


TRAINED_WITH = (
    "trained-with.json"  # the --set overrides the cached model was trained with
)


def _trained_with(artifact: Path) -> list[str]:
    try:
        return list(json.loads((artifact / TRAINED_WITH).read_text()))
    except (OSError, ValueError, TypeError):
        return []


def _cached(artifact: Path, fingerprint: str) -> dict[str, Any] | None:
    """The cached artifact's manifest when it exists and was trained on this data."""
    try:
        m: dict[str, Any] = json.loads((artifact / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    ok = (artifact / "model.onnx").is_file()
    return m if ok and m.get("training_data_fingerprint") == fingerprint else None


def build_artifact(
    ds: Dataset, data: str, artifact: Path, overrides: list[str]
) -> None:
    """Pre-train (fast preset), fit the probe, export: ``artifact/`` holds the result.

    ``ds`` (loaded once by the caller) serves all three steps; the checkpoint is read
    once and its model serves the probe's features and the export.
    """
    from training.data import pretrain_pairs
    from training.evaluate.baselines import fit_feature_probe, window_stats
    from training.evaluate.encode import CodeFeatures
    from training.evaluate.probe import ProbeConfig
    from training.evaluate.protocol import (
        STATS_ROW,
        evaluate,
        normal_windows,
        prepare_fold,
        served_novelty,
        served_probe,
        with_window_stats,
    )
    from training.evaluate.warning import event_config
    from training.export import export_artifact, holds_budget
    from training.pretrain.checkpoint import load_model
    from training.pretrain.config import load_config
    from training.pretrain.train import pretrain

    if not FAST.is_file():
        raise UserError(f"{FAST}: the fast preset is missing (run from a repo clone)")
    work = artifact / "train"
    if work.exists():
        shutil.rmtree(work)  # a fresh run, not a resume of an older one
    # an older model stays unusable until the new one is complete (manifest last)
    (artifact / "manifest.json").unlink(missing_ok=True)
    cfg = load_config(FAST, ["loss.diversity=1.0", "loss.reduce=mean", *overrides])
    pairs = pretrain_pairs(
        ds,
        window=cfg.data.window,
        val_frac=cfg.data.val_frac,
        min_train=cfg.optim.batch_size,
    )
    epochs = cfg.optim.epochs
    _say(
        f"[1/3] pre-training SC-JEPA (fast preset, {epochs} epochs) on "
        f"{len(pairs.train)} train pairs of {data}"
    )
    t0 = time.time()
    pretrain(cfg, pairs, work / "run")
    best = work / "run" / "best.pt"
    if not best.is_file():
        best = work / "run" / "last.pt"
    _say(f"      done in {time.time() - t0:.0f} s -> {best}")

    _say(
        "[2/3] fitting the anomaly-prediction probe: train split = first 60 % of "
        "each entity's test windows, threshold + calibration on the next 20 %"
    )
    t0 = time.time()
    trained = load_model(best)
    normal = normal_windows(ds)
    codes, stats = CodeFeatures(trained), window_stats(normal)
    methods = {
        "SC-JEPA probe": fit_feature_probe(codes),
        STATS_ROW: fit_feature_probe(with_window_stats(codes, stats)),
    }
    events = event_config(ds, budget=BUDGET)
    ev = evaluate(ds, methods, [0], ProbeConfig(), 50, normal=normal, events=events)
    # serve the probe (codes, or codes + window statistics) that does better on
    # VALIDATION; the test split is only read for the line printed below
    name = max(methods, key=lambda n: ev.fitted[n][0].val["pr_auc"])
    probe = served_probe(ev, name, best, ds, stats if name == STATS_ROW else None)
    # the input-drift monitor, of the windows the probe was fitted and checked on
    probe.novelty = served_novelty(ds.name, prepare_fold(ds, 0, events))
    probe.save(work / "probe.pt")
    row = ev.rows[name]["all"]
    print(
        f"      served: {name.replace(' (diagnostic)', '')} (higher validation PR AUC)"
    )
    f1, auc, pr = (row[k]["mean"] for k in ("f1", "roc_auc", "pr_auc"))
    _say(
        f"      done in {time.time() - t0:.0f} s; on the test split (last 20 %): "
        f"F1 {f1:.2f}, ROC AUC {auc:.2f}, PR AUC {pr:.2f}"
    )

    # alert where validation kept false alarms within the budget, as `scjepa export`
    # does; a validation split too short to hold it falls back to the F1 threshold
    budget_ok = holds_budget(probe)
    _say(
        "[3/3] exporting encoder + codebook + probe to ONNX; alert threshold: "
        + (
            f"the lowest within {BUDGET:g} false alarms per 1,000 validation windows"
            if budget_ok
            else "F1-optimal (no threshold held the false-alarm budget on validation)"
        )
    )
    export_artifact(
        model=trained,
        probe=probe,
        out=artifact,
        name=f"scjepa-demo-{data}",
        ds=ds,
        threshold="budget" if budget_ok else "f1",
        # the replay shows one line per non-overlapping window; the threshold, set on
        # the evaluation's dense windows, keeps about its share of windows in false alert
        hop=WINDOW,
    )
    (artifact / TRAINED_WITH).write_text(json.dumps(list(overrides)) + "\n")


# The false-alarm budget the demo's threshold is set at: about 2 false alerts in the
# replay's 104 windows. The benchmarks use 1 per 1,000 (`scjepa evaluate --fa-budget`),
# which a replay this short would show as no alert at all.
BUDGET = 20.0


# -- what is replayed -----------------------------------------------------------------


@dataclass
class Stream:
    name: str
    values: np.ndarray  # (T, V) the replayed readings
    labels: np.ndarray  # (T,) 0/1 per step
    first_step: int  # index of values[0] in the entity's test series
    sent: int = 0
    # per scored window, oldest first (window k = values[k * WINDOW : (k + 1) * WINDOW])
    risks: list[float] = field(default_factory=list)
    alerts: list[bool] = field(default_factory=list)

    def cur_label(self, k: int) -> int:
        return int(self.labels[k * WINDOW : (k + 1) * WINDOW].max())

    def next_label(self, k: int) -> int | None:
        lo, hi = (k + 1) * WINDOW, (k + 2) * WINDOW
        return int(self.labels[lo:hi].max()) if hi <= len(self.labels) else None


def _predictable(s: Stream) -> int:
    """Anomaly onsets in ``s`` that have a whole window before them."""
    onsets = np.flatnonzero(np.diff(np.r_[0, s.labels].astype(np.int8)) == 1)
    return int((onsets >= WINDOW).sum())


def held_out_streams(ds: Dataset, n: int) -> list[Stream]:
    """The held-out tail of up to ``n`` entities' test series (first the entities whose
    tail holds an anomaly onset after its first window, in data-set order)."""
    from training.data.windows import split_bounds

    out: list[Stream] = []
    for e in ds.entities:
        if e.test is None or e.labels is None or len(e.test) < 4 * WINDOW:
            continue
        n_samples = len(e.test) // WINDOW - 1
        start = max(split_bounds(n_samples)["test"][0] - 1, 0) * WINDOW
        end = len(e.test) // WINDOW * WINDOW
        name = "".join(c if c.isalnum() or c in "._:-" else "-" for c in e.name)
        out.append(Stream(name, e.test[start:end], e.labels[start:end], start))
    out.sort(key=lambda s: -min(_predictable(s), 1))  # stable: those with onsets first
    if not out:
        raise UserError(f"{ds.name}: no entity has a test series to replay")
    return out[:n]


# -- the service ----------------------------------------------------------------------


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(wanted: int) -> int:
    if wanted and _port_free(wanted):
        return wanted
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(artifact: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCJEPA_")}
    env["SCJEPA_ARTIFACT"] = str(artifact.resolve())  # no SCJEPA_REDIS_URL: in memory
    # this checkout's service/, installed or not
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), env.get("PYTHONPATH")) if p
    )
    cmd = [sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    with log.open("wb") as f:
        return subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(log.parent),
            start_new_session=True,  # Ctrl-C reaches the demo, which stops the server
        )


def wait_ready(
    client: httpx.Client, proc: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise UserError(f"the service exited ({proc.returncode}):\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if client.get("/readyz").status_code == 200:
                return
        time.sleep(0.2)
    raise UserError(f"the service was not ready after {timeout:.0f} s (see {log})")


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the live view --------------------------------------------------------------------

# ANSI colours of the live view
RED, YEL, MAG = "\x1b[31m", "\x1b[33m", "\x1b[35m"
DIM, BOLD, RESET = "\x1b[2m", "\x1b[1m", "\x1b[0m"
# what the marks mean, printed before the replay
LEGEND_TTY = (
    f"One sparkline char per scored {WINDOW}-step window, from risk 0 (▁) to twice the "
    "threshold (█), red = ALERT. Below it: ▲ = the NEXT window truly holds an anomaly "
    "(an alert should fire here), ■ = this window is inside an anomaly.\n"
)
LEGEND_PLAIN = (
    "One line per scored window: its risk, ALERT when over the threshold, and whether "
    "the NEXT window truly holds an anomaly."
)


def spark(s: Stream, width: int, scale: float, color: bool) -> tuple[str, str]:
    """Risk sparkline from 0 to ``scale`` (red = alert) and, under it, the truth per
    window: ▲ = the next window holds an anomaly (an alert here is a hit), ■ = this
    window holds one."""
    lo = max(len(s.risks) - width, 0)
    top, marks = [], []
    for k in range(lo, len(s.risks)):
        level = s.risks[k] / scale  # the threshold sits at half height
        ch = SPARK[max(0, min(int(level * len(SPARK)), len(SPARK) - 1))]
        top.append(f"{RED}{ch}{RESET}" if color and s.alerts[k] else ch)
        if s.next_label(k):
            marks.append(f"{YEL}▲{RESET}" if color else "▲")
        elif s.cur_label(k):
            marks.append(f"{MAG}■{RESET}" if color else "■")
        else:
            marks.append(f"{DIM}·{RESET}" if color else "·")
    return "".join(top), "".join(marks)


class Live:
    """Redraws a block of lines in place (a TTY), or prints one line per scored window."""

    def __init__(self, streams: list[Stream], threshold: float, tty: bool) -> None:
        self.streams, self.threshold, self.tty = streams, threshold, tty
        self.lines = 0
        cols = shutil.get_terminal_size((100, 20)).columns
        self.width = max(10, min(cols - 56, 120))  # a stream's line: width + 53 chars
        self.last = 0.0

    def window(self, s: Stream) -> None:
        if self.tty:
            return
        k = len(s.risks) - 1
        a = s.first_step + k * WINDOW
        nxt = {None: "unknown", 0: "no", 1: "YES"}[s.next_label(k)]
        flag = "  ALERT" if s.alerts[k] else ""
        steps = f"window steps {a}-{a + WINDOW - 1}"
        risk = f"risk {s.risks[k]:.3f}{flag:<7}"
        _say(f"{s.name:<10} {steps}  {risk}  next window anomalous: {nxt}")

    def draw(self, force: bool = False) -> None:
        if not self.tty or (not force and time.monotonic() - self.last < 0.1):
            return
        self.last = time.monotonic()
        out = []
        scale = min(2 * self.threshold, 1.0) or 1.0  # the threshold at half height
        for s in self.streams:
            top, marks = spark(s, self.width, scale, True)
            if s.risks:
                alert = s.alerts[-1]
                state = f"{RED}{BOLD} ALERT {RESET}" if alert else "  ok   "
                risk = f"risk {s.risks[-1]:.3f}"
            else:
                state, risk = f"{DIM}warming{RESET}", "risk   -  "
            pad = " " * (self.width - min(len(s.risks), self.width))
            done = f"{DIM}{s.sent}/{len(s.values)}{RESET}"
            thr = f"thr {self.threshold:.3f}"
            out.append(
                f"{BOLD}{s.name:<10}{RESET} {top}{pad}  {risk} / {thr} {state} {done}"
            )
            out.append(f"{'':<10} {marks}")
        up = f"\x1b[{self.lines}F" if self.lines else ""
        sys.stdout.write(up + "".join(f"\x1b[2K{line}\n" for line in out))
        sys.stdout.flush()
        self.lines = len(out)


# -- replay and summary ---------------------------------------------------------------


def replay(
    client: httpx.Client, streams: list[Stream], rate: float, live: Live
) -> None:
    """Send every stream's readings, ``batch`` per stream and request, at ``rate``
    readings/s per stream (0 = as fast as the service answers)."""
    batch = MAX_BATCH if rate <= 0 else max(1, min(MAX_BATCH, round(rate / 10)))
    t0, start = float(int(time.time())), time.monotonic()
    pos = 0
    while any(s.sent < len(s.values) for s in streams):
        if rate > 0:
            time.sleep(max(0.0, start + pos / rate - time.monotonic()))
        body = []
        for s in streams:
            lo, hi = s.sent, min(s.sent + batch, len(s.values))
            if lo >= hi:
                continue
            readings = [
                {"ts": t0 + s.first_step + i, "values": json_values(s.values[i])}
                for i in range(lo, hi)
            ]
            body.append({"stream": s.name, "readings": readings})
        # ?wait: the response carries the scores of the windows it completes
        r = client.post("/ingest", json={"streams": body}, params={"wait": WAIT_S})
        if r.status_code != 200:
            raise UserError(f"POST /ingest -> {r.status_code}: {r.text[:300]}")
        by_name = {s.name: s for s in streams}
        for res in r.json()["results"]:
            s = by_name[res["stream"]]
            s.sent = res["readings_total"]
            if res["windows_scored"]:
                s.risks.append(float(res["risk"]))
                s.alerts.append(bool(res["alert"]))
                live.window(s)
        pos += batch
        live.draw()
    live.draw(force=True)


@dataclass
class Outcome:
    windows: int
    anomalies: int  # onsets with a window before them in the replay
    caught: int  # ... whose previous window was in alert
    leads: list[int]  # steps from the first alert of that run to the onset
    false_alerts: int  # alerts whose next window is normal
    alerts: int

    def __add__(self, other: Outcome) -> Outcome:
        """Field by field: counts add up, lead lists concatenate."""
        return Outcome(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )


def outcome(s: Stream) -> Outcome:
    onsets = np.flatnonzero(np.diff(np.r_[0, s.labels].astype(np.int8)) == 1)
    anomalies = caught = 0
    leads: list[int] = []
    for o in onsets:
        k = int(o) // WINDOW  # the window holding the onset
        if k < 1 or k - 1 >= len(s.alerts):
            continue
        anomalies += 1
        if s.alerts[k - 1]:
            caught += 1
            j = k - 1
            while j > 0 and s.alerts[j - 1]:
                j -= 1
            leads.append(int(o) - (j + 1) * WINDOW)  # alert raised at the end of j
    false_alerts = sum(1 for k, a in enumerate(s.alerts) if a and s.next_label(k) == 0)
    return Outcome(len(s.risks), anomalies, caught, leads, false_alerts, sum(s.alerts))


_COLUMNS = (  # the summary's columns after the stream's name: (title, width)
    ("windows", 7),
    ("anomalies", 9),
    ("caught", 6),
    ("lead (steps)", 14),
    ("alerts", 6),
    ("false alerts", 12),
)


def _summary_row(name: str, *cells: object) -> str:
    cols = " ".join(f"{c:>{w}}" for c, (_, w) in zip(cells, _COLUMNS, strict=True))
    return f"  {name:<10} {cols}"


def _outcome_row(name: str, o: Outcome, lead: str) -> str:
    cells = (o.windows, o.anomalies, o.caught, lead, o.alerts, o.false_alerts)
    return _summary_row(name, *cells)


def summary(streams: list[Stream]) -> str:
    lines = [
        "",
        "Summary (an anomaly is caught when the window before its onset was in alert;"
        " lead = steps from the first alert of that run to the onset):",
        _summary_row("stream", *(title for title, _ in _COLUMNS)),
    ]
    tot = Outcome(0, 0, 0, [], 0, 0)
    for s in streams:
        o = outcome(s)
        lines.append(_outcome_row(s.name, o, ", ".join(map(str, o.leads)) or "-"))
        tot += o
    med = f"median {int(np.median(tot.leads))}" if tot.leads else "-"
    lines += [
        _outcome_row("all", tot, med),
        f"Caught {tot.caught} of {tot.anomalies} "
        f"{'anomaly' if tot.anomalies == 1 else 'anomalies'} before "
        f"{'it' if tot.anomalies == 1 else 'they'} started, with "
        f"{tot.false_alerts} false alert{'' if tot.false_alerts == 1 else 's'} in "
        f"{tot.windows} windows.",
    ]
    return "\n".join(lines)


# -- command line ---------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        choices=("synthetic", "msl"),
        default="synthetic",
        help="synthetic (embedded) or msl (needs --root)",
    )
    p.add_argument("--root", type=Path, help="data folder for msl ($SCJEPA_DATA)")
    p.add_argument(
        "--artifact",
        type=Path,
        help="model cache (default artifacts/demo, artifacts/demo-msl)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=8000,
        help="service port (a free one if taken; 0 = any)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=250.0,
        help="readings/s per stream (0 = as fast as possible)",
    )
    p.add_argument(
        "--streams",
        type=int,
        default=4,
        choices=(1, 2, 3, 4),
        help="entities replayed concurrently",
    )
    p.add_argument(
        "--no-train",
        action="store_true",
        help="use the cached artifact; fail if there is none",
    )
    p.add_argument("--retrain", action="store_true", help="ignore the cached artifact")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a training setting, e.g. --set optim.epochs=1",
    )
    p.add_argument(
        "--keep-serving",
        action="store_true",
        help="after the replay, keep the service (and /ui) up until Ctrl-C",
    )
    p.add_argument(
        "--plain",
        action="store_true",
        help="print lines instead of the live view (default off a TTY)",
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    from training.data import load_dataset

    if (
        args.data != "synthetic"
        and args.root is None
        and not os.environ.get("SCJEPA_DATA")
    ):
        print("note: --root not given; reading from $SCJEPA_DATA or the default cache")
    ds = load_dataset(args.data, args.root)
    artifact = args.artifact or Path(
        "artifacts/demo" if args.data == "synthetic" else f"artifacts/demo-{args.data}"
    )
    if args.no_train and args.retrain:
        raise UserError("--no-train and --retrain: choose one")
    cached = _cached(artifact, ds.fingerprint())
    manifest = None if args.retrain else cached
    if manifest is not None and args.set and args.set != _trained_with(artifact):
        raise UserError(
            f"--set {' '.join(args.set)}: the cached model in {artifact}/ was trained "
            "without it; add --retrain to train again with it"
        )
    if manifest is None:
        if args.no_train:
            raise UserError(
                f"{artifact}: no cached model for {args.data} (drop --no-train)"
            )
        why = "retraining" if cached is not None else f"No cached model in {artifact}/"
        print(f"{why}: training one (a few minutes on a laptop).")
        build_artifact(ds, args.data, artifact, args.set)
        manifest = _cached(artifact, ds.fingerprint())
        assert manifest is not None
    else:
        print(f"Using the cached model in {artifact}/ (--retrain to train again).")

    streams = held_out_streams(ds, args.streams)
    port = pick_port(args.port)
    url = f"http://127.0.0.1:{port}"
    log = artifact.resolve() / "server.log"
    tty = sys.stdout.isatty() and not args.plain
    proc = start_service(artifact, port, log)
    old_term = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server too
    try:
        with httpx.Client(base_url=url, timeout=30.0) as client:
            wait_ready(client, proc, log, timeout=60.0)
            b, r = (BOLD, RESET) if tty else ("", "")
            rate = f"{args.rate:g} readings/s" if args.rate > 0 else "full speed"
            print(f"\nService up at {url} (in-memory store; log {log})")
            print(f"  -> open {b}{url}/ui{r} in a browser to watch it live")
            model = f"Model {manifest['name']} {manifest['version']}"
            print(f"{model}, alert threshold {manifest['threshold']:.3f}")
            print(
                f"Replaying at {rate} per stream the held-out tail of each test "
                "series (the probe never saw these windows):"
            )
            for s in streams:
                steps = f"steps {s.first_step}-{s.first_step + len(s.values) - 1}"
                print(f"  {s.name:<10} {steps} ({len(s.values) // WINDOW} windows)")
            print(LEGEND_TTY if tty else LEGEND_PLAIN)
            live = Live(streams, float(manifest["threshold"]), tty)
            replay(client, streams, args.rate, live)
            print(summary(streams), flush=True)
        if args.keep_serving:
            print(
                f"\nStill serving: live page {url}/ui, API {url}/docs — press Ctrl-C "
                "to stop.",
                flush=True,
            )
            try:
                while proc.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                print("\nstopping the service", flush=True)
            return 0
        print("Stopping the service (--keep-serving keeps it and /ui up).")
        return 0
    finally:
        stop_service(proc)
        signal.signal(signal.SIGTERM, old_term)
