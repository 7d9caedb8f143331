"""Incidents reported by operators, judged against the alerts the service raised.

An operator reports an incident on one of its streams (``POST /incidents``: the onset,
the timestamp of its first anomalous reading, and optionally its end); the service
judges it by the stream's alert log (:class:`service.store.AlertLog`: its windows in
alert, as their records said at the tenant's threshold) with the evaluation's rules
(docs/reference/results.md; evaluation.md item 9), so that what the model buys an
operator is measured on the operator's own streams, not only on a test split:

- **warned**: a window in alert ended before the onset, no more than the look-back L
  readings before it (L times the window's reading interval, ``(end - start) /
  (window - 1)``); its ``lead`` is the onset minus the end of the first window in
  alert of that run (consecutive windows, ``hop`` readings apart, in alert);
- **late**: not warned, and a window in alert ended within the incident (onset to end;
  the end defaults to the stream's newest reading when reported); ``delay`` = that
  window's end minus the onset;
- **missed**: neither;
- **unscored**: no window of the stream was scored before the onset (it could not be
  warned: not counted as missed);
- **unknown**: the alert log no longer reaches back to the onset's look-back (its
  oldest windows in alert were dropped past ``ALERT_LOG_LEN``).

The outcome is decided when the incident is reported (reporting its id again judges
it again). The gauges count, per tenant, the incidents reported in the last
:data:`SPAN_S` by outcome, and the quartiles of the warned ones' lead.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from service.store import AlertLog

SPAN_S = 30 * 86400  # the gauges' span: incidents reported in the last 30 days
Outcome = Literal["warned", "late", "missed", "unscored", "unknown"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@dataclass(frozen=True)
class Judged:
    outcome: Outcome
    end: float  # the incident's end as judged (given, or the stream's newest reading)
    lead_s: float | None = None  # warned: onset - end of the run's first alert window
    lead_readings: int | None = None
    delay_s: float | None = None  # late: end of the first alert window in it - onset
    delay_readings: int | None = None
    alert_window_end: float | None = None  # the window in alert the figure is of


def _interval(start: float, end: float, window: int) -> float:
    """A window's reading interval (seconds between readings)."""
    return (end - start) / max(window - 1, 1)


def judge(
    log: AlertLog,
    start: float,
    end: float | None,
    *,
    lookback: int,
    window: int,
    hop: int,
) -> Judged:
    """The outcome of an incident of onset ``start`` and end ``end`` (None: the
    stream's newest reading, or the onset if earlier) on a stream of alert log
    ``log``: the module's rules."""
    until = end if end is not None else max(start, log.last_ts or start)
    if log.first_end is None or log.first_end >= start:
        return Judged("unscored", until)
    if log.cut is not None:
        a, b = log.cut
        if b >= start - lookback * _interval(a, b, window):
            return Judged("unknown", until)
    alerting, ends = log.alerting, log.ends
    # the last window in alert that ended before the onset within the look-back: the
    # windows before k ended before it; none ending before the widest window's
    # look-back can be within its own
    k = bisect.bisect_left(ends, start)
    earliest = start - lookback * _interval(0.0, log.widest, window)
    last = None
    for i in range(k - 1, -1, -1):
        _, a, b, _ = alerting[i]
        if b < earliest:
            break
        if b >= start - lookback * _interval(a, b, window):
            last = i
            break
    if last is not None:
        i = last  # the run of the last window in alert before the onset
        while i > 0 and alerting[i - 1][0] == alerting[i][0] - hop:
            i -= 1
        _, a, b, _ = alerting[i]
        lead = start - b
        return Judged(
            "warned",
            until,
            lead_s=lead,
            lead_readings=round(lead / _interval(a, b, window)),
            alert_window_end=b,
        )
    if k < len(alerting) and ends[k] <= until:  # the first to end at or after it
        _, a, b, _ = alerting[k]
        delay = b - start
        return Judged(
            "late",
            until,
            delay_s=delay,
            delay_readings=round(delay / _interval(a, b, window)),
            alert_window_end=b,
        )
    return Judged("missed", until)


@dataclass(frozen=True)
class Tally:
    """A tenant's incidents reported in the gauges' span."""

    counts: dict[str, int]  # by outcome (every one of OUTCOMES)
    lead_quartiles_s: list[float] | None  # of the warned ones; None with none


def tally(outcomes: list[tuple[str, float | None]]) -> Tally:
    """Count incidents' (outcome, lead) by outcome, with the warned ones' lead
    quartiles."""
    got = Counter(o for o, _ in outcomes)
    leads = [lead for _, lead in outcomes if lead is not None]
    quartiles = np.quantile(leads, [0.25, 0.5, 0.75]).tolist() if leads else None
    return Tally({o: got[o] for o in OUTCOMES}, quartiles)
