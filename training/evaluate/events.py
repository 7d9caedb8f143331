"""Event-level early warning (docs/evaluation.md, item 9): what an operator buys.

A *segment* is one entity's scored stretch of time (e.g. its test split): the 0/1
label of every step, and the windows scored on it, each known by its ``end`` (one
past its last step, so the window covers ``[end - W, end)``) and its score. A window
is *in alert* when ``score >= threshold``.

- An *event* is a maximal run of anomalous steps in a segment; its *onset* is the run's
  first step. An event that starts at the segment's first step began before it was
  observed (the split cut it): it is *censored*, counted apart, never warned or missed.
- An event is *warned* when an alerting window ends before its onset and at most
  ``lookback`` steps before it: ``onset - lookback <= end <= onset``. Lead time is
  onset minus the end of the earliest such window.
- An event not warned is *detected late* when an alerting window ends inside it
  (``onset < end <= offset``, its last step anomalous); the delay is that first
  window's end minus the onset. Otherwise it is *missed*.
- A *false alarm* is an alerting window with no onset within ``lookback`` steps after
  its end (``end <= onset <= end + lookback``) whose last step is not inside an event.

Every function takes the segments as they are and counts directly; the tests check the
counts against a brute-force reading of the definitions above.

For intervals (evaluation.md item 11) a segment is cut into *blocks*
(:func:`split_segment`): one cut ``lookback + 1`` steps before each onset, where that
falls after the previous event has ended (else the two events share a block). Every
count is a sum over blocks, exactly (tested), so a block bootstrap resamples events
together with their look-back and the normal time after them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Segment:
    """One entity's scored stretch: step labels and the windows scored on it."""

    labels: np.ndarray  # (T,) 0/1 per step
    ends: np.ndarray  # (N,) window ends, one past each window's last step, 1..T
    scores: np.ndarray  # (N,) higher = more anomalous

    def __post_init__(self) -> None:
        ends = np.asarray(self.ends)
        assert ends.shape == np.shape(self.scores), "one score per window end"
        assert ends.size == 0 or (ends.min() >= 1 and ends.max() <= len(self.labels)), (
            "window ends must lie in 1..T"
        )


def events(labels: np.ndarray) -> np.ndarray:
    """(E, 2) [onset, offset) of each maximal run of anomalous steps."""
    y = np.r_[0, np.asarray(labels, dtype=np.int8).astype(bool), 0].astype(np.int8)
    edges = np.diff(y)
    return np.stack([np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)], axis=1)


@dataclass
class EventCounts:
    """Counts at one threshold, summed over segments."""

    events: int = 0  # observed onsets (censored ones excluded)
    censored: int = 0  # events already running at a segment's first step
    warned: int = 0
    late: int = 0
    missed: int = 0
    false_alarms: int = 0
    # runs of consecutive alerting windows that begin with a false alarm: the false
    # pages of a pager that notifies when a stream's alert starts
    false_pages: int = 0
    windows: int = 0  # scored windows
    steps: int = 0  # steps covered by the segments (for rates per day)
    leads: list[int] = field(default_factory=list)  # steps, one per warned event
    delays: list[int] = field(default_factory=list)  # steps, one per late detection

    @property
    def warned_rate(self) -> float:
        return self.warned / self.events if self.events else float("nan")

    @property
    def false_alarms_per_1000(self) -> float:
        return 1000 * self.false_alarms / self.windows if self.windows else float("nan")

    @property
    def false_pages_per_1000(self) -> float:
        return 1000 * self.false_pages / self.windows if self.windows else float("nan")

    def add(self, other: EventCounts) -> None:
        for name in ("events", "censored", "warned", "late", "missed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.false_alarms += other.false_alarms
        self.false_pages += other.false_pages
        self.windows += other.windows
        self.steps += other.steps
        self.leads += other.leads
        self.delays += other.delays


def segment_counts(seg: Segment, threshold: float, lookback: int) -> EventCounts:
    """Warned / late / missed events and false alarms of one segment at ``threshold``."""
    labels = np.asarray(seg.labels).astype(bool)
    ends = np.asarray(seg.ends, dtype=np.int64)
    order = np.argsort(ends, kind="stable")
    alerting = np.asarray(seg.scores)[order] >= threshold  # in time order
    alert_ends = ends[order][alerting]
    runs = events(labels)
    out = EventCounts(windows=len(ends), steps=len(labels))
    onsets = []
    for onset, offset in runs.tolist():
        if onset == 0:
            out.censored += 1
            continue
        onsets.append(onset)
        out.events += 1
        # alerting windows ending in [onset - lookback, onset]
        lo = np.searchsorted(alert_ends, onset - lookback, side="left")
        hi = np.searchsorted(alert_ends, onset, side="right")
        if hi > lo:
            out.warned += 1
            out.leads.append(int(onset - alert_ends[lo]))
            continue
        # first alerting window ending inside the event: onset < end <= offset
        k = np.searchsorted(alert_ends, onset, side="right")
        if k < len(alert_ends) and alert_ends[k] <= offset:
            out.late += 1
            out.delays.append(int(alert_ends[k] - onset))
        else:
            out.missed += 1
    # false alarms: no onset in [end, end + lookback] and the last step not anomalous
    on = np.asarray(onsets, dtype=np.int64)
    if len(alert_ends):
        first_onset_after = np.searchsorted(on, alert_ends, side="left")
        padded = np.r_[on, np.iinfo(np.int64).max // 2]  # "no later onset"
        announcing = padded[first_onset_after] - alert_ends <= lookback
        inside = labels[alert_ends - 1]
        false = ~announcing & ~inside
        out.false_alarms = int(np.sum(false))
        starts = ~np.r_[False, alerting[:-1]][alerting]  # a run's first window
        out.false_pages = int(np.sum(false & starts))
    return out


def block_cuts(labels: np.ndarray, lookback: int) -> np.ndarray:
    """Steps where :func:`split_segment` starts a new block: ``onset - lookback - 1``
    for each onset, kept when it lies after the previous event's end (and after the
    previous cut, and after step 0)."""
    cuts: list[int] = []
    prev_offset = 0
    for onset, offset in events(labels).tolist():
        c = onset - lookback - 1
        if onset > 0 and c > 0 and c >= prev_offset and (not cuts or c > cuts[-1]):
            cuts.append(c)
        prev_offset = offset
    return np.asarray(cuts, dtype=np.int64)


def split_segment(seg: Segment, lookback: int) -> list[tuple[int, Segment, np.ndarray]]:
    """The segment cut at :func:`block_cuts`: (start step, block, indices of its windows
    in ``seg``). A window belongs to the block holding its last step; the counts of
    the blocks sum to the segment's at every threshold."""
    labels = np.asarray(seg.labels)
    ends = np.asarray(seg.ends, dtype=np.int64)
    scores = np.asarray(seg.scores)
    bounds = np.r_[0, block_cuts(labels, lookback), len(labels)]
    out = []
    for lo, hi in itertools.pairwise(bounds):
        idx = np.flatnonzero((ends > lo) & (ends <= hi))
        out.append((int(lo), Segment(labels[lo:hi], ends[idx] - lo, scores[idx]), idx))
    return out


def event_counts(
    segments: Sequence[Segment], threshold: float, lookback: int
) -> EventCounts:
    """:func:`segment_counts` summed over segments."""
    total = EventCounts()
    for seg in segments:
        total.add(segment_counts(seg, threshold, lookback))
    return total


def quartiles(values: Sequence[int]) -> list[float] | None:
    """[q25, median, q75], or None when there is nothing to summarise."""
    if not len(values):
        return None
    return [float(q) for q in np.percentile(values, [25, 50, 75])]


def summary(
    counts: EventCounts, steps_per_day: float | None = None
) -> dict[str, object]:
    """The operator's figures at one threshold, JSON-ready."""
    out: dict[str, object] = {
        "events": counts.events,
        "censored_events": counts.censored,
        "warned": counts.warned,
        "warned_rate": counts.warned_rate,
        "lead_quartiles": quartiles(counts.leads),
        "late": counts.late,
        "delay_quartiles": quartiles(counts.delays),
        "missed": counts.missed,
        "false_alarms": counts.false_alarms,
        "windows": counts.windows,
        "false_alarms_per_1000_windows": counts.false_alarms_per_1000,
        "false_pages": counts.false_pages,
        "false_pages_per_1000_windows": counts.false_pages_per_1000,
    }
    if steps_per_day is not None and counts.steps:
        out["false_alarms_per_day"] = counts.false_alarms * steps_per_day / counts.steps
        out["false_pages_per_day"] = counts.false_pages * steps_per_day / counts.steps
    return out


def warning_curve(
    segments: Sequence[Segment], lookback: int, n_thresholds: int = 100
) -> dict[str, list[float]]:
    """Warned-event rate against false alarms per 1,000 windows as the threshold sweeps
    the scores' quantiles (from alerting on every window to alerting on none)."""
    scores = np.concatenate([np.asarray(s.scores, dtype=np.float64) for s in segments])
    qs = np.unique(np.quantile(scores, np.linspace(0, 1, n_thresholds)))
    thresholds = np.r_[qs, np.inf]
    warned, fa = [], []
    for t in thresholds:
        c = event_counts(segments, float(t), lookback)
        warned.append(c.warned_rate)
        fa.append(c.false_alarms_per_1000)
    return {
        "threshold": thresholds.tolist(),
        "warned_rate": warned,
        "false_alarms_per_1000_windows": fa,
    }


def threshold_at_budget(
    segments: Sequence[Segment], lookback: int, max_fa_per_1000: float
) -> float:
    """The lowest threshold (most warnings) whose false alarms per 1,000 windows stay
    within the budget, chosen on the given (validation) segments."""
    scores = np.unique(
        np.concatenate([np.asarray(s.scores, dtype=np.float64) for s in segments])
    )
    best = float("inf")
    lo, hi = 0, len(scores) - 1
    # false alarms fall as the threshold rises: binary search on the sorted scores
    while lo <= hi:
        mid = (lo + hi) // 2
        c = event_counts(segments, float(scores[mid]), lookback)
        if c.false_alarms_per_1000 <= max_fa_per_1000:
            best, hi = float(scores[mid]), mid - 1
        else:
            lo = mid + 1
    return best


def shifted_warned(
    segments: Sequence[Segment],
    threshold: float,
    lookback: int,
    n_shifts: int = 200,
    seed: int = 0,
) -> np.ndarray:
    """Warned events under the null that alerts are not aligned with onsets: each
    segment's alert sequence is rotated by a random offset (its alert count and
    clustering kept), ``n_shifts`` times; returns the total warned per rotation. The
    offsets depend on ``seed`` and the segments' lengths only, not on the scores: the
    same seed rotates every probe seed's alerts alike (the null of their mean)."""
    rng = np.random.default_rng(seed)
    total = np.zeros(n_shifts, dtype=np.int64)
    for seg in segments:
        ends = np.asarray(seg.ends, dtype=np.int64)
        n = len(ends)
        if n == 0:
            continue
        r = rng.integers(0, n, n_shifts)  # alerts rotated by r: a'[i] = a[i - r]
        order = np.argsort(ends, kind="stable")
        ends = ends[order]
        alert = (np.asarray(seg.scores)[order] >= threshold).astype(np.int64)
        onsets = np.array([o for o, _ in events(seg.labels).tolist() if o > 0])
        if not len(onsets) or not alert.any():
            continue
        # windows announcing each onset: ends in [onset - lookback, onset]
        i0 = np.searchsorted(ends, onsets - lookback, side="left")
        i1 = np.searchsorted(ends, onsets, side="right")
        width = i1 - i0
        prefix = np.r_[0, np.cumsum(np.r_[alert, alert])]  # over two laps
        start = (i0[None, :] - r[:, None]) % n  # (shifts, onsets)
        hits = prefix[start + width[None, :]] - prefix[start]
        total += ((hits > 0) & (width[None, :] > 0)).sum(axis=1)
    return total
