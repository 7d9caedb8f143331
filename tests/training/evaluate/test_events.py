"""Event-level early-warning metrics against a brute-force reading of their definitions
(docs/evaluation.md item 9; training/evaluate/events.py's docstring), on hand-made
series: events at series edges, back-to-back events, an alert spanning an onset."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from training.evaluate.events import (
    Segment,
    block_cuts,
    event_counts,
    events,
    segment_counts,
    shifted_warned,
    split_segment,
    summary,
    threshold_at_budget,
    warning_curve,
)


def brute(seg: Segment, threshold: float, lookback: int) -> dict[str, object]:
    """Step by step, straight from the definitions, no searchsorted."""
    y = [int(v) for v in seg.labels]
    runs, t = [], 0
    while t < len(y):
        if y[t]:
            s = t
            while t < len(y) and y[t]:
                t += 1
            runs.append((s, t))
        else:
            t += 1
    alerts = [
        int(e) for e, sc in zip(seg.ends, seg.scores, strict=True) if sc >= threshold
    ]
    out: dict[str, object] = {"warned": 0, "late": 0, "missed": 0, "censored": 0}
    leads, delays, onsets = [], [], []
    for onset, offset in runs:
        if onset == 0:
            out["censored"] += 1  # type: ignore[operator]
            continue
        onsets.append(onset)
        before = [e for e in alerts if onset - lookback <= e <= onset]
        inside = [e for e in alerts if onset < e <= offset]
        if before:
            out["warned"] += 1  # type: ignore[operator]
            leads.append(onset - min(before))
        elif inside:
            out["late"] += 1  # type: ignore[operator]
            delays.append(min(inside) - onset)
        else:
            out["missed"] += 1  # type: ignore[operator]
    fa, pages, prev_alerting = 0, 0, False
    for e, sc in sorted(zip(seg.ends, seg.scores, strict=True)):  # in time order
        alerting = sc >= threshold
        if alerting:
            announces = any(e <= o <= e + lookback for o in onsets)
            false = not announces and not y[e - 1]
            fa += false
            pages += false and not prev_alerting  # an alert run begins falsely
        prev_alerting = alerting
    out |= {"events": len(onsets), "leads": leads, "delays": delays, "fa": fa}
    return out | {"pages": pages}


def check(seg: Segment, threshold: float, lookback: int) -> None:
    got = segment_counts(seg, threshold, lookback)
    want = brute(seg, threshold, lookback)
    assert (got.events, got.censored) == (want["events"], want["censored"])
    assert (got.warned, got.late, got.missed) == (
        want["warned"],
        want["late"],
        want["missed"],
    )
    assert sorted(got.leads) == sorted(want["leads"])  # type: ignore[arg-type]
    assert sorted(got.delays) == sorted(want["delays"])  # type: ignore[arg-type]
    assert got.false_alarms == want["fa"]
    assert got.false_pages == want["pages"] <= got.false_alarms
    assert got.warned + got.late + got.missed == got.events


def seg(labels: str, alerts: dict[int, float], n: int | None = None) -> Segment:
    """labels as a string of 0/1; windows ending at every step, score 0 unless given."""
    y = np.array([int(c) for c in labels])
    ends = np.arange(1, len(y) + 1)
    scores = np.array([alerts.get(int(e), 0.0) for e in ends])
    return Segment(y, ends, scores)


def test_events_are_maximal_runs() -> None:
    assert events(np.array([1, 1, 0, 1, 0, 0, 1])).tolist() == [[0, 2], [3, 4], [6, 7]]
    assert events(np.zeros(5)).shape == (0, 2)


def test_warned_with_lead_from_the_earliest_alert_in_the_lookback() -> None:
    s = seg("0000000000111100000", {4: 1.0, 7: 1.0, 9: 1.0})
    c = segment_counts(s, 0.5, lookback=6)  # onset 10; ends 4..10 count
    assert (c.events, c.warned, c.late, c.missed) == (1, 1, 0, 0)
    assert c.leads == [6]  # 10 - 4
    assert c.false_alarms == 0
    c = segment_counts(s, 0.5, lookback=2)  # only end 9 is close enough: lead 1
    assert c.leads == [1]
    assert c.false_alarms == 2  # ends 4 and 7 announce nothing within 2 steps
    assert c.false_pages == 2  # each begins its own run of alerting windows
    check(s, 0.5, 6)
    check(s, 0.5, 2)


def test_an_alert_spanning_the_onset_is_a_late_detection() -> None:
    # the window ending at 12 covers steps 2..11 (W = 10) and so spans the onset at 10
    s = seg("0000000000111100000", {12: 1.0})
    c = segment_counts(s, 0.5, lookback=5)
    assert (c.warned, c.late, c.missed) == (0, 1, 0)
    assert c.delays == [2]
    assert c.false_alarms == 0  # its last step (11) is inside the event
    check(s, 0.5, 5)


def test_a_run_of_false_alarms_is_one_false_page() -> None:
    """A pager notifies when a stream's alert starts: consecutive alerting windows
    are one page, false when its first window is a false alarm."""
    s = seg(
        "0000000000000000000011100", {3: 1.0, 4: 1.0, 5: 1.0, 8: 1.0, 16: 1.0, 17: 1.0}
    )
    c = segment_counts(s, 0.5, lookback=3)  # onset 20: ends 17..20 announce it
    # pages 3-5, 8 and 16-17: 16 is 4 steps before the onset, more than the look-back,
    # so that page began as a false alarm, as the protocol counts window 16
    assert (c.false_alarms, c.false_pages, c.warned) == (5, 3, 1)
    check(s, 0.5, 3)
    # a run that begins by announcing and runs on into false alarms is no false page
    s = seg("0000000000000110000000", {10: 1.0, 11: 1.0, 16: 1.0, 17: 1.0, 18: 1.0})
    c = segment_counts(s, 0.5, lookback=3)  # onset 13, event 13-14
    assert (c.false_alarms, c.false_pages) == (3, 1)  # 16-18 after the event: 1 page
    check(s, 0.5, 3)


def test_an_alert_ending_just_after_the_event_is_a_false_alarm() -> None:
    s = seg("0000000000111100000", {15: 1.0})  # last step 14: the event ended at 14
    c = segment_counts(s, 0.5, lookback=3)
    assert (c.warned, c.late, c.missed, c.false_alarms) == (0, 0, 1, 1)
    check(s, 0.5, 3)


def test_events_at_the_edges() -> None:
    # one already running at step 0 (censored), one running to the last step
    s = seg("1110000000000000011", {16: 1.0})
    c = segment_counts(s, 0.5, lookback=4)
    assert (c.events, c.censored, c.warned) == (1, 1, 1)
    assert c.leads == [1]
    s = seg("1110000000000000011", {19: 1.0})  # the last window, inside the event
    c = segment_counts(s, 0.5, lookback=4)
    assert (c.late, c.delays, c.false_alarms) == (1, [2], 0)
    check(s, 0.5, 4)


def test_back_to_back_events() -> None:
    # events at 5..7 and 9..11, one normal step between: an alert ending at 8 (last
    # step 7, inside the first) warns the second; one at 9 ends on the normal step
    s = seg("000001110111000000", {8: 1.0})
    c = segment_counts(s, 0.5, lookback=3)
    assert (c.events, c.warned, c.late, c.missed) == (2, 1, 1, 0)
    assert c.leads == [1] and c.delays == [3]
    check(s, 0.5, 3)
    s = seg("000001110111000000", {9: 1.0})
    c = segment_counts(s, 0.5, lookback=3)
    assert (c.warned, c.late, c.missed, c.false_alarms) == (1, 0, 1, 0)
    check(s, 0.5, 3)


@pytest.mark.parametrize("seed", range(40))
def test_random_series_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 200))
    y = (rng.random(n) < 0.08).astype(int)
    for i in range(1, n):  # make runs: an anomalous step tends to continue
        if y[i - 1] and rng.random() < 0.7:
            y[i] = 1
    stride = int(rng.integers(1, 6))
    ends = np.arange(int(rng.integers(1, 8)), n + 1, stride)
    s = Segment(y, ends, rng.random(len(ends)))
    for t in (0.0, 0.3, 0.7, 0.95, 1.1):
        for lookback in (1, 5, 17):
            check(s, t, lookback)


def test_sums_rates_and_summary() -> None:
    a = seg("0000000000111100000", {9: 1.0, 2: 1.0})
    b = seg("00000110000", {3: 1.0})
    c = event_counts([a, b], 0.5, lookback=3)
    assert (c.events, c.warned, c.false_alarms, c.windows) == (2, 2, 1, 30)
    assert c.warned_rate == 1.0
    assert c.false_alarms_per_1000 == pytest.approx(1000 / 30)
    out = summary(c, steps_per_day=1440)
    assert out["false_alarms_per_day"] == pytest.approx(1440 / 30)
    assert out["false_pages"] == 1 and out["false_pages_per_day"] == pytest.approx(
        1440 / 30
    )
    assert out["false_pages_per_1000_windows"] == pytest.approx(1000 / 30)
    assert out["lead_quartiles"] == [1.25, 1.5, 1.75]  # leads 1 and 2
    assert out["delay_quartiles"] is None


def test_curve_runs_from_every_window_to_none_and_budget_holds() -> None:
    rng = np.random.default_rng(3)
    segs = [
        Segment(np.r_[np.zeros(50), np.ones(5), np.zeros(45)], np.arange(1, 101), rng.random(100))
        for _ in range(3)
    ]  # fmt: skip
    curve = warning_curve(segs, lookback=10, n_thresholds=20)
    assert curve["warned_rate"][0] == 1.0  # everything alerts
    assert (
        curve["warned_rate"][-1] == 0.0
        and curve["false_alarms_per_1000_windows"][-1] == 0
    )
    fa = curve["false_alarms_per_1000_windows"]
    assert all(
        a >= b for a, b in itertools.pairwise(fa)
    )  # a higher threshold never adds one
    t = threshold_at_budget(segs, lookback=10, max_fa_per_1000=50.0)
    assert event_counts(segs, t, 10).false_alarms_per_1000 <= 50.0
    lower = max(s for s in np.concatenate([x.scores for x in segs]) if s < t)
    assert event_counts(segs, lower, 10).false_alarms_per_1000 > 50.0


def random_segment(rng: np.random.Generator) -> Segment:
    n = int(rng.integers(30, 300))
    y = (rng.random(n) < 0.05).astype(int)
    for i in range(1, n):
        if y[i - 1] and rng.random() < 0.8:
            y[i] = 1
    if rng.random() < 0.3:
        y[0] = 1  # a censored event
    stride = int(rng.integers(1, 6))
    ends = np.arange(int(rng.integers(1, 8)), n + 1, stride)
    return Segment(y, ends, rng.random(len(ends)))


@pytest.mark.parametrize("seed", range(40))
def test_blocks_sum_exactly_to_the_segment(seed: int) -> None:
    """The block bootstrap's premise: cut into blocks, every count (events, censored,
    warned with its leads, late with its delays, missed, false alarms, windows, steps)
    is the sum of the blocks' counts, at every threshold and look-back."""
    rng = np.random.default_rng(seed)
    s = random_segment(rng)
    for lookback in (1, 4, 17):
        blocks = split_segment(s, lookback)
        idx = np.concatenate([i for _, _, i in blocks])
        assert sorted(idx.tolist()) == list(range(len(s.ends)))  # each window once
        assert sum(len(b.labels) for _, b, _ in blocks) == len(s.labels)
        for t in (0.0, 0.4, 0.8, 1.1):
            whole = segment_counts(s, t, lookback)
            parts = event_counts([b for _, b, _ in blocks], t, lookback)
            for f in ("events", "censored", "warned", "late", "missed", "false_alarms",
                      "windows", "steps"):  # fmt: skip
                assert getattr(parts, f) == getattr(whole, f), (f, t, lookback)
            # an alert run crossing a cut is split there, and the window after a cut
            # announces the onset the cut precedes unless a stride skips past it
            stride = int(np.diff(s.ends).max(initial=1))
            if stride <= lookback + 1:
                assert parts.false_pages == whole.false_pages, (t, lookback)
            assert sorted(parts.leads) == sorted(whole.leads)
            assert sorted(parts.delays) == sorted(whole.delays)


def test_block_cuts_keep_events_and_their_lookback_whole() -> None:
    y = np.array([int(c) for c in "00000000001110000000000011000110000"])
    # onsets 10, 24, 29: cuts at onset - lookback - 1 where after the previous end
    assert block_cuts(y, 3).tolist() == [6, 20]  # 29 - 4 = 25 < 26 (end of 24..25)
    assert block_cuts(y, 12).tolist() == []  # 10 - 13 < 0; 24 - 13 = 11 < 13


def brute_shift_warned(seg: Segment, t: float, lookback: int, r: int) -> int:
    """Warned events when the alerts are rotated by r windows: window i gets the alert
    of window i - r (mod n)."""
    alerts = np.asarray(seg.scores) >= t
    rolled = np.roll(alerts, r)
    return segment_counts(
        Segment(seg.labels, seg.ends, rolled.astype(float)), 0.5, lookback
    ).warned


@pytest.mark.parametrize("seed", range(10))
def test_shifted_warned_is_the_warned_count_of_rotated_alerts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    segs = [random_segment(rng) for _ in range(3)]
    got = shifted_warned(segs, 0.7, 5, n_shifts=25, seed=seed)
    # replay the same rotations
    r_rng = np.random.default_rng(seed)
    want = np.zeros(25, dtype=int)
    for s in segs:
        rs = r_rng.integers(0, len(s.ends), 25)  # drawn for every segment
        if not len(events(s.labels)) or not (np.asarray(s.scores) >= 0.7).any():
            continue
        if not any(o > 0 for o, _ in events(s.labels).tolist()):
            continue
        want += [brute_shift_warned(s, 0.7, 5, int(r)) for r in rs]
    np.testing.assert_array_equal(got, want)
